"""The training stage on the embedded default: each framework, 2 data-parallel processes on the
CPU (Gloo), checked from the runs' own outputs."""

import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

import pytest
from helpers import CONFIG, PIPELINE_CONFIG, REPO, TRAINERS, interpreter, snakemake, trainer_command, write_config

from workflow_scripts.cluster import page_cache, rank_env

FRAMEWORKS = ("tensorflow", "mxnet", "pytorch")


def run_of(work, framework):
    return work / "results" / "runs" / "local" / f"{framework}_fp32_2gpu"


def steps_of(run):
    return [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]


@pytest.mark.pipeline
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_both_ranks_hold_identical_weights(pipeline_run, framework):
    run = run_of(pipeline_run, framework)
    ranks = [json.loads((run / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["launch"]["world_size"] for r in ranks] == [2, 2]
    assert ranks[0]["weights_sha256"] == ranks[1]["weights_sha256"]
    assert ranks[0]["weights_sha256"]["after_step_1"] != ranks[0]["weights_sha256"]["final"]
    if framework == "pytorch":  # ddp_graph auto on one node: one graph; BatchNorm buffers not broadcast
        settings = json.loads((run / "summary.json").read_text())["pytorch"]
        assert (settings["ddp_graph"], settings["broadcast_buffers"]) == ("whole", False)


@pytest.mark.pipeline
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_summary_is_images_timed_over_time_timed_after_warmup(pipeline_run, framework):
    run = run_of(pipeline_run, framework)
    summary = json.loads((run / "summary.json").read_text())
    steps = steps_of(run)
    warmup, timed = PIPELINE_CONFIG["training"]["warmup_steps"], PIPELINE_CONFIG["training"]["steps"]
    assert [s["phase"] for s in steps] == ["warmup"] * warmup + ["timed"] * timed
    global_batch = CONFIG["training"]["batch_per_gpu"][framework] * 2
    after = steps[warmup:]
    assert summary["images_timed"] == timed * global_batch == sum(s["images"] for s in after)
    assert summary["images_per_s"] == pytest.approx(sum(s["images"] for s in after) / sum(s["wall_s"] for s in after))
    rates = [s["images"] / s["wall_s"] for s in after]
    assert summary["step_images_per_s_cv"] == pytest.approx(statistics.pstdev(rates) / statistics.fmean(rates))
    assert summary["stable"] == (summary["step_images_per_s_cv"] <= 0.02)
    # Warm-up is excluded by construction: the summary counts only the steps marked timed (a
    # timing relation between warm-up and timed steps is not asserted: a busy machine reverses it).
    assert summary["timed_steps"] == timed and summary["warmup_steps"] == warmup
    assert summary["seconds_timed"] == pytest.approx(sum(s["wall_s"] for s in after))
    # The training thread's CPU time and run-queue wait are parts of the step's wall time.
    assert all(0 <= s["thread_cpu_s"] and 0 <= s["runqueue_wait_s"] for s in steps), steps
    assert all(s["thread_cpu_s"] + s["runqueue_wait_s"] <= s["wall_s"] + 2e-3 for s in steps), steps
    if framework == "pytorch":
        # Each step says how long it waited for its input: a slow step with a short wait was not
        # held up by the input. On a CPU there is no fetch ahead, so each step's wait is its batch's.
        assert all(0 <= s["input_wait_s"] <= s["wall_s"] for s in steps), steps
        assert summary["input_wait_s_timed"] == pytest.approx(sum(s["input_wait_s"] for s in after))


@pytest.mark.pipeline
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_run_records_cache_clearing_and_telemetry(pipeline_run, framework):
    run = run_of(pipeline_run, framework)
    summary = json.loads((run / "summary.json").read_text())
    (cache,) = summary["page_cache"].values()
    assert cache["dataset_evicted"] and cache["after"]["resident_bytes"] == 0 and cache["before"]["files"] > 0
    # The suite's training.cache_clear reached the job: the dataset alone, the node's caches kept.
    assert (cache["scope"], cache["method"], cache["dropped_all_caches"]) == ("dataset", "fadvise_dontneed", False)
    (csv,) = run.glob("telemetry.*.csv")
    metrics = {line.split(",")[2] for line in csv.read_text().splitlines()[1:]}
    assert {"read_MBps", "cpu_percent", "cpu_steal_percent", "send_MBps", "recv_MBps"} <= metrics
    # The steps' clock and the telemetry's share an origin: the samples fall among the steps.
    origin = summary["telemetry_origin_s"]
    ends = [s["t_end"] - origin for s in steps_of(run)]
    times = [float(line.split(",")[0]) for line in csv.read_text().splitlines()[1:]]
    assert 0 < ends[0] and min(times) < ends[-1], (ends, times)


@pytest.mark.pipeline
def test_synthetic_run_reads_no_dataset_file(pipeline_run, tmp_path):
    lmdb = pipeline_run / "data" / "lmdb"
    files = page_cache.dataset_files([lmdb])
    page_cache.evict(files)
    assert page_cache.residency(files)["resident_bytes"] == 0
    cmd = trainer_command(
        data=lmdb,
        data_source="synthetic",
        classes=16,
        batch_per_gpu=4,
        steps=3,
        out=tmp_path,
        telemetry_interval=0.2,
    )
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert page_cache.residency(files)["resident_bytes"] == 0, "a synthetic run read the dataset"
    assert json.loads((tmp_path / "summary.json").read_text())["timed_steps"] == 3


def _nobody(cmd):
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]


def _clear_as_nobody(f, out):
    proc = subprocess.run(
        _nobody(
            [interpreter("workflow"), "-m", "workflow_scripts.cluster.page_cache", "--paths", str(f), "--out", str(out)]
        ),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


@pytest.mark.stage
def test_cache_clearing_without_root_evicts_the_dataset_and_says_so():
    d = Path(tempfile.mkdtemp(dir="/var/tmp"))
    os.chmod(d, 0o777)
    mine, roots = d / "mine.bin", d / "roots.bin"
    for f in (mine, roots):
        f.write_bytes(os.urandom(4 << 20))
        os.chmod(f, 0o644)
        f.read_bytes()
        assert page_cache.resident_bytes(f) > 0
    os.chown(mine, 65534, 65534)  # the unprivileged user's own dataset
    report = _clear_as_nobody(mine, d / "mine.json")
    assert report["method"] == "fadvise_dontneed" and report["dataset_evicted"]
    assert report["dropped_all_caches"] is False
    assert report["before"]["resident_bytes"] > 0 and report["after"]["resident_bytes"] == 0
    assert page_cache.resident_bytes(mine) == 0
    assert any(a["method"] == "drop_caches" and not a["ok"] for a in report["attempts"])
    # For a file the user may not write, Linux's mincore reports every page resident, so the
    # eviction cannot be verified: the report must not claim it.
    report = _clear_as_nobody(roots, d / "roots.json")
    assert report["method"] == "fadvise_dontneed" and report["dataset_evicted"] is False
    assert report["after"]["unverifiable_files"] == 1


@pytest.mark.stage
@pytest.mark.skipif(os.geteuid() != 0, reason="dropping the node's caches needs root")
def test_node_scope_drops_the_nodes_caches(tmp_path):
    """training.cache_clear: node, the default and the study's clear: /proc/sys/vm/drop_caches (this
    machine's: a stage test)."""
    f = tmp_path / "data.bin"
    f.write_bytes(os.urandom(1 << 20))
    f.read_bytes()
    report = page_cache.clear([f])
    assert (report["scope"], report["method"], report["dropped_all_caches"]) == ("node", "drop_caches", True)
    assert report["dataset_evicted"] and page_cache.resident_bytes(f) == 0


@pytest.mark.stage
def test_dataset_scope_evicts_the_dataset_and_touches_nothing_else(tmp_path):
    """The dataset's own pages, through this machine's kernel (fadvise, mincore): a stage test."""
    f = tmp_path / "data.bin"
    f.write_bytes(os.urandom(1 << 20))
    f.read_bytes()
    marker = tmp_path / "ran"
    drop = tmp_path / "drop_caches"  # where node scope would write: must stay untouched
    report = page_cache.clear([f], command=f"touch {marker}", drop_caches=str(drop), scope="dataset")
    assert (report["method"], report["dropped_all_caches"], report["dataset_evicted"]) == (
        "fadvise_dontneed",
        False,
        True,
    )
    assert [a["method"] for a in report["attempts"]] == ["fadvise_dontneed"]
    assert not marker.exists() and not drop.exists() and page_cache.resident_bytes(f) == 0


@pytest.mark.stage
def test_unavailable_drop_caches_or_failing_command_is_never_claimed(tmp_path):
    f = tmp_path / "data.bin"
    f.write_bytes(os.urandom(1 << 20))
    report = page_cache.clear([f], command="false", drop_caches=str(tmp_path / "no" / "drop_caches"))
    assert report["method"] == "fadvise_dontneed" and report["dropped_all_caches"] is False
    assert [(a["method"], a["ok"]) for a in report["attempts"]] == [
        ("command", False),
        ("drop_caches", False),
        ("fadvise_dontneed", True),
    ]


@pytest.mark.stage
def test_mxnet_fp16_on_a_cpu_fails_clearly(tmp_path):
    cmd = trainer_command(
        "mxnet", small=False, data_source="synthetic", precision="fp16", batch_per_gpu=2, out=tmp_path
    )
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "mxnet fp16 needs a GPU" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.pipeline
def test_mxnets_runs_ran_through_onednn_as_its_wheel_is_built(pipeline_run):
    """MXNet's CPU operators through oneDNN, its wheel's default (docs/decisions.md#mxnet_onednn),
    two processes and Horovod's all-reduce included."""
    assert json.loads((run_of(pipeline_run, "mxnet") / "summary.json").read_text())["onednn"] is True


@pytest.mark.stage
def test_mxnet_onednn_turned_off_in_the_environment_is_recorded(tmp_path):
    cmd = trainer_command("mxnet", data_source="synthetic", classes=4, batch_per_gpu=2, out=tmp_path)
    env = dict(os.environ, MXNET_MKLDNN_ENABLED="0")
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "summary.json").read_text())["onednn"] is False


