"""The sweep's price (workflow_scripts/plan/price.py): a doctored 8-node x 8-GPU cluster's plan,
its figures against arithmetic done by hand, each job's GPUs read from what its rule asks SLURM for,
a budget that refuses it naming the costliest, and the time limits set against what preflight
measured. Which job writes a file is Snakemake's matching, which the dry runs of
tests/test_price_is_the_plan.py check; here the plan's own points name each file's wildcards."""

import json

import pytest
from helpers import CONFIG, validated, with_overrides

from workflow_scripts.plan import price
from workflow_scripts.plan.int8_plan import Int8Plan
from workflow_scripts.plan.point_jobs import per_job
from workflow_scripts.plan.preflight_measured import Measured
from workflow_scripts.plan.slurm_job import JobShape
from workflow_scripts.plan.sweep import ConfigProblem, Sweep

pytestmark = pytest.mark.unit

H100 = {"gpus_per_node": 8, "max_nodes": 8, "gpu_request": "gpus-per-node", "cpus_per_task": 12, "time_min": 60}


class Plan:
    """A config's sweep, long test and preflight checks (8 and 16 GPUs: one node, two) as price.py
    is handed them, each file's wildcards from the point that names it."""

    def __init__(self, max_minutes=None, **overrides):
        settings = {
            "systems": {"h100": H100},
            "training__systems": ["h100"],
            "training__frameworks": ["tensorflow", "mxnet", "pytorch"],
            "training__precisions": ["fp32", "fp16"],
            "training__gpus": [1, 2, 4, 8, 16, 32, 64],
            "training__repeats": 3,
            "training__long_test__gpus": [],
        }
        self.config = validated(with_overrides(CONFIG, **{**settings, **overrides}))
        self.sweep = Sweep(self.config, embedded=False)
        self.sweep.max_minutes = max_minutes or {}
        self.shape = JobShape(self.config, self.sweep, {s: [] for s in self.config["systems"]})
        self.wildcards = {}
        self.points = self.sweep.sweep()
        for p in self.points + self.sweep.long_test():
            self.wildcards[f"{p['run_dir']}/summary.json"] = {"system": p["system"], "gpus": str(p["gpus"])}
        self.reader = price.Reader(self.config, lambda path: ("rule", self.wildcards[path]), 120)
        self.resources = per_job(self.shape.point_resources, self.points[0])

    def files(self, stage, jobs):
        """The files of jobs (system, name, GPUs) of a stage."""
        out = {f"results/{stage}/{s}/{name}/{g}gpu.json": {"system": s, "gpus": str(g)} for s, name, g in jobs}
        self.wildcards.update(out)
        return list(out)

    def jobs(self, measured=None, minutes=lambda path: None):
        t = self.config["training"]
        # each framework's environment checks on one node and on two, its data and its input check on one
        checks = [(s, f, g) for s in t["systems"] for f in t["frameworks"] for g in (8, 16)]
        checks += [(s, f"{f}.{kind}", 8) for s in t["systems"] for f in t["frameworks"] for kind in ("data", "input")]
        links = [(s, "torch", g) for s in t["systems"] for g in t["gpus"] if g > 1 and not self.sweep.skipped(s, g)]
        long_test = self.sweep.long_test()
        return [
            *price.training_jobs(self.reader, self.points, self.resources, self.sweep.point_group, minutes, measured),
            *price.long_test_jobs(self.reader, long_test, self.resources, t["long_test"]["max_jobs"], measured),
            *price.measured_checks(
                self.reader.jobs("preflight", self.files("preflight", checks), self.resources), measured
            ),
            *price.unmeasured(
                self.reader.jobs("interconnect", self.files("interconnect", links), self.resources),
                "nothing preflight measures times it",
            ),
        ]


