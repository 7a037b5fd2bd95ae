"""Every figure measured alone, and evidence of it in every record (docs/training.md#isolation):
a CPU hog beside a run is named in its summary; a neighbour on its GPUs or another SLURM job on its
nodes makes it not isolated; a node-wide page-cache drop only where the job holds its nodes alone;
measuring jobs take whole nodes through SLURM unless the system says they may not, and all local
cores; a point's repeats; what fp32 ran as."""

import json
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
from helpers import REPO, TRAINERS, interpreter, snakemake, trainer_flags, write_config

from workflow_scripts.cluster import neighbours, page_cache
from workflow_scripts.train import harness


def train_job(tmp_path, steps=12):
    """One training job as rules/train.smk starts it: train/training_job.py, the launcher, a 1-process
    PyTorch run on synthetic data, telemetry every 0.25 s."""
    run, log = tmp_path / "results" / "runs" / "local" / "pytorch_fp32_1gpu_synthetic", tmp_path / "run.log"
    proc = subprocess.run(
        [
            interpreter("workflow"),
            "-m",
            "workflow_scripts.train.training_job",
            "--run-dir",
            str(run),
            "--results-dir",
            str(tmp_path / "results"),
            "--log",
            str(log),
            "--cache-clear=dataset",
            f"--python={interpreter('pytorch')}",
            f"--cuda-cache-dir={tmp_path / 'cuda-jit'}",
            "--nproc-per-node=1",
            "--",
            TRAINERS["pytorch"],
            *trainer_flags(data_source="synthetic", classes=4, batch_per_gpu=2, steps=steps, telemetry_interval=0.25),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, log.read_text()[-3000:] if log.exists() else proc.stderr
    return json.loads((run / "summary.json").read_text()), run


@pytest.mark.stage
def test_a_cpu_hog_beside_a_run_is_named_in_its_record(tmp_path):
    """A busy loop started beside a local run: the run is not isolated and its record names the
    loop's process, the CPU time it took inside the timed window and the node's share of it."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        summary, run = train_job(tmp_path)
    finally:
        hog.kill()
        hog.wait()
    iso = summary["isolation"]
    assert iso["isolated"] is False, iso
    (node,) = iso["nodes"].values()
    named = {pid: entry for entry in node["other_processes"] for pid in entry["pids"]}
    assert hog.pid in named and named[hog.pid]["name"].startswith("python"), node["other_processes"]
    # named by what it runs and where, not only "python" (issue 61 item 12)
    assert (named[hog.pid]["command"], named[hog.pid]["cwd"]) == (f"{sys.executable} -c while True: pass", os.getcwd())
    assert f"`{sys.executable} -c while True: pass` in {os.getcwd()}" in iso["why"], iso["why"]
    assert named[hog.pid]["cpu_s"] > 0 and node["others_cpu_share"] > neighbours.FOREIGN_CPU_SHARE
    assert "other processes used" in iso["why"] and f"of its {node['cpus']} CPUs" in iso["why"]
    # The run's own processes are its own, not neighbours: the ranks' time is counted as own.
    assert node["own_s"] > 0 and all(os.getpid() not in e["pids"] for e in node["top_others"])
    # The window is the timed steps', inside the job's own start and end.
    steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    timed = [s for s in steps if s["phase"] == "timed"]
    assert iso["window"]["start"] == pytest.approx(timed[0]["wall_end"] - timed[0]["wall_s"])
    assert iso["window"]["end"] == pytest.approx(timed[-1]["wall_end"])
    assert summary["job"]["started_at"] < iso["window"]["start"] < iso["window"]["end"] < summary["job"]["ended_at"]
    assert (run / "neighbours.vm.jsonl").exists() or list(run.glob("neighbours.*.jsonl"))


def sample(t, others_s=0.0, others=(), gpu_others=(), slurm_jobs=None, xid=()):
    line = {
        "t": t,
        "busy_s": 1.0,
        "own_s": 1.0 - others_s,
        "kernel_s": 0.0,
        "others_s": others_s,
        "unattributed_s": 0.0,
        "others": list(others),
        "gpu_others": list(gpu_others),
        "xid": list(xid),
    }
    if slurm_jobs is not None:
        line["slurm_jobs"] = slurm_jobs
    return line


def evidence(lines, cpus=8):
    return neighbours.evidence({"n1": lines}, 100.0, 110.0, {"n1": cpus}, 1.0)


@pytest.mark.unit
def test_a_quiet_node_is_isolated_and_says_by_what_rule():
    quiet = [{"t": 99.0, "baseline": True}] + [sample(100.0 + i, 0.01) for i in range(1, 11)]
    ev = evidence(quiet)
    assert ev["isolated"] is True and ev["nodes"]["n1"]["samples"] == 10
    assert "2%" in ev["rule"] and "GPUs" in ev["rule"] and "SLURM" in ev["rule"]


@pytest.mark.unit
def test_a_process_on_the_gpus_or_another_slurm_job_is_not_isolated():
    on_gpu = [
        sample(100.0 + i, gpu_others=[{"gpu": 1, "pid": 4242, "name": "python", "used_MB": 900.0}])
        for i in range(1, 11)
    ]
    ev = evidence(on_gpu)
    assert ev["isolated"] is False and "gpu1 pid 4242 (python)" in ev["why"]
    # squeue's answer from before the window counts for it, as do those inside it.
    job = [{"job": "777", "user": "alice", "name": "bert", "state": "RUNNING"}]
    shared = [{**sample(95.0), "slurm_jobs": job}] + [sample(100.0 + i) for i in range(1, 11)]
    ev = evidence(shared)
    assert ev["isolated"] is False and "777 (alice, bert)" in ev["why"]
    assert evidence([{**sample(95.0), "slurm_jobs": []}] + [sample(100.0 + i) for i in range(1, 11)])["isolated"]


@pytest.mark.unit
def test_gpu_pids_from_another_pid_namespace_are_judged_only_where_the_runs_own_show_up():
    """A process NVML lists that this node's process table lacks: another container's, where the
    run's own pids show up on the GPUs (not isolated); where they do not, NVML gives the host's pids
    (a container) and nothing on the GPUs can be attributed (unknown)."""
    hidden = [{"gpu": 0, "pid": 999999, "name": "not visible from here", "visible": False, "used_MB": 500.0}]
    seen = [{**sample(100.0 + i, gpu_others=hidden), "gpu_own_seen": True} for i in range(1, 11)]
    assert evidence(seen)["isolated"] is False
    blind = [{**sample(100.0 + i, gpu_others=hidden), "gpu_own_seen": False} for i in range(1, 11)]
    ev = evidence(blind)
    assert ev["isolated"] is None and "PID namespace" in ev["why"] and "999999" in ev["why"]


@pytest.mark.unit
def test_a_busy_neighbour_above_the_share_is_named_and_below_it_is_not():
    busy = [sample(100.0 + i, 0.5, [[77, "make", "bob", 0.5]]) for i in range(1, 11)]
    ev = evidence(busy)  # 5 CPU-s in 10 s on 8 CPUs: 6.25%
    assert ev["isolated"] is False and "make (pid 77, bob, 5.0 CPU-s)" in ev["why"]
    assert evidence(busy, cpus=64)["isolated"] is True  # 0.8% of 64 CPUs


@pytest.mark.unit
def test_no_samples_is_unknown_not_isolated():
    assert evidence([])["isolated"] is None
    ev = neighbours.evidence({}, 100.0, 110.0, {}, 1.0)
    assert ev["isolated"] is None and "telemetry_interval" in ev["why"]


@pytest.mark.unit
def test_node_wide_clearing_only_on_a_node_held_alone():
    assert page_cache.scope_for("node", None) == ("node", "")  # local: the workflow runs it alone
    assert page_cache.scope_for("node", {"job": "9", "oversubscribe": "NO", "exclusive": True}) == ("node", "")
    scope, why = page_cache.scope_for("node", {"job": "9", "oversubscribe": "OK", "exclusive": False})
    assert scope == "dataset" and "job 9" in why and "OverSubscribe=OK" in why and "exclusive" in why
    assert page_cache.scope_for("dataset", None) == ("dataset", "")


GPU = {"gpus_per_node": 2, "max_nodes": 2, "gpu_request": "gpus-per-node", "cpus_per_task": 4}


def dry_jobs(work, *targets):
    out = snakemake(work, "-n", "-p", "--cores", "3", *targets).stdout
    return [j for j in out.split("\n\n") if re.search(r"^(local)?rule \w+:", j.strip(), re.M)]


@pytest.mark.stage
def test_measuring_jobs_take_whole_nodes_unless_the_system_forbids_it(tmp_path):
    """slurm_extra of every measuring job carries --exclusive; a system with exclusive: false none;
    locally each measuring job takes all the cores, a CPU system's included."""
    envs = {fw: interpreter(fw) for fw in ("tensorflow", "mxnet", "pytorch")}
    write_config(
        tmp_path,
        systems={"gpu": GPU, "shared": {**GPU, "exclusive": False}, "local": {"gpus_per_node": 2, "max_nodes": 2}},
        training__systems=["gpu", "shared", "local"],
        training__frameworks=["pytorch"],
        training__gpus=[1, 4],
        training__long_test__gpus=[2],
        envs_gpu=envs,
    )
    jobs = dry_jobs(tmp_path, "training", "interconnect", "preflight", "long_test")
    measuring = [
        j for j in jobs if re.search(r"rule (train|long_test_run|interconnect_collectives|preflight_check):", j)
    ]
    assert {re.search(r"rule (\w+):", j).group(1) for j in measuring} == {
        "train",
        "long_test_run",
        "interconnect_collectives",
        "preflight_check",
    }
    for job in measuring:
        system = re.search(r"system=(\w+)", job).group(1)
        extra = re.search(r"slurm_extra=([^,\n]*)", job).group(1)
        assert ("--exclusive" in extra) == (system != "shared"), (system, extra)
        assert re.search(r"^\s*threads: 3$", job, re.M), job


@pytest.mark.stage
def test_a_gpu_system_runs_every_point_three_times_a_cpu_system_once(tmp_path):
    envs = {fw: interpreter(fw) for fw in ("tensorflow", "mxnet", "pytorch")}
    write_config(
        tmp_path,
        systems={"gpu": GPU, "local": {"gpus_per_node": 2}},
        training__systems=["gpu", "local"],
        training__frameworks=["pytorch"],
        training__gpus=[1, 2],
        training__long_test__gpus=[],
        envs_gpu=envs,
    )
    outputs = re.findall(
        r"results/runs/(\w+)/(pytorch_fp32_\dgpu\S*)/summary.json", snakemake(tmp_path, "-n", "training").stdout
    )
    runs = sorted(set(outputs))
    gpu = sorted(name for system, name in runs if system == "gpu")
    assert gpu == [f"pytorch_fp32_{g}gpu{r}" for g in (1, 2) for r in ("", "_rep2", "_rep3")], gpu
    assert sorted(name for system, name in runs if system == "local") == ["pytorch_fp32_1gpu", "pytorch_fp32_2gpu"]
    write_config(tmp_path, systems={"gpu": GPU}, training__systems=["gpu"], training__repeats=2, envs_gpu=envs)
    assert "_rep3" not in snakemake(tmp_path, "-n", "training").stdout


@pytest.mark.unit
@pytest.mark.parametrize(
    "capability, mode, overridden, fp32",
    [
        ((9, 0), "tf32", False, "tf32"),
        ((9, 0), "strict", False, "float32"),
        ((8, 0), "tf32", True, "float32"),  # NVIDIA_TF32_OVERRIDE=0 from the user's environment
        ((7, 0), "tf32", False, "float32"),  # a V100 has no TF32
        (None, "tf32", False, "float32"),  # a CPU
    ],
)
def test_what_fp32_ran_as(capability, mode, overridden, fp32):
    env = {"NVIDIA_TF32_OVERRIDE": "0"} if overridden else {}
    args = SimpleNamespace(fp32_math=mode, precision="fp32")
    first = {"capability": list(capability)} if capability else None
    math = harness.math_record(args, first, "bfloat16", "matrix products and convolutions", env)
    assert (math["fp32"], math["ran_as"], math["half"]) == (fp32, fp32, None)
    half = harness.math_record(SimpleNamespace(fp32_math=mode, precision="fp16"), first, "bfloat16", "x", env)
    assert half["ran_as"] == "bfloat16 mixed" and half["fp32"] == fp32


@pytest.mark.stage
def test_strict_fp32_reaches_every_trainer_and_is_recorded(tmp_path):
    """training.fp32_math strict: every framework's run gets --fp32-math strict (the default adds no
    word: runs made before the key are not rerun) and sets NVIDIA_TF32_OVERRIDE=0 for its libraries."""
    write_config(tmp_path, training__fp32_math="strict", training__long_test__gpus=[2])
    out = snakemake(tmp_path, "-n", "-p", "training", "long_test").stdout
    lines = [ln for ln in out.splitlines() if "workflow_scripts.train.training_job" in ln]
    assert lines and all("--fp32-math strict" in ln for ln in lines), lines
    write_config(tmp_path)
    assert "--fp32-math" not in snakemake(tmp_path, "-n", "-p", "training").stdout
    env = dict(os.environ)
    env.pop("NVIDIA_TF32_OVERRIDE", None)
    code = (
        "import os, sys; from workflow_scripts.train import harness; "
        "a = harness.arg_parser('x').parse_args(sys.argv[1:]); harness.apply_fp32_math(a); "
        "print(os.environ.get('NVIDIA_TF32_OVERRIDE'))"
    )
    for mode, want in (("strict", "0"), ("tf32", "None")):
        proc = subprocess.run(
            [sys.executable, "-c", code, "--batch-per-gpu=1", "--out=x", f"--fp32-math={mode}"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.stdout.strip() == want, proc.stderr


@pytest.mark.pipeline
def test_the_pipelines_runs_carry_their_evidence(pipeline_run):
    """Every run of the quick start's chain records what else used its node in its timed window,
    the samples it rests on, and what fp32 ran as: the evidence, not the flag (other tests run beside
    the suite's pipeline, so the flag may say false)."""
    for summary_path in sorted((pipeline_run / "results" / "runs").rglob("summary.json")):
        s = json.loads(summary_path.read_text())
        iso = s["isolation"]
        assert iso["isolated"] in (True, False), (summary_path, iso)
        (node,) = iso["nodes"].values()
        assert node["samples"] >= 1 and node["own_s"] > 0 and node["cpus"] >= 1, (summary_path, node)
        assert (iso["isolated"] is False) == bool(
            node["others_cpu_share"] > neighbours.FOREIGN_CPU_SHARE or node["gpu_others"] or node["slurm_jobs"]
        )
        assert s["job"]["started_at"] <= iso["window"]["start"] < iso["window"]["end"] <= s["job"]["ended_at"]
        assert s["math"]["ran_as"] == "float32" and s["math"]["fp32_how"] == "float32: a CPU"
        assert s["cache_scope"]["used"] == s["cache_scope"]["configured"]  # local: the run holds the machine


def measuring_intervals(work):
    """(what, start, end) of every measuring job of a finished pipeline directory, from its records."""
    out = []
    results = work / "results"
    for p in sorted((results / "runs").rglob("summary.json")):
        job = json.loads(p.read_text())["job"]
        out.append((str(p.parent.relative_to(results)), job["started_at"], job["ended_at"]))
    for p in sorted((results / "preflight").glob("*/*/*gpu.json")) + sorted(
        (results / "interconnect").rglob("torch.json")
    ):
        r = json.loads(p.read_text())
        out.append((str(p.relative_to(results)), r["started_at"], r["ended_at"]))
    for p in sorted((results / "int8").glob("*/*/throughput/*.json")):
        r = json.loads(p.read_text())
        out.append((str(p.relative_to(results)), r["started_at"], r["ended_at"]))
    return out


@pytest.mark.pipeline
def test_no_two_measuring_jobs_of_the_quick_start_ran_at_once(pipeline_run):
    """Training and long-test runs, preflight checks, the interconnect measurement and the INT8 timed
    runs, each from its own record: no two overlap in time."""
    jobs = sorted(measuring_intervals(pipeline_run), key=lambda j: j[1])
    kinds = {what.split("/")[0] for what, _, _ in jobs}
    assert {"runs", "preflight", "interconnect", "int8"} <= kinds, kinds
    for (a, _, a_end), (b, b_start, _) in zip(jobs, jobs[1:]):
        assert a_end <= b_start, f"{a} ended at {a_end}, after {b} started at {b_start}"


@pytest.mark.unit
def test_a_gpu_run_without_nvml_is_of_unknown_isolation(tmp_path):
    """No nvidia-ml-py where a GPU run ran: other processes on its GPUs cannot be seen, so its
    isolation is unknown, never true; a CPU run needs no NVML."""
    from workflow_scripts.train import run_evidence

    steps = [
        {"step": i, "phase": "timed" if i else "warmup", "wall_s": 1.0, "wall_end": 100.0 + i} for i in range(1, 11)
    ]
    (tmp_path / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    lines = [{"t": 99.0, "baseline": True, "nvml_unavailable": "NVMLError_LibraryNotFound"}]
    lines += [sample(100.0 + i) for i in range(1, 12)]
    (tmp_path / "neighbours.g1.jsonl").write_text("".join(json.dumps(ln) + "\n" for ln in lines))
    summary = {"args": {"mode": "steps"}, "provenance": {"nodes": {"g1": {"cpus": 8}}}}
    assert run_evidence.isolation(tmp_path, {**summary, "device_type": "cpu"})["isolated"] is True
    gpu = run_evidence.isolation(tmp_path, {**summary, "device_type": "gpu"})
    assert gpu["isolated"] is None and "NVML unavailable" in gpu["why"] and "nvidia-ml-py" in gpu["why"]


@pytest.mark.unit
@pytest.mark.parametrize(
    "slurm, isolated, says",
    [
        (None, True, None),  # no SLURM: the node's own samples decide
        ({"job": "7", "oversubscribe": "NO", "exclusive": True}, True, None),
        ({"job": "7", "oversubscribe": "OK", "exclusive": False}, None, "OverSubscribe=OK) and squeue was not asked"),
        ({"job": "7", "oversubscribe": None, "exclusive": None}, None, "could not say whether job 7 held its nodes"),
    ],
)
def test_the_slurm_half_is_true_only_where_slurm_held_the_nodes_alone(tmp_path, slurm, isolated, says):
    """A clean node under SLURM is isolated only where its job held its nodes alone (OverSubscribe=NO,
    scontrol's word from the host side); a shared allocation, whatever squeue said, is unknown."""
    from workflow_scripts.train import run_evidence

    steps = [
        {"step": i, "phase": "timed" if i else "warmup", "wall_s": 1.0, "wall_end": 100.0 + i} for i in range(1, 11)
    ]
    (tmp_path / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    lines = [{"t": 99.0, "baseline": True}] + [sample(100.0 + i) for i in range(1, 12)]
    (tmp_path / "neighbours.g1.jsonl").write_text("".join(json.dumps(ln) + "\n" for ln in lines))
    summary = {"args": {"mode": "steps"}, "provenance": {"nodes": {"g1": {"cpus": 8}}}, "device_type": "cpu"}
    ev = run_evidence.isolation(tmp_path, {**summary, "slurm": slurm})
    assert ev["isolated"] is isolated, ev["why"]
    if says:
        assert says in ev["why"] and "systems.<name>.exclusive" in ev["why"], ev["why"]


@pytest.mark.unit
def test_a_long_tests_isolation_is_judged_job_by_job_and_across_them(tmp_path):
    """Six jobs, a neighbour on 10% of the CPUs through the last: judged over the last job's own steps
    it reads 10%, not 10% of six jobs' time (1.7%), and an earlier job's verdict is kept beside it."""
    from workflow_scripts.train import run_evidence

    run = tmp_path / "accuracy" / "pytorch_fp32_2gpu"
    run.mkdir(parents=True)
    steps = [{"step": i, "phase": "timed", "wall_s": 1.0, "wall_end": 100.0 + i} for i in range(1, 11)]
    (run / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    # the cumulative time of all six jobs: 60 s; this job's own steps: 10 s
    (run / "epochs.jsonl").write_text(json.dumps({"epoch": 6, "elapsed_s": 60.0}) + "\n")
    busy = [{"t": 99.0, "baseline": True}] + [
        {**sample(100.0 + i), "others_s": 0.8, "others": [[4242, "hog", "someone", 0.8]]} for i in range(1, 12)
    ]
    (run / "neighbours.g1.jsonl").write_text("".join(json.dumps(ln) + "\n" for ln in busy))
    summary = {"args": {"mode": "accuracy"}, "provenance": {"nodes": {"g1": {"cpus": 8}}}, "device_type": "cpu"}
    ev = run_evidence.isolation(run, summary)
    assert ev["isolated"] is False and ev["window"]["seconds"] == 10.0, ev
    # an earlier job with a neighbour of its own: the last job's clean samples do not clear it
    (run / "neighbours.g1.jsonl").write_text(
        "".join(
            json.dumps(ln) + "\n" for ln in [{"t": 99.0, "baseline": True}] + [sample(100.0 + i) for i in range(1, 12)]
        )
    )
    run_evidence.jobs_file(run).write_text(
        json.dumps({"attempt": 2, "isolated": False, "why": "g1: other processes used 10.0% of its 8 CPUs"}) + "\n"
    )
    last = run_evidence.across_jobs(run_evidence.isolation(run, summary), run)
    assert last["isolated"] is False and "job 2: g1: other processes used 10.0%" in last["why"]
    assert [j["attempt"] for j in last["jobs"]] == [2, "last"]


@pytest.mark.unit
def test_a_run_whose_record_cannot_judge_its_isolation_is_never_ok_without_a_caveat():
    """A run that timed its steps but whose steps.jsonl holds none (another run in its directory
    removed or rewrote it: issue 61 item 12) gets isolated: null; its row carries the caveat, with
    what the missing window means."""
    from workflow_scripts.results import guards, runs

    summary = {"status": "ok", "isolation": {"isolated": None, "why": "no timed window in steps.jsonl"}}
    row = {"system": "local", "run_dir": "results/runs/local/pytorch_fp32_2gpu", "timed_steps": 6}
    row.update(runs.evidence(summary))
    assert row["isolated"] == "unknown"
    caveats = [c for c in guards.run_caveats(row) if c.startswith("isolation unknown: local/pytorch_fp32_2gpu: ")]
    assert caveats and "though it timed 6 steps: its steps.jsonl was removed or rewritten" in caveats[0], caveats
