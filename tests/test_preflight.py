"""Preflight (rules/preflight.smk, workflow_scripts/preflight/): every system x framework checked,
launched as its training runs are, before any of them; each failure class provoked for real and
named in one line (system, framework, node, check, fix), and a failing preflight stops the
workflow before any training job starts."""

import csv
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import time

import pytest
from helpers import CONFIG, REPO, SNAKEMAKE, copy_of_run, interpreter, planned_jobs, snakemake, write_config

from workflow_scripts.plan.input_plan import INPUT_STEPS_CPU

GPU_SYSTEM = {"gpu": {"gpus_per_node": 2, "max_nodes": 1, "gpu_request": "gpus-per-node", "cpus_per_task": 1}}
# Checks that need no dataset and no data stage: the sweep on synthetic input, no long test.
NO_DATA = dict(training__inputs=["synthetic"], training__long_test__gpus=[])


def rows(work):
    """The rows of preflight's tables: the environment checks' and, once checked, the data's. Where a
    gate stopped the workflow before every system's checks were in, the whole table is not written
    yet, and each system's own table (which its gates wait for) holds its rows."""
    results = work / "results"
    tables = [results / "preflight.csv"] if (results / "preflight.csv").exists() else []
    tables = tables or sorted((results / "preflight").glob("*.csv"))
    out = []
    for table in [*tables, results / "preflight_data.csv"]:
        if table.exists():
            with open(table) as f:
                out += list(csv.DictReader(f))
    return out


def failure_lines(proc):
    return [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("preflight failed:")]


@pytest.fixture(scope="module")
def passed(pipeline_run, tmp_path_factory):
    """The embedded default after `snakemake preflight` (its data stage included), before training:
    pipeline_run's directory without its training runs (the pipeline ran the same preflight jobs
    first), so preflight and the data stage are not run again."""
    return copy_of_run(pipeline_run, tmp_path_factory.mktemp("preflight"), leave_out=["results/runs"])


@pytest.mark.pipeline
def test_preflight_passes_on_the_embedded_default(passed):
    table = rows(passed)
    pairs = {(r["system"], r["framework"]) for r in table}
    assert pairs == {("local", f) for f in CONFIG["training"]["frameworks"]}
    # The input rows compare two measured rates (on the CPU stand-in the input decodes on the cores the
    # step computes on): a warning there is an answer, which no test predicts; never a failure.
    inputs = [r for r in table if r["check"] == "input_capacity"]
    table = [r for r in table if r["check"] != "input_capacity"]
    assert {r["status"] for r in table} <= {"ok", "not applicable"}, [r for r in table if r["status"] == "failed"]
    assert inputs and {r["status"] for r in inputs} <= {"ok", "warning"}, inputs
    for fw in CONFIG["training"]["frameworks"]:
        mine = {r["check"]: r for r in table if r["framework"] == fw}
        assert {
            "page_cache",
            "dataset",
            "dataset_readable",
            "gpu",
            "kernel_fp32",
            "cpus",
            "allreduce",
            "telemetry_nvml",
            "telemetry_ib",
        } <= set(mine)
        assert mine["kernel_fp32"]["status"] == "ok" and " s " in mine["kernel_fp32"]["figure"]
        assert mine["allreduce"]["status"] == "ok" and "sum right; 25557032 fp32" in mine["allreduce"]["figure"]
        assert mine["gpu"]["status"] == "not applicable"
        assert (passed / "results" / "preflight" / "local" / f"{fw}.ok").is_file()
    md = (passed / "results" / "preflight.md").read_text()
    assert md.startswith("# Preflight") and "| page_cache" in md


@pytest.mark.pipeline
def test_training_waits_for_its_pairs_preflight(passed):
    out = snakemake(passed, "training", "-n", "-p").stdout
    assert "preflight_check" not in out and "preflight_data_check" not in out  # passed: nothing to check again
    for fw in CONFIG["training"]["frameworks"]:
        assert f"results/preflight/local/{fw}.ok" in out and f"results/preflight/local/{fw}.data.ok" in out


