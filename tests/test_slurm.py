"""The pipeline on a real two-node SLURM cluster (benchmarks/slurm_cluster.py): `snakemake --profile
slurm all` on the embedded dataset (small images and batches), every training run and the
interconnect measurement spanning both nodes with one task each, checked from their own outputs;
placement errors at parse time; SLURM's reason for a job that waits; a cancelled (pre-empted) run
retried with its log kept."""

import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
import yaml
from helpers import REPO, SNAKEMAKE, as_a_user, interpreter, slurm_test_cluster, write_config
from helpers.hostile import MARK, markers

from benchmarks import slurm_cluster
from workflow_scripts.common import failed_runs
from workflow_scripts.train import watchdog

FRAMEWORKS = ("tensorflow", "mxnet", "pytorch")
SYSTEM = {
    "gpus_per_node": 1,
    "max_nodes": 2,
    "partition": slurm_cluster.PARTITION,
    # One of a node's two CPUs: a job of one CPU would fit beside each run, unless the run holds its
    # nodes alone (systems.<name>.exclusive, on by default).
    "cpus_per_task": 1,
    "mem_mb": 3000,
    "time_min": 30,
}
# What the test profile must change in the user's profile, and nothing else: this cluster's
# partition, and polling that suits a cluster without slurmdbd (sacct would fail) and 2-second jobs.
PROFILE_CHANGES = {
    "slurm-status-command": "squeue",
    "seconds-between-status-checks": 2,
    "slurm-init-seconds-before-status-checks": 2,
}


@pytest.fixture(scope="module")
def cluster():
    yield from slurm_test_cluster.started()


@pytest.mark.unit
def test_profile_is_found_from_the_repository_root():
    user = yaml.safe_load((REPO / "slurm" / "config.yaml").read_text())
    assert user["executor"] == "slurm" and (REPO / "slurm").resolve() == (REPO / "profiles" / "slurm").resolve()


def make_test_profile(work):
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    profile["default-resources"]["slurm_partition"] = slurm_cluster.PARTITION
    profile.update(PROFILE_CHANGES)
    d = work / "profile"
    d.mkdir(exist_ok=True)
    (d / "config.yaml").write_text(yaml.safe_dump(profile))
    return d


# The run's directories and sbatch flags are strings a shell would run (test_shell_safety.py):
# here they go through sbatch, the job step and srun on two nodes.
DIRS = {
    key: f"{name} $(touch {MARK}-{name}) `touch {MARK}-{name}`; &"
    for key, name in (("data_dir", "data"), ("log_dir", "logs"), ("results_dir", "results"))
}
SBATCH_EXTRA = f"--mail-type=NONE --mail-user='x $(touch {MARK}-sbatch)'"


# What this run proves is the launch (every job but the Snakefile's localrules through sbatch, each
# run's ranks on both nodes, the hostile strings through sbatch, the job step and srun), not what
# the sizes measure: the embedded default's figures come from its local run (pipeline_run), so the
# images, batches and INT8 timings here are the smallest the stages take.
SMALL = {
    "training__image_size": 32,
    "training__batch_per_gpu": {"tensorflow": 4, "mxnet": 4, "pytorch": 4},
    "training__warmup_steps": 2,
    "training__steps": 6,
    "inference__image_size": 32,
    "inference__calibration__batches": 1,
    "inference__calibration__histogram_bins": 256,
    "inference__throughput__batch_sizes": [1, 2],
    "inference__throughput__warmup": 1,
    "inference__throughput__repeats": 2,
    "interconnect__max_bytes": 2**20,
    "interconnect__warmup": 1,
    "interconnect__iterations": 3,
}


def cluster_config(work, **overrides):
    """The embedded dataset on this cluster: one system of 1-task nodes, runs of 2 (both nodes); no
    job asks for more CPUs than a node has (a local run caps threads at --cores, SLURM does not).
    Without the scale-out whitepaper's long test (tests/test_long_test.py runs it locally): it would
    add minutes of training to this run. The interpreters are bare ones, as a cluster's module or
    image has them: every job, and every rank on both nodes, finds the stage modules from the
    workflow's folder, the working directory being `work`."""
    write_config(
        work,
        bare=True,
        **{
            "systems": {"cluster": dict(SYSTEM, sbatch_extra=SBATCH_EXTRA)},
            "training__systems": ["cluster"],
            "training__gpus": [2],
            "training__long_test__gpus": [],
            "training__cache_clear": "node",  # as on a cluster; the two nodes share this machine's kernel
            "conversion__threads": 2,
            "inference__threads": 2,
            **SMALL,
            **DIRS,
            **overrides,
        },
    )