def test_the_price_of_an_8_node_sweep_by_hand():
    plan = Plan()
    jobs = plan.jobs()
    s = price.summary(jobs)
    # training: 3 frameworks x 2 precisions = 6 points at each of 7 GPU counts, each point's 3 repeats
    # one job of 3 h (no MaxTime known); preflight: 3 frameworks x (1 node, 2 nodes) and each
    # framework's data and input checks on 1 node; interconnect: the 6 counts over 1 GPU
    assert s["by_stage"] == {"training": 42, "preflight": 12, "interconnect": 6}
    # nodes of 1, 2, 4, 8, 16, 32, 64 GPUs: 1, 1, 1, 1, 2, 4, 8
    assert s["by_nodes"] == {1: 6 * 4 + 9 + 3, 2: 6 + 3 + 1, 4: 6 + 1, 8: 6 + 1}
    node_hours = 6 * 3 * (1 + 1 + 1 + 1 + 2 + 4 + 8) + (9 + 3 * 2) + (1 + 1 + 1 + 2 + 4 + 8)  # 324 + 15 + 17
    assert s["node_hours_reserved"] == node_hours == 356
    assert s["gpu_hours_reserved"] == 8 * node_hours  # exclusive: every GPU of every node, even for 1 GPU
    assert s["largest"]["nodes"] == 8 and s["largest"]["gpus"] == 64
    assert s["estimate_sources"] == {price.LIMIT: 60} and s["gpu_hours_estimated"] == 2848
    three = [j for j in jobs if j["stage"] == "training" and j["name"] == "h100/pytorch_fp16_64gpu (3 runs in turn)"]
    assert len(three) == 1 and three[0]["time_min"] == 180 and three[0]["runs"] == 3
    assert [o.split("/")[3] for o in three[0]["outputs"]] == [f"pytorch_fp16_64gpu{r}" for r in ("", "_rep2", "_rep3")]


def test_a_partitions_max_time_splits_a_points_repeats_into_jobs_that_fit():
    """MaxTime 150 min at time_min 60: two runs a job, so each point's 3 repeats are 2 jobs (2 + 1)."""
    jobs = Plan(max_minutes={"gpu": 150}, systems={"h100": {**H100, "partition": "gpu"}}).jobs()
    training = [j for j in jobs if j["stage"] == "training"]
    assert len(training) == 6 * 7 * 2
    assert sorted({(j["runs"], j["time_min"]) for j in training}) == [(1, 60), (2, 120)]
    assert price.summary(jobs)["node_hours_reserved"] == 356  # the same reserve, in more jobs


def test_a_shared_node_is_charged_its_own_gpus_only():
    jobs = Plan(systems={"h100": {**H100, "exclusive": False}}, training__gpus=[1, 8], training__repeats=1).jobs()
    assert all("runs" not in j for j in jobs)  # one repeat: each run its own job
    training = [j for j in jobs if j["stage"] == "training"]
    assert sorted({j["gpus"] for j in training}) == [1, 8] and not any(j["exclusive"] for j in training)


def test_a_budget_under_the_reserve_is_refused_naming_the_costliest():
    jobs = Plan().jobs()
    price.check_budget(jobs, 2848)  # exactly the reserve: allowed
    price.check_budget(jobs, None)
    with pytest.raises(ConfigProblem) as e:
        price.check_budget(jobs, 2847)
    said = str(e.value)
    assert "budget_gpu_hours = 2847" in said and "2,848 GPU-hours" in said and "64gpu" in said


def test_earlier_runs_price_the_estimate():
    plan = Plan(training__gpus=[8, 16], training__frameworks=["pytorch"], training__precisions=["fp16"])
    took = {f"{plan.points[0]['run_dir']}/summary.json": 12.0}  # one run of the six has a job record
    jobs = price.training_jobs(plan.reader, plan.points, plan.resources, minutes=took.get)
    assert [j["estimate_source"] for j in jobs] == [price.MEASURED] + [price.SIMILAR] * 5
    assert all(j["estimate_min"] == 12.0 for j in jobs)
    assert price.summary(jobs)["gpu_hours_estimated"] == (3 * 8 + 3 * 16) * 12 / 60


