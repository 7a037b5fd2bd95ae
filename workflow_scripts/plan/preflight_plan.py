"""The preflight stage's plan (rules/preflight.smk): which checks the sweep needs, where they write,
what a training job waits for, and the checks' settings, from config.yaml's preflight section.
rules/preflight.smk builds one PreflightPlan when the workflow is parsed; its methods that take `w`
are called by Snakemake with a job's wildcards."""

import json

from workflow_scripts.common import input_bound
from workflow_scripts.plan.sweep import FORMAT_OF, requests_gpus


class PreflightPlan:
    def __init__(self, config, sweep, points, long_test_gpus, env_keys, input_plan):
        """sweep: the config's plan.sweep.Sweep and `points` its sweep(); long_test_gpus: the long
        test's GPU counts; env_keys: {(system, framework): the config key of the runs' interpreter};
        input_plan: the config's plan.input_plan.InputPlan."""
        self.config, self.sweep, self.points, self.long_test_gpus = config, sweep, points, long_test_gpus
        self.env_keys, self.input_plan = env_keys, input_plan
        self.train, self.preflight = config["training"], config["preflight"]
        self.results = config["results_dir"]
        self.pairs = [(s, f) for s in self.train["systems"] for f in self.train["frameworks"]]

    def gpus(self, system):
        """Task counts of the system's checks: one node (all its tasks, or the sweep's largest run if
        smaller) and, where a run of the sweep or long test takes several nodes, two nodes."""
        per_node = self.config["systems"][system]["gpus_per_node"]
        counts = [g for g in [*self.train["gpus"], *self.long_test_gpus] if self.sweep.runnable_now(system, g)] or [1]
        out = [min(per_node, max(counts))]
        crossing = [self.sweep.placement(system, g)[1] for g in counts if self.sweep.placement(system, g)[0] > 1]
        return out + ([2 * min(crossing)] if crossing else [])

    def result(self, system, framework, gpus, kind=""):
        """A check's result file; kind "data" or "input" for the data and input checks."""
        return f"{self.results}/preflight/{system}/{framework}/{gpus}gpu{'.' + kind if kind else ''}.json"

    def ok(self, system, framework, kind=""):
        """A pair's gate file; kind "data" for its data gate."""
        return f"{self.results}/preflight/{system}/{framework}{'.' + kind if kind else ''}.ok"

    def data_result(self, system, framework, kind="data"):
        """The data (or input) check's result: it runs on the pair's first node."""
        return self.result(system, framework, self.gpus(system)[0], kind)

    def reads_data(self, system, framework):
        """Whether a pair's runs read its format (else they all run on synthetic input)."""
        return any(i != "synthetic" for i in self.sweep.run_inputs(system, framework)) or bool(self.long_test_gpus)

    def results_all(self):
        return [self.result(s, f, g) for s, f in self.pairs for g in self.gpus(s)]

    def oks(self):
        return [self.ok(s, f) for s, f in self.pairs]

    def pairs_reading(self):
        """The pairs whose data is checked, each by a job of its own, so that the environment checks
        need no conversion (hours on ILSVRC2012)."""
        return [(s, f) for s, f in self.pairs if self.reads_data(s, f)]

    def converted_now(self, exists):
        """The pairs reading data whose format is converted already (exists: whether a path exists):
        `snakemake preflight` checks only their data."""
        data = self.config["data_dir"]
        return [(s, f) for s, f in self.pairs_reading() if exists(f"{data}/{FORMAT_OF[f]}/manifest.json")]

    def passed(self, w):
        """The gates a training job of (system, framework) waits for: its environment's and, where the
        pair reads a dataset, its data's (none with preflight.gate false). The rules make them
        ancient: a preflight run again (and passed again) reruns no finished run."""
        if not self.preflight["gate"]:
            return []
        data = [self.ok(w.system, w.framework, "data")] if self.reads_data(w.system, w.framework) else []
        return [self.ok(w.system, w.framework), *data]

    def passed_system(self, w):
        """An interconnect job serves every framework's runs of its system: all their gates."""
        return [self.ok(w.system, f) for f in self.train["frameworks"]] if self.preflight["gate"] else []

    def system_results(self, w):
        """The checks of one system: its own table's input."""
        return [r for r in self.results_all() if r.startswith(f"{self.results}/preflight/{w.system}/")]

    def gate_results(self, w):
        return [self.result(w.system, w.framework, g) for g in self.gpus(w.system)]

    def args(self, w):
        """The checks' settings as argument words: preflight keys, the sweep's precisions, the system."""
        sysc, pre = self.config["systems"][w.system], self.preflight
        args = [
            "--timeout-s",
            pre["timeout_s"],
            "--level",
            "full" if pre["full_data_check"] else "sample",
            "--precisions",
            *self.train["precisions"],
            f"--env-key={self.env_keys[w.system, w.framework]}",
            "--cpus-per-task",
            sysc["cpus_per_task"],
            "--allreduce-elements",
            pre["allreduce_elements"],
        ]
        if requests_gpus(sysc):
            args += ["--require-gpu", f"--gpu-type={sysc['gpu_type']}"]
        if self.reads_data(w.system, w.framework):
            args += ["--data-later"]
        return [str(a) for a in args]

    def data_args(self, w):
        """The data check's settings: the pair's checks as args, the node checks only."""
        return [a for a in self.args(w) if a != "--data-later"] + ["--only-data"]

    def input_args(self, w):
        """The input check's settings (plan/input_plan.py). A job of its own, not the data check's: the
        settings follow the sweep's batch, image size and threads, and a data check run again for an
        edit of them would rerun the data gate, which Snakemake lets hold back the edited runs."""
        settings = self.input_plan.settings(w.system, w.framework, self.points)
        args = [a for a in self.args(w) if a != "--data-later"] + ["--only-input"]
        return args + ([f"--input-check={json.dumps(settings)}"] if settings else [])

    def judge_args(self):
        """How the tables judge the input check (preflight_data_table, training_tables): its tolerance
        and the input paths meant to be measured input-bound."""
        return input_bound.judge_argv(self.preflight)