def run_snakemake(work, *args, timeout=1800):
    """`snakemake --profile slurm` from `work`, as a user runs it: no PYTHONPATH of the tests'."""
    return subprocess.Popen(
        [
            SNAKEMAKE,
            "--snakefile",
            str(REPO / "Snakefile"),
            "--directory",
            str(work),
            "--profile",
            str(make_test_profile(work)),
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=as_a_user(),
    )


def squeue(*fields):
    out = subprocess.run(["squeue", "-h", "-o", "|".join(fields)], capture_output=True, text=True, timeout=30).stdout
    return [line.split("|") for line in out.splitlines()]


def cancel_first_running(words, started, seen, stop):
    """Cancel the first running job whose comment (rule and wildcards) matches, once it has
    started its work (the file `started` exists): the cluster pre-empts a run."""
    while not stop.is_set():
        for job, state, comment in squeue("%i", "%T", "%k"):
            if state == "RUNNING" and all(w in comment for w in words) and started.exists():
                subprocess.run(["scancel", job], timeout=30)
                seen.append(job)
                return
        time.sleep(1)


def submit_beside(words, seen, stop):
    """Once a run whose comment matches is running, submit a job of one CPU beside it, then note,
    every second while both are in the queue, each one's state and nodes."""
    while not stop.is_set():
        running = [
            (job, nodes)
            for job, state, comment, nodes in squeue("%i", "%T", "%k", "%N")
            if state == "RUNNING" and all(w in comment for w in words)
        ]
        if running:
            break
        time.sleep(1)
    else:
        return
    job, _ = running[0]
    beside = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "-N1",
            "-n1",
            "-c1",
            "--mem=100",
            "-p",
            slurm_cluster.PARTITION,
            "--output=/dev/null",  # not a slurm-<job>.out in the repository
            "--comment",
            "beside",
            "--wrap",
            "sleep 1",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()
    while not stop.is_set():
        queue = {j: (state, nodes) for j, state, nodes in squeue("%i", "%T", "%N")}
        if job not in queue or beside not in queue:
            break
        seen.append({"run": job, "run_state": queue[job], "beside": beside, "beside_state": queue[beside]})
        time.sleep(1)


@pytest.fixture(scope="module")
def slurm_run(cluster, tmp_path_factory):
    work = tmp_path_factory.mktemp("slurm")
    cluster_config(work)
    cancelled, beside, stop = [], [], threading.Event()
    first_log = work / DIRS["log_dir"] / "train" / "cluster" / "pytorch_fp32_2gpu.log.attempt1"
    watchers = [
        threading.Thread(
            target=cancel_first_running, args=(("rule_train", "pytorch"), first_log, cancelled, stop), daemon=True
        ),
        threading.Thread(target=submit_beside, args=(("rule_train", "tensorflow"), beside, stop), daemon=True),
    ]
    for w in watchers:
        w.start()
    proc = run_snakemake(work, "all")
    try:
        out, _ = proc.communicate(timeout=1800)
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, f"snakemake --profile slurm all failed:\n{out[-6000:]}\n{cluster.logs()}"
    return work, out, cancelled, beside


LOCALRULES = re.compile(r"^\s+(\w+),?$", re.M)


def run_of(work, framework):
    return work / DIRS["results_dir"] / "runs" / "cluster" / f"{framework}_fp32_2gpu"


@pytest.mark.pipeline
def test_the_sweep_ran_from_a_scratch_folder_with_interpreters_that_lack_this_project(slurm_run):
    """Every job went through sbatch and its ranks through srun on both nodes with `work` as the
    working directory and interpreters without this project: the stage modules came from the
    workflow's folder (sbatch's and srun's exported PYTHONPATH, the job's own parse)."""
    work, *_ = slurm_run
    assert REPO.resolve() not in work.resolve().parents
    envs = yaml.safe_load((work / "config.yaml").read_text())["envs"]
    for env, python in envs.items():
        assert python != interpreter(env)
        found = subprocess.run(
            [python, "-c", "import workflow_scripts"], cwd=work, env=as_a_user(), capture_output=True, text=True
        )
        assert "No module named 'workflow_scripts'" in found.stderr, (env, found.stderr[-2000:])


@pytest.mark.pipeline
def test_no_config_string_ran_as_a_command(slurm_run):
    work, *_ = slurm_run
    assert markers(work) == []


@pytest.mark.pipeline
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_ranks_ran_on_two_nodes_and_averaged_their_gradients(slurm_run, framework):
    work, *_ = slurm_run
    run = run_of(work, framework)
    ranks = [json.loads((run / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert {r["node"] for r in ranks} == {"n1", "n2"}
    assert [r["launch"]["source"] for r in ranks] == ["slurm", "slurm"]
    assert ranks[0]["launch"]["job_id"] == ranks[1]["launch"]["job_id"] != ""
    assert [(r["launch"]["rank"], r["launch"]["world_size"], r["launch"]["num_nodes"]) for r in ranks] == [
        (0, 2, 2),
        (1, 2, 2),
    ]
    # Same weights on both ranks after the first step: the step's gradients were averaged
    # across the nodes (each rank read different images).
    assert ranks[0]["weights_sha256"] == ranks[1]["weights_sha256"]
    assert ranks[0]["weights_sha256"]["after_step_1"] != ranks[0]["weights_sha256"]["final"]
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["num_nodes"], summary["world_size"]) == (2, 2)
    if framework == "pytorch":  # ddp_graph auto: across nodes the all-reduce overlaps the backward pass
        assert summary["pytorch"]["ddp_graph"] == "split"


@pytest.mark.pipeline
def test_measuring_jobs_hold_their_nodes_alone(slurm_run):
    """Every run was submitted with --exclusive (SLURM's own word, recorded in its summary), cleared
    its nodes' caches node-wide only because of that, and a job of one CPU submitted beside a run
    that left a CPU free on each node waited instead of sharing them."""
    work, _, _, beside = slurm_run
    for framework in FRAMEWORKS:
        s = json.loads((run_of(work, framework) / "summary.json").read_text())
        assert s["slurm"]["exclusive"] is True and s["slurm"]["oversubscribe"] == "NO", s["slurm"]
        assert s["cache_scope"] == {"configured": "node", "used": "node", "why": ""}
        assert s["isolation"]["isolated"] in (True, False) and set(s["isolation"]["nodes"]) == {"n1", "n2"}
    assert beside, "the TensorFlow run was never seen running with the job beside it queued"
    # The run holds both of the cluster's nodes: the job beside it never runs while it does.
    assert all(not (b["beside_state"][0] == "RUNNING" and b["run_state"][0] == "RUNNING") for b in beside), beside
    assert any(b["beside_state"][0] == "PENDING" for b in beside), beside


@pytest.mark.pipeline
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_caches_cleared_and_telemetry_on_every_node(slurm_run, framework):
    work, *_ = slurm_run
    run = run_of(work, framework)
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary["page_cache"]) == {"n1", "n2"}
    assert all(r["node"] == n and r["after"]["resident_bytes"] == 0 for n, r in summary["page_cache"].items())
    assert sorted(p.name for p in run.glob("telemetry.*.csv")) == ["telemetry.n1.csv", "telemetry.n2.csv"]


@pytest.mark.pipeline
def test_interconnect_measured_across_both_nodes(slurm_run):
    """The interconnect stage at the runs' point (2 GPUs = 2 nodes of 1 task): one world of 2 ranks,
    one on each node, started by srun as the training runs are; its table says inter-node."""
    work, *_ = slurm_run
    results = work / DIRS["results_dir"]
    raw = json.loads((results / "interconnect" / "cluster" / "2gpu" / "torch.json").read_text())
    assert (raw["world_size"], raw["num_nodes"], sorted(raw["rank_hosts"])) == (2, 2, ["n1", "n2"])
    assert raw["launch"]["source"] == "slurm" and raw["launch"]["job_id"] != "" and raw["backend"] == "gloo"
    assert all(len(r["per_rank_s"]) == 2 for r in raw["results"])
    log = (work / DIRS["log_dir"] / "interconnect" / "cluster" / "2gpu.torch.log").read_text()
    assert "srun --nodes=2 --ntasks=2 --ntasks-per-node=1" in log
    table = (results / "interconnect.csv").read_text().splitlines()
    assert len(table) > 1 and all(",inter-node," in line for line in table[1:])
    # the prediction takes the network from those all-reduces (or says why it could not fit them)
    predicted = pd.read_csv(results / "scaling_prediction.csv")
    assert len(predicted) and (predicted["inter_from"] != "no all-reduce across nodes was timed").all()


@pytest.mark.pipeline
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_preflight_passed_on_one_node_and_across_both(slurm_run, framework):
    """Preflight ran before the sweep, launched as training is: each framework's checks on one node
    and, since the sweep crosses nodes, on both, the all-reduce through its own path spanning n1 and
    n2, every check ok or not applicable, and the pair's gate written."""
    work, *_ = slurm_run
    results = work / DIRS["results_dir"]
    assert (results / "preflight" / "cluster" / f"{framework}.ok").exists()
    one, both = (
        json.loads((results / "preflight" / "cluster" / framework / f"{n}gpu.json").read_text()) for n in (1, 2)
    )
    assert (one["nodes"], one["tasks"], both["nodes"], both["tasks"]) == (1, 1, 2, 2)
    for res in (one, both):
        assert res["status"] == "ok" and {r["status"] for r in res["rows"]} <= {"ok", "not applicable"}, res
    checks = {r["check"]: r for r in both["rows"]}
    assert checks["allreduce"]["status"] == "ok" and set(checks["allreduce"]["node"].split(",")) == {"n1", "n2"}
    assert {"cpus", "kernel_fp32", "dataset", "page_cache"} <= set(checks), sorted(checks)
    log = Path(both["log"]) if Path(both["log"]).is_absolute() else work / both["log"]
    assert "srun --nodes=2 --ntasks=2 --ntasks-per-node=1" in log.read_text()


@pytest.mark.pipeline
def test_every_job_went_through_slurm_but_the_localrules(slurm_run):
    work, out, *_ = slurm_run
    submitted = re.findall(r"has been submitted with SLURM jobid \d+ \(log: \S*/slurm_logs/rule_(\w+)/", out)
    local = set(LOCALRULES.findall((REPO / "Snakefile").read_text().split("localrules:", 1)[1].split("\n\n")[0]))
    assert {"preflight_gate", "training_tables", "conclusions"} <= local, local
    assert not local & set(submitted), sorted(local & set(submitted))
    stages = {"embedded_dataset", "tfrecord", "preflight_check", "train", "interconnect_collectives", "int8_calibrate"}
    assert stages <= set(submitted), out[-3000:]
    # Three training runs and the retry of the cancelled one.
    assert submitted.count("train") == 3 + 1, submitted
    for fw in FRAMEWORKS:
        log = (work / DIRS["log_dir"] / "train" / "cluster" / f"{fw}_fp32_2gpu.log").read_text()
        assert "srun --nodes=2 --ntasks=2 --ntasks-per-node=1" in log


@pytest.mark.pipeline
def test_cancelled_run_is_retried_and_its_log_kept(slurm_run):
    work, _, cancelled, _ = slurm_run
    assert len(cancelled) == 1, "the watcher never saw the PyTorch run running"
    log = work / DIRS["log_dir"] / "train" / "cluster" / "pytorch_fp32_2gpu.log"
    first = log.with_name(log.name + ".attempt1").read_text()
    assert first.startswith(f"attempt 1 on n1, SLURM job {cancelled[0]}")
    assert log.read_text().startswith("attempt 2 on n1, SLURM job ")
    assert log.with_name(log.name + ".attempt2").read_text() == log.read_text()
    assert json.loads((run_of(work, "pytorch") / "summary.json").read_text())["timed_steps"] == SMALL["training__steps"]


@pytest.mark.pipeline
def test_point_the_partition_cannot_hold_fails_at_parse_time(cluster, tmp_path):
    cluster_config(tmp_path, systems={"cluster": dict(SYSTEM, max_nodes=3)}, training__gpus=[3])
    proc = subprocess.run(
        [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path), "-n"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "systems.cluster (training.gpus = 3)" in out and "has 2 usable node(s)" in out and "needs 3" in out


@pytest.mark.pipeline
def test_waiting_job_is_reported_with_slurms_reason(cluster):
    job = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--hold",
            "--output=/dev/null",  # not a slurm-<job>.out in the repository
            "--comment",
            "rule_train_wildcards_x",
            "--wrap",
            "true",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()
    try:
        proc = subprocess.run(
            [interpreter("workflow"), "-m", "workflow_scripts.cluster.slurm", "pending"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        line = next(ln for ln in proc.stdout.splitlines() if ln.startswith(job))
        assert "rule_train_wildcards_x" in line and "reason: JobHeldUser" in line
    finally:
        subprocess.run(["scancel", job], timeout=30)


@pytest.mark.stage
def test_cluster_jobs_ask_slurm_for_their_stages_own_cpus(tmp_path):
    """`--profile slurm` from a login node smaller than the jobs (the workflow's local profile caps
    threads at its cores): the data and INT8 jobs still ask SLURM for conversion.threads and
    inference.threads, not the login node's cores. Dry run: no cluster needed."""
    wanted = (os.cpu_count() or 1) + 6
    write_config(tmp_path, conversion__threads=wanted, inference__threads=wanted + 1)
    proc = subprocess.run(
        [
            SNAKEMAKE,
            "--snakefile",
            str(REPO / "Snakefile"),
            "--directory",
            str(tmp_path),
            "--profile",
            str(REPO / "slurm"),
            "-n",
            "all",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    asked = {}
    for job in proc.stdout.split("\n\n"):
        rule = re.search(r"^rule (\w+):", job, re.M)
        cpus = re.search(r"cpus_per_task=(\d+)", job)
        if rule and cpus:
            asked.setdefault(rule.group(1), set()).add(int(cpus.group(1)))
    for rule in ("index_dataset", "tfrecord", "recordio", "lmdb"):
        assert asked[rule] == {wanted}, (rule, asked)
    for rule in ("int8_export", "int8_calibrate", "int8_engine", "int8_evaluate", "int8_throughput_run"):
        assert asked[rule] == {wanted + 1}, (rule, asked)


# --- faults that would burn allocations (train/job_stop.py): a time limit, a cancel ---

FAKE_TRAINER = """#!/bin/sh
# The system "slow"'s PyTorch: its training ranks sleep past the time limit; anything else it runs
# is the real interpreter's.
case "$*" in *workflow_scripts.train.pytorch_ddp*) exec sleep 600 ;; esac
exec {python} "$@"
"""


def fake_python(work, name, script):
    """An interpreter for a system's PyTorch: `script` (a shell script's text with {python}, the real
    interpreter), executable, in `work`."""
    fake = work / name
    fake.write_text(script.format(python=interpreter("pytorch")))
    fake.chmod(0o755)
    return fake


@pytest.fixture(scope="module")
def stopped_sweep(cluster, tmp_path_factory):
    """Three points, one per system, no retries: a and b are real runs, b cancelled once it runs;
    slow's ranks sleep past its 1-minute limit. Then the same target again, for the table. The
    watchdog's start-up limit is off (0): with it, ranks that never make a step are a start-up hang,
    stopped as hung before the time limit (plan/config_checks.py, clamp_hang_start)."""
    work = tmp_path_factory.mktemp("stopped")
    fake = fake_python(work, "slow-python", FAKE_TRAINER)
    one = {**SYSTEM, "max_nodes": 1}
    cluster_config(
        work,
        systems={"a": one, "b": one, "slow": {**one, "time_min": 1, "envs": {"pytorch": str(fake)}}},
        training__systems=["a", "b", "slow"],
        training__frameworks=["pytorch"],
        training__gpus=[1],
        training__inputs=["synthetic"],
        training__retries=0,
        training__hang_start_s=0,
        preflight__gate=False,
    )
    cancelled, stop = [], threading.Event()
    started = work / DIRS["log_dir"] / "train" / "b" / "pytorch_fp32_1gpu_synthetic.log.attempt1"
    watcher = threading.Thread(
        target=cancel_first_running, args=(("rule_train_wildcards_b_",), started, cancelled, stop), daemon=True
    )
    watcher.start()
    runs = []
    try:
        for _ in range(2):  # the second: b again, then the table
            proc = run_snakemake(work, f"{DIRS['results_dir']}/training_throughput.csv")
            runs.append((proc.communicate(timeout=1200)[0], proc.returncode))
    finally:
        stop.set()
    return work, runs, cancelled


@pytest.mark.pipeline
def test_a_time_limit_is_recorded_once_and_never_resubmitted(stopped_sweep):
    """slow's run is stopped by its job before SLURM's limit, recorded as failed with the cause, and
    SLURM marks the job COMPLETED: Snakemake resubmits nothing, and the table lists the run with why."""
    work, runs, _ = stopped_sweep
    results = work / DIRS["results_dir"]
    s = json.loads((results / "runs" / "slow" / "pytorch_fp32_1gpu_synthetic" / "summary.json").read_text())
    assert s["status"] == "failed" and s["permanent"] is True and s["stopped"] == "time limit", s
    assert "time limit" in s["reason"] and "time_min" in s["reason"]
    submitted = [re.findall(r"submitted with SLURM jobid (\d+) \(log: \S*/rule_train/slow_", out) for out, _ in runs]
    assert [len(ids) for ids in submitted] == [1, 0], submitted  # once, in the first run only
    state = subprocess.run(["scontrol", "show", "job", submitted[0][0]], capture_output=True, text=True, timeout=30)
    assert "JobState=COMPLETED" in state.stdout, state.stdout
    table = pd.read_csv(results / "training_throughput.csv").set_index("system")
    assert table.loc["slow", "status"] == "failed" and "time limit" in table.loc["slow", "why"]
    assert table.loc["a", "status"] == table.loc["b", "status"] == "ok"


@pytest.mark.pipeline
def test_one_failed_point_does_not_stop_the_others(stopped_sweep):
    """b cancelled with no retries left fails its job; the sweep goes on (the profile's keep-going):
    a and slow still ran in that first invocation, and b's attempt records why it stopped."""
    work, runs, cancelled = stopped_sweep
    (first, rc), _ = runs
    assert cancelled and rc != 0, first[-3000:]
    runs_dir = work / DIRS["results_dir"] / "runs"
    assert "rule_train/a_" in first and "rule_train/slow_" in first
    assert (runs_dir / "slow" / "pytorch_fp32_1gpu_synthetic" / "summary.json").exists()
    attempt = work / DIRS["log_dir"] / "train" / "b" / "pytorch_fp32_1gpu_synthetic.log.attempt1"
    record = json.loads(attempt.with_name(attempt.name + ".json").read_text())
    assert record["stopped"] == "cancelled" and "CANCELLED" in record["reason"], record


@pytest.mark.pipeline
def test_a_drained_node_leaves_its_points_waiting_and_preflight_runs(cluster, tmp_path):
    """One of the two nodes drained (`scontrol update`): the 2-node point is planned waiting, with a
    line saying so, and `snakemake --profile slurm preflight` runs its one-node checks and passes."""
    cluster_config(tmp_path, training__gpus=[1, 2], training__frameworks=["pytorch"], training__repeats=1)
    drained = ["scontrol", "update", "nodename=n2", "state=drain", "reason=dlscale-test"]
    subprocess.run(drained, check=True, timeout=30, capture_output=True)
    try:
        proc = run_snakemake(tmp_path, "preflight")
        out, _ = proc.communicate(timeout=1200)
        assert proc.returncode == 0, out[-4000:]
        assert "cluster at 2 GPUs planned, waiting in SLURM's queue for its nodes" in out, out[-4000:]
        results = tmp_path / DIRS["results_dir"] / "preflight" / "cluster" / "pytorch"
        assert (results / "1gpu.json").exists() and not (results / "2gpu.json").exists()
        plan = subprocess.run(
            [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path), "-n", "training"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert plan.returncode == 0 and "pytorch_fp32_1gpu" in plan.stdout and "pytorch_fp32_2gpu" in plan.stdout, (
            plan.stdout[-6000:] + plan.stderr[-3000:]
        )
        # the tables are planned without the waiting point, and told it waits (plan/waiting.py)
        plan = subprocess.run(
            [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path), "-n", "all"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        tables = re.search(r"^(?:local)?rule training_tables:\n\s+input: (.*)$", plan.stdout, re.M)
        assert plan.returncode == 0 and tables and "pytorch_fp32_1gpu/" in tables.group(1), plan.stdout[-6000:]
        assert "_2gpu" not in tables.group(1) and '"system": "cluster", "gpus": 2' in plan.stdout, tables.group(1)
    finally:
        subprocess.run(["scontrol", "update", "nodename=n2", "state=resume"], timeout=30, capture_output=True)
        cluster.wait_idle()


# --- a point's repeats in one allocation (plan/sweep.py job_group, rules/train.smk previous_run) ---


@pytest.fixture(scope="module")
def shared_jobs(cluster, tmp_path_factory):
    """Two points of 2 repeats each, one node each: a's are real runs; slow's ranks sleep past their
    1-minute share of the job's 2 minutes (the watchdog's start-up limit off, as in stopped_sweep)."""
    work = tmp_path_factory.mktemp("shared")
    fake = fake_python(work, "slow-python", FAKE_TRAINER)
    one = {**SYSTEM, "max_nodes": 1}
    cluster_config(
        work,
        systems={"a": one, "slow": {**one, "time_min": 1, "envs": {"pytorch": str(fake)}}},
        training__systems=["a", "slow"],
        training__frameworks=["pytorch"],
        training__gpus=[1],
        training__inputs=["synthetic"],
        training__repeats=2,
        training__retries=0,
        training__hang_start_s=0,
        preflight__gate=False,
    )
    proc = run_snakemake(work, "training")
    out, _ = proc.communicate(timeout=1200)
    assert proc.returncode == 0, f"{out[-6000:]}\n{cluster.logs()}"
    return work, out


def point_runs(work, system):
    runs = work / DIRS["results_dir"] / "runs" / system
    return [json.loads((runs / f"pytorch_fp32_1gpu_synthetic{r}" / "summary.json").read_text()) for r in ("", "_rep2")]


@pytest.mark.pipeline
def test_a_points_repeats_run_in_turn_in_one_job_each_its_own_run(shared_jobs):
    """Each point's two runs ran in one SLURM job (two sbatch submissions for four runs), one after
    the other, and each cleared its node's cache and recorded what else used the node, itself."""
    work, out = shared_jobs
    assert len(re.findall(r"submitted with SLURM jobid \d+ \(log: \S*/group_train_", out)) == 2, out[-4000:]
    first, second = point_runs(work, "a")
    assert first["status"] == second["status"] == "ok"
    assert first["slurm"]["job"] == second["slurm"]["job"] and first["slurm"]["exclusive"] is True
    assert second["job"]["started_at"] >= first["job"]["ended_at"]
    for s in (first, second):
        node = s["job"]["host"]
        assert s["cache_scope"]["used"] == "node" and set(s["page_cache"]) == {node}, s["page_cache"]
        assert s["isolation"]["isolated"] in (True, False) and set(s["isolation"]["nodes"]) == {node}, s["isolation"]


@pytest.mark.pipeline
def test_a_run_stops_at_the_end_of_its_own_share_and_the_next_still_runs(shared_jobs):
    """slow's job has 2 x 1 minute: its first run is stopped before its own minute ends, not the
    job's two, so the second still gets its own; both are recorded as stopped at a time limit."""
    work, _ = shared_jobs
    first, second = point_runs(work, "slow")
    assert first["stopped"] == second["stopped"] == "time limit", (first, second)
    assert "its own 1 min in a SLURM job it shares" in first["reason"], first["reason"]
    logs = work / DIRS["log_dir"] / "train" / "slow"
    jobs = [
        re.search(r"SLURM job (\d+)", (logs / f"pytorch_fp32_1gpu_synthetic{rep}.log").read_text()).group(1)
        for rep in ("", "_rep2")
    ]
    assert jobs[0] == jobs[1], jobs


@pytest.mark.pipeline
def test_retrying_a_points_first_run_leaves_its_second_alone(shared_jobs):
    """The first run's record set aside (failed_runs --retry): the plan runs it again, and not the
    second, which follows it only through its log (ancient)."""
    work, _ = shared_jobs
    runs = work / DIRS["results_dir"] / "runs" / "slow"
    kept = failed_runs.set_aside(runs / "pytorch_fp32_1gpu_synthetic")
    try:
        plan = subprocess.run(
            [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(work), "-n", "training"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
        planned = re.findall(r"^\s+output: .*/runs/slow/(\S+)/summary\.json$", plan.stdout, re.M)
        assert set(planned) == {"pytorch_fp32_1gpu_synthetic"}, plan.stdout[-3000:]
    finally:
        kept.rename(runs / "pytorch_fp32_1gpu_synthetic" / "summary.json")


# --- a hung rank (train/watchdog.py) ---


def stop_a_rank(run, rank, stopped, stop):
    """Once every rank has made 3 steps, SIGSTOP the rank's process (its SLURM_PROCID): a rank that
    no longer runs, as one blocked on a storage target or a collective."""
    while not stop.is_set():
        beats = watchdog.beats(run)
        if len(beats) == 2 and min(step for step, _ in beats.values()) >= 3:
            for p in psutil.process_iter(["cmdline"]):
                try:
                    cmd = " ".join(p.info["cmdline"] or [])
                    if "workflow_scripts.train.pytorch_ddp" in cmd and str(run) in cmd:
                        if p.environ().get("SLURM_PROCID") == str(rank):
                            p.suspend()
                            stopped.append((p.pid, time.time()))
                            return
                except psutil.Error:
                    continue
        time.sleep(0.5)


@pytest.mark.pipeline
def test_a_rank_that_stops_ends_the_run_as_hung_long_before_its_time_limit(cluster, tmp_path):
    cluster_config(
        tmp_path,
        training__frameworks=["pytorch"],
        training__inputs=["synthetic"],
        training__steps=100000,  # far longer than the test: only the watchdog ends it
        training__retries=0,
        training__hang_idle_s=10,
        preflight__gate=False,
    )
    run = run_of(tmp_path, "pytorch").with_name("pytorch_fp32_2gpu_synthetic")
    stopped, stop = [], threading.Event()
    watcher = threading.Thread(target=stop_a_rank, args=(run, 1, stopped, stop), daemon=True)
    watcher.start()
    try:
        proc = run_snakemake(tmp_path, "training")
        out, _ = proc.communicate(timeout=900)
    finally:
        stop.set()
        for pid, _ in stopped:
            try:
                psutil.Process(pid).resume()
            except psutil.Error:
                pass
    assert stopped, f"rank 1 was never seen making steps:\n{out[-4000:]}"
    ended = (run / "summary.json").stat().st_mtime
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "failed" and s["stopped"] == "hung" and s["permanent"] is False, s
    # rank 1 was stopped between two steps, so both report the same last step: the rank that gave no
    # stack when asked is the one named
    assert "ranks that gave no stack when asked (stopped, or stuck outside Python): 1 " in s["reason"], s["reason"]
    assert "x the median step" in s["reason"] or "training.hang_idle_s" in s["reason"], s["reason"]
    # well before the 30-minute limit: the watchdog's 10 s, its look every 2 s, the stacks, the stop
    assert ended - stopped[0][1] < 300, ended - stopped[0][1]
    log = (tmp_path / DIRS["log_dir"] / "train" / "cluster" / "pytorch_fp32_2gpu_synthetic.log").read_text()
    # srun's ranks answer through their stderr, which srun --label forwards into the log from any node
    assert "job: hung: no training step for" in log and re.search(r"^\s*0: (Current thread|Thread) 0x", log, re.M), log[
        -3000:
    ]
    assert not re.search(r"^\s*1: (Current thread|Thread) 0x", log, re.M) and "--- stacks.rank" not in log
