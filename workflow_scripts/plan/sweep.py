"""The sweep: the training runs a validated config asks for (system x framework x precision x GPUs
x input path x repeat), where each is placed and where it writes, and the long test's runs beside
them. rules/common.smk builds one Sweep when the workflow is parsed; a config that cannot be run as
written raises ConfigProblem, naming the key.
"""

from workflow_scripts.common.frameworks import REGISTRY

FORMAT_OF = {f.name: f.data_format for f in REGISTRY.values()}
TRAINER_OF = {f.name: f.trainer for f in REGISTRY.values()}

# The input axis (training.inputs): where a run's batches come from, each framework's paths in its
# record (common/frameworks.py). TensorFlow and MXNet have one real-data path each (tf.data,
# ImageRecordIter: decoding on the CPU); PyTorch has three (cpu: Pillow in DataLoader workers; gpu:
# nvJPEG in a thread; dali: NVIDIA DALI, the hardware JPEG engine). auto is a framework's best path
# on the system's device (its record's gpu_input on a GPU, cpu on a CPU). synthetic: random
# tensors, no I/O.
INPUT_PATHS = {f.name: f.inputs for f in REGISTRY.values()}


class ConfigProblem(ValueError):
    """A config the workflow cannot run as written; the message names the key."""


def requests_gpus(system_config):
    """Whether a system (an entry of config systems) asks SLURM or the machine for GPUs."""
    return system_config["gpu_request"] != "none"


def repeat_suffix(repeat):
    """A point's first run keeps the plain name (a config of one repeat has the run directories it
    always had); the others end in _rep<k>."""
    return "" if repeat == 1 else f"_rep{repeat}"


def repeat_of(suffix):
    """The repeat a run directory's suffix names: repeat_suffix backwards ("" is 1)."""
    return int(suffix.removeprefix("_rep") or 1)