@pytest.mark.stage
def test_a_first_preflight_on_a_real_dataset_converts_nothing(tmp_path):
    """A real dataset not yet converted (a fake ILSVRC2012 tree): `snakemake preflight` checks the
    environments, GPUs, kernels, all-reduce and CPUs alone, and in `all` those checks wait for no
    conversion; the dataset's own check follows its conversion."""
    from workflow_scripts.data import embedded

    root = tmp_path / "ILSVRC2012"
    embedded.make(root, classes=2, train_per_class=2, val_per_class=2, seed=1)
    write_config(tmp_path, dataset__root=str(root), training__long_test__gpus=[2])
    jobs = planned_jobs(tmp_path, "preflight")
    assert set(jobs) == {
        "preflight_check",
        "preflight_system_table",
        "preflight_table",
        "preflight_gate",
        "preflight",
    }, jobs
    out = snakemake(tmp_path, "all", "-n").stdout
    checks = [b for b in out.split("\n\n") if "rule preflight_check:" in b]
    assert len(checks) == len(CONFIG["training"]["frameworks"]) and not any("input:" in b for b in checks), checks
    data_checks = [b for b in out.split("\n\n") if "rule preflight_data_check:" in b]
    assert len(data_checks) == len(checks) and all("input: data/" in b for b in data_checks), data_checks
    input_checks = [b for b in out.split("\n\n") if "rule preflight_input_check:" in b]
    assert len(input_checks) == len(checks) and all(".data.ok" in b for b in input_checks), input_checks


@pytest.mark.pipeline
def test_preflight_checks_the_data_once_converted(passed, tmp_path):
    """Converted data (the embedded default's): `snakemake preflight` includes its check, one job per
    pair, and the table lists its rows."""
    work = tmp_path / "work"
    shutil.copytree(passed, work, symlinks=True)
    assert planned_jobs(work, "preflight", "--forcerun", "preflight_data_check").get("preflight_data_check") == len(
        CONFIG["training"]["frameworks"]
    )
    snakemake(work, "preflight", "--forcerun", "preflight_data_check")
    data = [r for r in rows(work) if r["check"] == "dataset"]
    assert {r["framework"] for r in data if r["status"] == "ok"} == set(CONFIG["training"]["frameworks"]), data
    # the input check, a job of its own after each pair's data check, has its rows in the same table:
    # each framework's trainer on synthetic and on real data, beside each other on the node
    inputs = [r for r in rows(work) if r["check"] == "input_capacity"]
    assert {r["framework"] for r in inputs} == set(CONFIG["training"]["frameworks"]), inputs
    assert all(" images/s a node on real data against " in r["figure"] for r in inputs), inputs
    for fw in CONFIG["training"]["frameworks"]:
        result = json.loads((work / "results" / "preflight" / "local" / fw / "2gpu.input.json").read_text())
        [(precision, runs)] = result["input_check"]["runs"].items()
        assert precision == "fp32" and runs["synthetic"]["steps"] == INPUT_STEPS_CPU, runs
        real = runs["real"]["cpu"]
        assert real["error"] == "" and (real["gpus"], real["ranks_per_node"]) == (2, 2), real
        assert set(real["threads_at"]) == {"1", "2"} and real["input_wait_share"] is not None, real


@pytest.mark.stage
def test_the_input_check_runs_outside_snakemake_as_a_benchmark_calls_it(small_lmdb, tmp_path):
    """docs/preflight.md#the-input-check, outside Snakemake: the settings from a config with the
    schema's defaults, the check job by hand on one CPU rank of a small LMDB, its result judged by
    input_rows. One warm-up and one timed step each: what it records, not how fast."""
    from helpers import run_stage, validated, with_overrides

    from workflow_scripts.plan.commands import TrainerCommands
    from workflow_scripts.plan.input_plan import InputPlan
    from workflow_scripts.plan.sweep import Sweep
    from workflow_scripts.preflight import input_rows

    small = {"image_size": 32, "warmup_steps": 1, "telemetry_interval": 0, "gpus": [1], "frameworks": ["pytorch"]}
    config = validated(
        with_overrides(
            CONFIG,
            data_dir=str(small_lmdb.parent),
            training__batch_per_gpu__pytorch=4,
            preflight__input_steps=1,
            **{f"training__{k}": v for k, v in small.items()},
        )
    )
    sweep = Sweep(config, embedded=True)
    settings = InputPlan(config, sweep, TrainerCommands(config, sweep, {})).settings("local", "pytorch", sweep.sweep())
    out, log = tmp_path / "check.json", tmp_path / "check.log"
    words = ["--out", out, "--system", "local", "--framework", "pytorch", "--python", interpreter("pytorch")]
    words += ["--log", log, "--only-input", "--input-check", json.dumps(settings), "--", "--nproc-per-node", "1"]
    run_stage("workflow", "workflow_scripts.preflight.preflight_job", *words)
    result = json.loads(out.read_text())
    runs = result["input_check"]["runs"]["fp32"]
    assert runs["synthetic"]["error"] == "" and runs["synthetic"]["steps"] == 1, log.read_text()[-3000:]
    real = runs["real"]["cpu"]
    assert real["error"] == "" and (real["gpus"], real["nodes"], real["steps"]) == (1, 1, 1), log.read_text()[-3000:]
    assert real["device"] == "cpu" and real["threads_at"].keys() == {"1"} and real["input_wait_share"] is not None
    [row] = input_rows.rows(result, config["preflight"]["input_tolerance"])
    assert row["check"] == "input_capacity" and row["status"] in ("ok", "warning"), row
    assert row["figure"].startswith("cpu fp32: ") and " on synthetic at 1 GPU(s) a node, " in row["figure"], row