def test_only_a_price_alone_escapes_the_budget():
    rules = ["all", "training", "price"]
    assert price.targets_only_price(["snakemake", "--profile", "slurm", "price"], rules)
    assert not price.targets_only_price(["snakemake", "price", "all"], rules)
    assert not price.targets_only_price(["snakemake", "--profile", "slurm"], rules)  # all, the default target


def test_an_int8_jobs_gpus_and_time_are_what_its_rule_asks_slurm_for():
    """TensorRT's builds and evaluations ask for one GPU of inference.system, its timed runs take the
    node alone (charged its 4 GPUs), ONNX Runtime's jobs are CPU jobs; each without a runtime of its
    own is given the profile's default-resources runtime (2 h), as sbatch gets it."""
    from helpers.systems import EXTRA, SYSTEMS

    config = validated(with_overrides(CONFIG, systems=SYSTEMS, training__systems=list(SYSTEMS)))
    sweep = Sweep(config, embedded=True)
    plan = Int8Plan(config, sweep, JobShape(config, sweep, EXTRA), {}, [])
    engine = {"engine": "tensorrt"}
    reader = price.Reader(config, lambda path: ("int8_engine", engine), price.default_minutes({"runtime": 120}))
    built = reader.job("INT8", "e", plan.resources(), "pernode")
    timed = reader.job("INT8", "t", plan.resources(measuring=True), "pernode")
    assert (built["gpus"], built["exclusive"], built["time_min"], built["gpu_job"]) == (1, False, 120, True)
    assert (timed["gpus"], timed["exclusive"], timed["nodes"]) == (4, True, 1)
    assert reader.job("INT8", "g", plan.resources(), "gres")["gpus"] == 1  # gres gpu:v100:1
    assert reader.job("INT8", "c", plan.resources(), "cpu")["gpus"] == 1  # no gpu_request: gpu=1, any type
    engine["engine"] = "onnxruntime"
    cpu = reader.job("INT8", "o", plan.resources(measuring=True), "pernode")
    assert (cpu["gpus"], cpu["exclusive"], cpu["gpu_job"]) == (0, False, False)
    assert price.summary([built, timed, cpu])["gpu_hours_reserved"] == (1 + 4) * 2
    assert price.summary([built, timed, cpu])["cpu_jobs"] == 1


def test_the_profiles_default_runtime_is_read_and_none_is_said():
    class Resource:  # Snakemake's: the value behind .value
        value = 120

    assert price.default_minutes({"runtime": Resource()}) == 120
    assert price.default_minutes(None) is None and price.default_minutes({}) is None
    reader = price.Reader(validated(with_overrides(CONFIG)), lambda path: ("r", {}), None)
    j = reader.job("INT8", "x", {"gpu": 1})
    assert j["time_min"] is None and price.summary([j])["no_time_limit"] == ["x"]
    assert "Not priced: 1 GPU job(s) without a time limit" in price.markdown([j])


STUDY = {"training__warmup_steps": 10, "training__steps": 100, "training__batch_per_gpu__pytorch": 64}


def preflight_results(folder):
    """What preflight wrote for h100/pytorch: its environment check at 8 GPUs (each precision's first
    kernel, 30 and 45 s; the job took 30 s) and its input check's synthetic run at 8 GPUs on one
    node (fp32 8,000 images/s, fp16 16,000: 1,000 and 2,000 a GPU)."""
    from workflow_scripts.preflight.check_rows import OK, row

    kernels = [row(f"kernel_{p}", OK, value=s, unit="s", rank=0) for p, s in (("fp32", 30.0), ("fp16", 45.0))]
    env = {"system": "h100", "framework": "pytorch", "part": "environment", "rows": kernels}
    timed = {
        p: {"gpus": 8, "nodes": 1, "images_per_s": r, "steps": 5} for p, r in (("fp32", 8000.0), ("fp16", 16000.0))
    }
    record = {"input_check": {"runs": {p: {"synthetic": t, "real": {}} for p, t in timed.items()}}}
    files = {
        "results/preflight/h100/pytorch/8gpu.json": {**env, "started_at": 1000.0, "ended_at": 1030.0},
        "results/preflight/h100/pytorch/8gpu.input.json": {
            "system": "h100",
            "framework": "pytorch",
            "part": "input",
            "rows": [],
            **record,
        },
    }
    for path, rec in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(json.dumps(rec))
    return list(files)