class Sweep:
    def __init__(self, config, embedded):
        """config: the validated config; embedded: whether the dataset is the embedded default."""
        self.config, self.train, self.embedded = config, config["training"], embedded
        self.results = config["results_dir"]
        self.accuracy = self.train["long_test"]
        # {(system, GPUs): why}: points too few of whose partition's nodes are up now (set from
        # cluster_checks.check_cluster where sinfo answers); systems.<name>.nodes_down decides
        self.short_now = {}
        # {partition: MaxTime in minutes} where sinfo answers (rules/common.smk): how many of a
        # point's runs fit one allocation (runs_per_job)
        self.max_minutes = {}

    def skipped(self, system, gpus):
        """A point left out of the plan: too few nodes up now and its system's nodes_down is skip."""
        return (system, gpus) in self.short_now and self.config["systems"][system]["nodes_down"] == "skip"

    def runnable_now(self, system, gpus):
        return (system, gpus) not in self.short_now

    def short_lines(self):
        """What becomes of each point too few of whose nodes are up, one line each."""
        return [
            f"dlscale: {system} at {gpus} GPUs "
            + ("skipped" if self.skipped(system, gpus) else "planned, waiting in SLURM's queue for its nodes")
            + f" (systems.{system}.nodes_down = {self.config['systems'][system]['nodes_down']}): {why}"
            for (system, gpus), why in sorted(self.short_now.items())
        ]

    def placement(self, system, gpus, key="training.gpus"):
        """(nodes, processes per node) for `gpus` on `system`; an impossible point is a parse-time
        error, not a job that waits in the queue forever."""
        sysc = self.config["systems"][system]
        per_node = sysc["gpus_per_node"]
        nodes = -(-gpus // per_node)
        if nodes > sysc["max_nodes"] or gpus % nodes:
            raise ConfigProblem(
                f"config {key} = {gpus} cannot be placed on system {system!r}: {per_node} GPUs per "
                f"node, at most {sysc['max_nodes']} node(s), and the GPUs must split evenly over the nodes"
            )
        return nodes, gpus // nodes

    def effective_input(self, system, framework, requested):
        """The input path `requested` means for this framework on this system, or None where the
        framework has no such path (the point is left out of the sweep)."""
        if requested == "auto":
            gpu = requests_gpus(self.config["systems"][system])
            return REGISTRY[framework].gpu_input if gpu else "cpu"
        return requested if requested in INPUT_PATHS[framework] else None

    def run_inputs(self, system, framework):
        """The distinct input paths the sweep runs for this framework on this system, in config order."""
        found = [self.effective_input(system, framework, i) for i in self.train["inputs"]]
        return list(dict.fromkeys(i for i in found if i))

    def input_suffix(self, system, framework, path):
        """A run of the framework's own default path keeps the plain name, so the sweep of a config
        without other paths has the same run directories as before the input axis."""
        return "" if path == self.effective_input(system, framework, "auto") else f"_{path}"

    def repeats(self, system):
        """training.repeats: auto is 3 on a system that requests GPUs, so every verdict there rests on
        an interval over runs (docs/results.md#verdict-guards); 1 on a CPU system, whose figures are
        no verdict's."""
        value = self.train["repeats"]
        if value != "auto":
            return value
        return 3 if requests_gpus(self.config["systems"][system]) else 1

    def runs_per_job(self, system):
        """How many of a point's runs share one SLURM allocation, one after another (each its own
        run: its cache cleared, its own isolation record; docs/slurm.md#a-points-runs-share-one-job):
        all its repeats, or as many as fit the partition's MaxTime at systems.<name>.time_min each."""
        sysc = self.config["systems"][system]
        limit = self.max_minutes.get(sysc["partition"])
        fit = limit // sysc["time_min"] if limit and sysc["time_min"] else None
        return max(1, min(self.repeats(system), fit or self.repeats(system)))

    def job_group(self, system, framework, precision, gpus, variant, repeat):
        """The Snakemake group (one SLURM job) of a sweep run: a point's runs_per_job() runs in turn,
        parts numbered where its repeats need more than one; None for a run alone in its job."""
        per_job = self.runs_per_job(system)
        if per_job == 1:
            return None
        name = f"train_{system}_{framework}_{precision}_{gpus}gpu{variant}"
        parts = -(-self.repeats(system) // per_job)
        return name if parts == 1 else f"{name}_part{(repeat - 1) // per_job + 1}"

    def point_group(self, point):
        """job_group of a point of sweep()."""
        p = point
        variant = self.input_suffix(p["system"], p["framework"], p["input"])
        return self.job_group(p["system"], p["framework"], p["precision"], p["gpus"], variant, p["repeat"])

    def run_dir(self, system, framework, precision, gpus, path=None, repeat=1):
        path = path or self.effective_input(system, framework, "auto")
        suffix = self.input_suffix(system, framework, path) + repeat_suffix(repeat)
        return f"{self.results}/runs/{system}/{framework}_{precision}_{gpus}gpu{suffix}"

    def long_test_run_dir(self, system, framework, precision, gpus):
        return f"{self.results}/runs/{system}/accuracy/{framework}_{precision}_{gpus}gpu"

    def long_test_gpus(self):
        """training.long_test.gpus: auto is the embedded default's long test (2 processes, its 3 short
        epochs) and none on a real dataset, where a long test is hours of a cluster: one runs there
        only where the config asks for it (docs/long-test.md)."""
        value = self.accuracy["gpus"]
        if value != "auto":
            return value
        return [2] if self.embedded else []

    def check_long_test(self):
        """A schedule that cannot run as written is a ConfigProblem now, naming the key."""
        epochs, milestones = self.accuracy["epochs"], self.accuracy["milestones"]
        if any(b <= a for a, b in zip(milestones, milestones[1:])) or any(m >= epochs for m in milestones):
            raise ConfigProblem(
                f"config training.long_test.milestones = {milestones}: epochs at which the learning rate "
                f"decays, rising, each before the last epoch (training.long_test.epochs = {epochs})"
            )
        if self.accuracy["warmup_epochs"] >= epochs:
            raise ConfigProblem(
                f"config training.long_test.warmup_epochs = {self.accuracy['warmup_epochs']}: the warm-up "
                f"must end before the last epoch (training.long_test.epochs = {epochs})"
            )

    def _points(self, gpu_counts, key, where, inputs, runs=lambda s: 1):
        t = self.train
        return [
            {
                "system": s,
                "framework": f,
                "precision": p,
                "gpus": g,
                "input": i,
                "repeat": r,
                "nodes": self.placement(s, g, key)[0],
                "gpu_request": self.config["systems"][s]["gpu_request"],
                "run_dir": where(s, f, p, g, i, r),
            }
            for s in t["systems"]
            for f in t["frameworks"]
            for p in t["precisions"]
            for g in gpu_counts
            if not self.skipped(s, g)
            for i in inputs(s, f)
            for r in range(1, runs(s) + 1)
        ]

    def sweep(self):
        """The sweep (the short test): training.repeats runs per point and input path."""
        points = self._points(self.train["gpus"], "training.gpus", self.run_dir, self.run_inputs, self.repeats)
        if not points:
            frameworks = self.train["frameworks"]
            raise ConfigProblem(
                f"config training.inputs = {self.train['inputs']}: no framework in training.frameworks has any "
                f"of these input paths ({', '.join(f'{f}: {list(INPUT_PATHS[f])}' for f in frameworks)})"
            )
        return points

    def long_test(self):
        """The scale-out whitepaper's long test, beside the sweep: the same systems, frameworks and
        precisions at its GPU counts, on real data through each framework's default input path."""
        return self._points(
            self.long_test_gpus(),
            "training.long_test.gpus",
            lambda s, f, p, g, i, r: self.long_test_run_dir(s, f, p, g),
            lambda s, f: [self.effective_input(s, f, "auto")],
        )