@pytest.mark.pipeline
def test_a_cpu_only_framework_on_a_gpu_system_is_named(tmp_path):
    cpu_envs = {fw: interpreter(fw) for fw in ("tensorflow", "mxnet", "pytorch")}
    write_config(
        tmp_path, systems=GPU_SYSTEM, training__systems=["gpu"], training__gpus=[2], envs_gpu=cpu_envs, **NO_DATA
    )
    proc = snakemake(tmp_path, "preflight", check=False)
    assert proc.returncode != 0
    # one line per failing pair that stopped (pairs whose gates ran side by side)
    lines = failure_lines(proc)
    assert lines and all("system gpu, framework " in ln and "check gpu:" in ln and "Fix:" in ln for ln in lines)
    assert len({ln.split("framework ")[1].split()[0] for ln in lines}) == len(lines)
    gpu = {r["framework"]: r for r in rows(tmp_path) if r["check"] == "gpu"}
    for fw, cause in {"tensorflow": "is a CPU build", "mxnet": "is a CPU build", "pytorch": "sees 0 GPU(s)"}.items():
        assert gpu[fw]["status"] == "failed" and cause in gpu[fw]["cause"], gpu[fw]
        assert f"config envs_gpu.{fw}" in gpu[fw]["cause"] and "envs/setup.sh --gpu" in gpu[fw]["fix"]


@pytest.mark.pipeline
def test_refused_cache_clearing_stops_all_before_any_training_job(tmp_path):
    write_config(
        tmp_path,
        training__frameworks=["pytorch"],
        training__cache_clear="node",
        training__cache_clear_command="false",
        **NO_DATA,
    )
    proc = snakemake(tmp_path, "all", check=False)
    assert proc.returncode != 0
    # once, with its cause, and not retried
    [line] = failure_lines(proc)
    assert line.startswith("preflight failed: system local, framework pytorch (1 node(s), 2 task(s)), node ")
    assert "check page_cache: " in line and "training.cache_clear_command refused: 'false' failed" in line
    assert "Fix: fix or empty config training.cache_clear_command" in line
    assert not (tmp_path / "results" / "runs").exists() and not (tmp_path / "logs" / "train").exists()
    assert not (tmp_path / "results" / "interconnect").exists()
    [row] = [r for r in rows(tmp_path) if r["check"] == "page_cache"]
    assert row["status"] == "failed"


@pytest.mark.pipeline
def test_a_hanging_allreduce_is_stopped_by_the_timeout_and_named(tmp_path):
    """A real hang: rank 1 is stopped (SIGSTOP) once it has marked the all-reduce as started, so
    rank 0 waits in it for ever."""
    write_config(tmp_path, training__frameworks=["pytorch"], preflight__timeout_s=30, **NO_DATA)
    marker = tmp_path / "results" / "preflight" / "local" / "pytorch" / "2gpu.d" / "markers" / "rank1.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path), "--cores", "2", "preflight"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    stopped = None
    try:
        deadline = time.monotonic() + 600
        while stopped is None and proc.poll() is None and time.monotonic() < deadline:
            try:
                m = json.loads(marker.read_text())
            except (OSError, ValueError):
                m = {}
            if m.get("phase") == "allreduce":
                os.kill(m["pid"], signal.SIGSTOP)
                stopped = m["pid"]
            time.sleep(0.01)
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert stopped, "rank 1 never reached the all-reduce"
    assert proc.returncode != 0
    [line] = [ln for ln in out.splitlines() if ln.startswith("preflight failed:")]
    print(line)
    assert "framework pytorch" in line and "check allreduce: " in line
    assert "the all-reduce hung: no progress for 30 s (preflight.timeout_s), stopped" in line
    assert "phase 'allreduce': rank(s) 0 (" in line and ", 1 (" in line
    with pytest.raises(ProcessLookupError):  # the stopped rank was ended with the check
        os.kill(stopped, 0)