@pytest.mark.stage
def test_unplaceable_point_is_a_parse_time_error(tmp_path):
    write_config(tmp_path, training__gpus=[3])
    proc = snakemake(tmp_path, "-n", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "training.gpus = 3" in out and "'local'" in out


@pytest.mark.stage
def test_launch_environment_from_slurm():
    env = {
        "SLURM_PROCID": "3",
        "SLURM_STEP_NUM_TASKS": "4",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "1",
        "SLURM_STEP_NODELIST": "gpu[07-08]",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "SLURM_JOB_ID": "4242",
        "SLURMD_NODENAME": "gpu08",
    }
    got = rank_env.detect(env)
    assert (got.rank, got.world_size, got.local_rank, got.local_size, got.node_rank, got.num_nodes) == (
        3,
        4,
        1,
        2,
        1,
        2,
    )
    assert (got.master_addr, got.hostname, got.source) == ("gpu07", "gpu08", "slurm")
    assert rank_env.expand_nodelist("n[1-2],login,c[001-002,5]") == ["n1", "n2", "login", "c001", "c002", "c5"]


@pytest.fixture(scope="module")
def synthetic_runs(tmp_path_factory):
    """Each trainer once on the CPU with synthetic data: one warm-up and two timed steps."""
    runs = {}
    for framework in TRAINERS:
        out = tmp_path_factory.mktemp(framework)
        cmd = trainer_command(framework, data_source="synthetic", classes=4, batch_per_gpu=2, out=out)
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (framework, proc.stderr[-3000:])
        runs[framework] = (steps_of(out), json.loads((out / "summary.json").read_text()))
    return runs


@pytest.mark.stage
def test_the_three_trainers_time_and_log_their_steps_alike(synthetic_runs):
    """One timed loop (workflow_scripts/train/loop.py): every framework's step records the same
    fields, its input wait among them, and its summary the loop's own."""
    fields = {framework: [set(s) for s in steps] for framework, (steps, _) in synthetic_runs.items()}
    assert fields["tensorflow"] == fields["mxnet"] == fields["pytorch"], fields
    assert "input_wait_s" in fields["tensorflow"][0]
    for framework, (steps, summary) in synthetic_runs.items():
        assert [s["phase"] for s in steps] == ["warmup", "timed", "timed"], framework
        assert all(0 <= s["input_wait_s"] <= s["wall_s"] for s in steps), (framework, steps)
        # Without a GPU no framework fetches ahead or reads a loss late: the same interval is timed.
        assert (summary["fetch_ahead"], summary["loss_lag"]) == (False, 0), framework
        assert summary["input_wait_s_timed"] == pytest.approx(sum(s["input_wait_s"] for s in steps[1:]))
        assert summary["images_per_s"] == pytest.approx(4 / sum(s["wall_s"] for s in steps[1:]))


@pytest.mark.stage
def test_a_synthetic_run_records_no_input_path(synthetic_runs):
    """Synthetic data is decoded by no one: no decode threads, loader workers or input pipeline
    settings in the summary (cluster.cpus' rule would have given some)."""
    for framework in ("tensorflow", "mxnet"):
        summary = synthetic_runs[framework][1]
        assert summary["decode_threads"] is None and "decode" not in summary["cpus"]["threads"], framework
    summary = synthetic_runs["pytorch"][1]
    assert summary["input"] == summary["pytorch"]["input"] == "synthetic"
    assert (summary["loader_workers"], summary["gpu_input"]) == (0, {})
    assert (summary["pytorch"]["prefetch"], summary["pytorch"]["dali_pools_mb"]) == (0, [0, 0])