def test_preflights_step_rate_and_first_kernel_estimate_each_run_and_a_long_limit_is_named(tmp_path, monkeypatch):
    """A run of 10 + 100 steps of batch 64 (fp16: 128) at 1,000 images/s a GPU (fp16: 2,000) after a
    first kernel of 30 s (fp16: 45 s): 37.04 s (fp16 52.04 s) at any GPU count. Its limit of 60
    minutes is 69 times the longest estimate: named, with 2 x 0.87 min, in 5 minutes, as the
    suggestion."""
    monkeypatch.chdir(tmp_path)
    plan = Plan(training__frameworks=["pytorch"], training__gpus=[8, 16], **STUDY)
    measured = Measured(plan.config, preflight_results(tmp_path))
    jobs = plan.jobs(measured)
    runs = {j["name"]: j for j in jobs if j["stage"] == "training"}
    fp32, fp16 = runs["h100/pytorch_fp32_8gpu (3 runs in turn)"], runs["h100/pytorch_fp16_16gpu (3 runs in turn)"]
    assert fp32["estimate_source"] == fp16["estimate_source"] == price.PREFLIGHT
    assert fp32["estimate_min"] == pytest.approx(3 * (30 + 110 * 64 / 1000) / 60)
    assert fp16["estimate_min"] == pytest.approx(3 * (45 + 110 * 128 / 2000) / 60)
    check = next(j for j in jobs if j["name"] == "results/preflight/h100/pytorch/8gpu.json")
    assert (check["estimate_source"], check["estimate_min"]) == (price.MEASURED, 0.5)  # its own 30 s
    row = price.time_limits(jobs)["systems.h100.time_min"]
    assert row["estimate_min"] == pytest.approx(52.04 / 60) and row["longest"].startswith("h100/pytorch_fp16")
    assert row["suggested"] == 5 and row["long"]
    said = price.markdown(jobs, measured.found)
    assert "| `systems.h100.time_min` | 60 min | 0.9 min (h100/pytorch_fp16_" in said, said
    assert "the limit is 69x the estimate" in said and "No preflight result yet" not in said
    # the other preflight checks and the interconnect jobs share the limit and are not estimated: said
    whys = {why for _, why in row["unestimated"]}
    assert "(not for the" in said and whys == {"it has not run yet", "nothing preflight measures times it"}


def test_a_limit_under_ten_times_the_estimate_is_not_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = Plan(systems={"h100": {**H100, "time_min": 5}}, training__frameworks=["pytorch"], **STUDY)
    jobs = plan.jobs(Measured(plan.config, preflight_results(tmp_path)))
    row = price.time_limits(jobs)["systems.h100.time_min"]
    assert row["limit"] == 5 and not row["long"] and "x the estimate" not in price.markdown(jobs, 2)


def test_without_a_preflight_result_the_price_says_so_and_estimates_nothing_from_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = Plan(training__frameworks=["pytorch"], **STUDY)
    measured = Measured(plan.config, ["results/preflight/h100/pytorch/8gpu.json"])  # not written yet
    jobs = plan.jobs(measured)
    assert measured.found == 0 and {j["estimate_source"] for j in jobs} == {price.LIMIT}
    assert all(row["estimate_min"] is None for row in price.time_limits(jobs).values())
    said = price.markdown(jobs, measured.found)
    assert "No preflight result yet" in said and "nothing is estimated from it" in said and "suggested" not in said
    price.write(jobs, tmp_path / "price.md", tmp_path / "price.json", preflight_found=0)
    written = json.loads((tmp_path / "price.json").read_text())
    assert written["time_limits"]["systems.h100.time_min"]["suggested"] is None