TWO_SYSTEMS = {name: {"gpus_per_node": 2, "max_nodes": 1} for name in ("a", "b")}


@pytest.mark.pipeline
def test_a_check_lost_with_its_node_holds_back_only_its_own_systems_gate(tmp_path):
    """System a's check killed (SIGKILL: what a node lost under it leaves, no result written), with
    --keep-going as the SLURM profile has it: system b's gate opens, a's does not, and the workflow's
    output names a's check as the one that returned nothing."""
    import psutil

    write_config(
        tmp_path, systems=TWO_SYSTEMS, training__systems=["a", "b"], training__frameworks=["pytorch"], **NO_DATA
    )
    gates = [f"results/preflight/{s}/pytorch.ok" for s in ("a", "b")]
    cmd = [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path), "--cores", "2"]
    proc = subprocess.Popen([*cmd, "--keep-going", *gates], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed = None
    try:
        deadline = time.monotonic() + 600
        while killed is None and proc.poll() is None and time.monotonic() < deadline:
            for p in psutil.process_iter(["cmdline"]):
                words = p.info["cmdline"] or []
                if (
                    "workflow_scripts.preflight.preflight_job" in words
                    and "a" in words[words.index("--system") + 1 :][:1]
                ):
                    p.kill()
                    killed = p.pid
                    break
            time.sleep(0.05)
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert killed, out[-3000:]
    assert proc.returncode != 0
    assert (tmp_path / gates[1]).is_file() and (tmp_path / "results" / "preflight" / "b.csv").is_file(), out[-3000:]
    assert not (tmp_path / gates[0]).exists() and not (tmp_path / "results" / "preflight" / "a.csv").exists()
    [line] = [ln for ln in out.splitlines() if ln.startswith("preflight: system a")]
    assert (
        "framework pytorch, 2 task(s): its check returned no result" in line
        and "logs/preflight/a/pytorch_2gpu.log" in line
    )
    assert "Only system a's gates wait for it" in line


@pytest.mark.stage
def test_each_systems_gate_waits_for_its_own_checks_only(tmp_path):
    """The plan behind the test above, without running it: system b's gate plans b's checks and
    table, none of a's."""
    write_config(
        tmp_path, systems=TWO_SYSTEMS, training__systems=["a", "b"], training__frameworks=["pytorch"], **NO_DATA
    )
    out = snakemake(tmp_path, "-n", "results/preflight/b/pytorch.ok").stdout
    assert "system=b" in out and "system=a" not in out, out
    assert "preflight_system_table" in out and "rule preflight_table:" not in out, out


@pytest.mark.pipeline
def test_a_truncated_lmdb_is_named_with_its_fix(passed, tmp_path):
    if importlib.util.find_spec("workflow_scripts.data.verify") is None:
        pytest.skip(
            "workflow_scripts.data.verify (the data stage's manifest check) is not on this branch: the "
            "dataset check reports 'not applicable: verify module missing'"
        )
    work = tmp_path / "work"
    shutil.copytree(passed, work, symlinks=True)
    mdb = max((work / "data" / "lmdb").rglob("*.mdb"), key=lambda p: p.stat().st_size)
    with open(mdb, "r+b") as f:
        f.truncate(mdb.stat().st_size // 2)
    proc = snakemake(work, "preflight", "--forcerun", "preflight_data_check", check=False)
    assert proc.returncode != 0
    [line] = failure_lines(proc)
    assert "framework pytorch" in line and "check dataset:" in line and "snakemake --forcerun" in line
    assert mdb.name in line


@pytest.mark.unit
def test_a_missing_kernel_is_classified_as_the_builds_architecture():
    """The text PyTorch raises for a build without the GPU's architecture (MXNet cu117 on sm_90 says
    the same through CUDA) becomes the named cause and its fix, not a bare traceback."""
    from workflow_scripts.preflight.owners import classify

    cause, fix = classify(RuntimeError("CUDA error: no kernel image is available for execution on the device"))
    assert "no kernel image for this GPU" in cause and "sm" not in fix and "container" in fix
    cause, fix = classify(ValueError("something else"))
    assert cause == "ValueError: something else" and fix == "see the check job's log"


@pytest.mark.stage
def test_a_gpu_system_without_nvidia_ml_py_is_a_warning_that_says_what_goes_missing():
    """A stock NGC image has no nvidia-ml-py: the runs train without it, so preflight warns (the gate
    passes warnings), naming the telemetry rows and the isolation evidence that will be missing."""
    code = (
        "import json, sys; sys.modules['pynvml'] = None; "  # as if not installed: its import fails
        "from workflow_scripts.preflight.rank import telemetry_rows; "
        "print(json.dumps([r for r in telemetry_rows(True) if r['check'] == 'telemetry_nvml']))"
    )
    proc = subprocess.run([interpreter("pytorch"), "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (nvml,) = json.loads(proc.stdout)
    assert nvml["status"] == "warning", nvml
    assert "no GPU rows" in nvml["cause"] and "isolation will be unknown" in nvml["cause"]
    assert "nvidia-ml-py" in nvml["fix"]


@pytest.mark.unit
def test_the_gate_passes_warnings_and_stops_at_failures(tmp_path):
    from workflow_scripts.preflight import gate

    result = {"system": "gpu", "framework": "pytorch", "nodes": 1, "tasks": 2, "log": "x.log"}
    warned = tmp_path / "warned.json"
    warned.write_text(json.dumps({**result, "rows": [{"check": "telemetry_nvml", "status": "warning"}]}))
    assert gate.first_failure([warned]) is None
    failed = tmp_path / "failed.json"
    row = {"check": "gpu", "status": "failed", "node": "g1", "cause": "no GPU", "fix": "x"}
    failed.write_text(json.dumps({**result, "rows": [row]}))
    assert "check gpu: no GPU" in gate.first_failure([warned, failed])


@pytest.mark.pipeline
def test_damaged_copies_are_all_named_and_leave_no_old_ok_row_in_the_data_table(tmp_path):
    """Two pairs whose data checks passed; then both copies damaged and checked again. A failed check
    stops the workflow at its gate, where it comes before the other pair's check: its one line names
    both damaged copies and one command that remakes them. The data table waits for every pair's
    checks; where a gate stops the workflow first (Snakemake's choice of order), it is written as the
    workflow stops. Either way: the failed check's row, not its last "ok" one, no input rows read from
    the damaged data, and a pair not checked again says its rows are from before. (Two frameworks, a
    small tree.)"""
    write_config(
        tmp_path,
        training__frameworks=["mxnet", "pytorch"],
        training__long_test__gpus=[],
        dataset__embedded__classes=4,
        dataset__embedded__train_per_class=16,
        dataset__embedded__val_per_class=4,
    )
    snakemake(tmp_path, "data/lmdb/done.json", "data/recordio/done.json")
    snakemake(tmp_path, "preflight")
    table = tmp_path / "results" / "preflight_data.csv"

    def mine(check):
        with open(table) as f:
            return {r["framework"]: r for r in csv.DictReader(f) if r["check"] == check}

    assert {f: r["status"] for f, r in mine("dataset").items()} == {"mxnet": "ok", "pytorch": "ok"}, table.read_text()
    assert set(mine("input_capacity")) == {"mxnet", "pytorch"}, table.read_text()
    mdb = max((tmp_path / "data" / "lmdb").rglob("*.mdb"), key=lambda p: p.stat().st_size)
    rec = tmp_path / "data" / "recordio" / "train.rec"
    for f in (mdb, rec):
        os.truncate(f, f.stat().st_size // 2)
    proc = snakemake(tmp_path, "preflight", "--forcerun", "preflight_data_check", check=False)
    lines = failure_lines(proc)
    assert proc.returncode != 0 and lines, proc.stderr[-3000:]
    for line in lines:
        assert mdb.name in line and rec.name in line and "also damaged: " in line, line
        assert line.endswith(("snakemake --forcerun lmdb recordio", "snakemake --forcerun recordio lmdb")), line
    dataset, md = mine("dataset"), table.with_suffix(".md").read_text()
    for fw in (f for f in ("mxnet", "pytorch") if any(f"framework {f} " in ln for ln in lines)):
        assert dataset[fw]["status"] == "failed" and fw not in mine("input_capacity"), table.read_text()
        assert f"local x {fw}" in md[md.index("No input_capacity rows for") :].splitlines()[0], md
    if "rule preflight_data_table:" not in proc.stdout + proc.stderr:  # a gate stopped the workflow first
        assert f"{table.relative_to(tmp_path)} written again as the workflow stopped" in proc.stderr, proc.stderr
        assert "Written as the workflow stopped on a failed check" in md, md
    for fw, r in dataset.items():
        assert r["status"] == "failed" or f"The rows of local x {fw} are from their last check" in md, md
