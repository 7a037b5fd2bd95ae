"""How a run's ranks are stopped and how they reach each other, on a real two-node SLURM cluster
(benchmarks/slurm_cluster.py): a stopped srun step leaves no rank behind and frees its nodes for
the next step of the same job (cluster/launcher.py stop_step; preflight's supervise), each run
started through srun has a rendezvous port of its own, and nodes whose interfaces are named
otherwise still connect (cluster/netif.py own_interface). Each test runs its driver as a batch job
on the first node, as the pipeline's jobs run."""

import json
import os
import re
import signal
import subprocess
import textwrap
import threading
import time
import traceback

import psutil
import pytest
from helpers import REPO, interpreter, slurm_test_cluster
from test_slurm import DIRS, SYSTEM, cluster_config, fake_python, run_snakemake

from benchmarks import slurm_cluster

pytestmark = pytest.mark.pipeline


@pytest.fixture(scope="module")
def cluster():
    yield from slurm_test_cluster.started()


def batch(cluster, tmp_path, body, timeout=600):
    """`body` (Python, WORK its folder) run by the workflow's interpreter as a batch job holding both
    nodes; -> the JSON it prints after RESULT."""
    script, out = tmp_path / "driver.py", tmp_path / "driver.out"
    script.write_text(f"#!{interpreter('workflow')}\nWORK = {str(tmp_path)!r}\n" + textwrap.dedent(body))
    proc = subprocess.run(
        ["sbatch", "--wait", "-N2", "--exclusive", "-p", slurm_cluster.PARTITION, f"--output={out}", str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    text = out.read_text() if out.exists() else ""
    assert proc.returncode == 0, f"{proc.stdout}{proc.stderr}\n{text[-4000:]}\n{cluster.logs()}"
    return json.loads(text.split("RESULT ", 1)[1])


# Ranks that mark their start and sleep: stopped only from outside. Both nodes share this machine's
# process table (network, mount and UTS namespaces of their own only), so the driver sees them all.
RANKS = """
import glob, json, os, signal, subprocess, sys, threading, time, uuid
import psutil

MARK = uuid.uuid4().hex
os.environ["STOP_TEST_MARK"] = MARK
LAUNCH = [sys.executable, "-m", "workflow_scripts.cluster.launcher", "--nodes=2", "--nproc-per-node=1",
          "--cpus-per-task=2"]
SLEEPER = ["sh", "-c", f"touch {WORK}/started.$SLURM_PROCID; exec sleep 600"]


def ranks_left():
    found = []
    for p in psutil.process_iter(["name"]):
        try:
            if p.info["name"] == "sleep" and p.environ().get("STOP_TEST_MARK") == MARK:
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


def started():
    times = [os.path.getmtime(f) for f in glob.glob(f"{WORK}/started.*")]
    return max(times) if len(times) == 2 else time.time()


def slow_node(pid, seconds=8):
    # once both ranks run, n2's slurmd (pid) stopped for `seconds`: a node slow to answer (a loaded
    # one), so that what signals n2's rank through it, as srun forwarding a stop does, waits
    def pause():
        while len(glob.glob(f"{WORK}/started.*")) < 2:
            time.sleep(0.1)
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)
    threading.Thread(target=pause).start()


def next_step():
    # every CPU of both nodes: a step that cannot start while any rank of the stopped one holds its CPUs
    cmd = ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--cpus-per-task=2", "true"]
    try:
        return subprocess.run(cmd, timeout=90).returncode
    except subprocess.TimeoutExpired:
        return "waited 90 s for its CPUs"
"""


def slurmd_of(cluster, node):
    return dict(cluster.started)[f"slurmd-{node}"]


@pytest.fixture
def resumed(cluster):
    """n2's slurmd, sent CONT after the test whatever became of the driver that stops it."""
    pid = slurmd_of(cluster, "n2")
    yield pid
    os.kill(pid, signal.SIGCONT)


def test_a_preflight_phase_stopped_for_no_progress_leaves_no_rank_and_frees_both_nodes(cluster, resumed, tmp_path):
    """preflight's supervise stops a launcher whose two ranks (one per node) made no progress, while
    n2's slurmd is slow to answer: once it returns, neither rank runs on either node, and the job's
    next step gets every CPU of both. (supervise used to TERM and at once KILL the launcher's process
    group, srun's shepherd with it: n2's rank, which srun had not reached yet, went on running, and
    the next step waited for its CPUs.)"""
    got = batch(
        cluster,
        tmp_path,
        RANKS
        + f"""
from workflow_scripts.preflight.preflight_job import supervise
slow_node({resumed})
rc, _ = supervise([*LAUNCH, "--", *SLEEPER], None, 3, progress=started)
print("RESULT", json.dumps({{"stopped": rc is None, "both_started": len(glob.glob(f"{{WORK}}/started.*")),
                  "left": ranks_left(), "next": next_step()}}))
""",
    )
    assert got == {"stopped": True, "both_started": 2, "left": [], "next": 0}, got


def test_each_run_through_srun_has_a_rendezvous_port_of_its_own(cluster, tmp_path):
    """Two runs, one after the other, in one job (a point's repeats): each run's ranks agree on a port
    (torch.distributed's MASTER_PORT), and the second run's is not the first's, which a rank of the
    first still closing would hold. (It was one port per job: 29500 + the job's id % 2000.)"""
    got = batch(
        cluster,
        tmp_path,
        RANKS
        + """
probe = "from workflow_scripts.cluster.rank_env import detect; print('port', detect().master_port)"
runs = []
for _ in range(2):
    out = subprocess.run([*LAUNCH, "--", sys.executable, "-c", probe], capture_output=True, text=True).stdout
    runs.append(sorted({int(w.split()[-1]) for w in out.splitlines() if "port" in w}))
print("RESULT", json.dumps(runs))
""",
    )
    assert [len(ports) for ports in got] == [1, 1] and got[0] != got[1], got


# --- nodes whose interfaces are named otherwise (cluster/netif.py own_interface) ---


def rename_link(ns, old, new):
    for words in (["set", old, "down"], ["set", old, "name", new], ["set", new, "up"]):
        subprocess.run(["ip", "-n", ns, "link", *words], check=True, capture_output=True, timeout=30)


@pytest.fixture
def n2_on_ens9(cluster):
    """n2's interface on the cluster's network named ens9 for the test, where n1's is eth0: the same
    subnet, as two generations of nodes (eth0, enp1s0f0, ens9) share one in a real cluster."""
    rename_link("dls-n2", "eth0", "ens9")
    try:
        yield
    finally:
        rename_link("dls-n2", "ens9", "eth0")


def test_nodes_whose_interfaces_are_named_otherwise_connect(cluster, n2_on_ens9, tmp_path):
    """A two-node run, node 0 on eth0 and n2 on ens9: torch.distributed's Gloo (PyTorch's runs) and
    Horovod's Gloo (TensorFlow's and MXNet's) connect and all-reduce, each rank on its own node's
    interface. (The launcher gave node 0's name to every rank: Gloo on n2 found no eth0.)"""
    got = batch(
        cluster,
        tmp_path,
        RANKS
        + f"""
TORCH = (
    "import os, torch, torch.distributed as dist; from workflow_scripts.cluster.rank_env import detect; "
    "l = detect(); dist.init_process_group('gloo', rank=l.rank, world_size=l.world_size, "
    "init_method=f'tcp://{{l.master_addr}}:{{l.master_port}}'); t = torch.tensor([l.rank + 1.0]); "
    "dist.all_reduce(t); e = os.environ; "
    "print('torch', l.hostname, e['GLOO_SOCKET_IFNAME'], e['NCCL_SOCKET_IFNAME'], float(t[0]), flush=True)"
)
HOROVOD = (
    "import os; from workflow_scripts.cluster.rank_env import detect, setup_horovod; l = detect(); setup_horovod(l); "
    "import mxnet as mx, horovod.mxnet as hvd; hvd.init(); "
    "s = hvd.allreduce(mx.nd.array([hvd.rank() + 1.0]), average=False, name='x'); "
    "print('horovod', l.hostname, os.environ['HOROVOD_GLOO_IFACE'], float(s.asscalar()), flush=True)"
)
lines, said = [], []
TORCH_PY, MXNET_PY = {interpreter("pytorch")!r}, {interpreter("mxnet")!r}
for python, code, extra in ((TORCH_PY, TORCH, []), (MXNET_PY, HOROVOD, ["--horovod", "--python=" + MXNET_PY])):
    proc = subprocess.run([*LAUNCH, *extra, "--", python, "-c", code], capture_output=True, text=True)
    lines += [ln.split(": ", 1)[1].split() for ln in proc.stdout.splitlines() if ": torch " in ln or ": horovod " in ln]
    said += [ln for ln in proc.stderr.splitlines() if "network interface" in ln]
    if proc.returncode:
        said.append(proc.stderr[-2000:])
print("RESULT", json.dumps({{"ranks": sorted(lines), "said": said}}))
""",
    )
    assert got["ranks"] == [
        ["horovod", "n1", "eth0", "3.0"],
        ["horovod", "n2", "ens9", "3.0"],
        ["torch", "n1", "eth0", "=eth0", "3.0"],
        ["torch", "n2", "ens9", "=ens9", "3.0"],
    ], got
    assert any(
        "on n2: network interface ens9 (10.88.7.2), in the first node's subnet 10.88.7.0/24" in ln for ln in got["said"]
    )


# --- a point's repeats in one allocation, three of them stopped (train/job_stop.py, launcher.stop_step) ---

# The system "two"'s PyTorch: its runs _rep2, _rep4 and _rep6 train for real; the others' ranks mark
# their start and sleep, ignoring SIGUSR1 (the watchdog's ask for stacks) as a rank stuck outside
# Python does, and would train later (writing a summary) if nothing stopped them; _rep3's first
# write a beat at step 1, so that the watchdog sees them stop after it.
STOPPED_TRAINER = """#!/bin/sh
case "$*" in
  *workflow_scripts.train.pytorch_ddp*_rep2|*workflow_scripts.train.pytorch_ddp*_rep4|*workflow_scripts.train.pytorch_ddp*_rep6)
    exec {python} "$@" ;;
  *workflow_scripts.train.pytorch_ddp*)
    for run; do :; done
    touch "$run/started.$SLURM_PROCID"
    case "$run" in *_rep3) echo "1 $(date +%s)" > "$run/beat.rank$SLURM_PROCID" ;; esac
    trap '' USR1
    sleep 400
    exec {python} "$@" ;;
esac
exec {python} "$@"
"""
STOPS = {"": "stopped", "_rep3": "hung", "_rep5": "time limit"}  # the repeat, what stops it
HANG_IDLE_S = 30


def run_processes(run):
    """The pids of the processes of `run` (a run directory) alive now, on either node: their
    DLSCALE_RUN marker (cluster/neighbours.py) names it."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("DLSCALE_RUN", "").startswith(f"{run}:"):
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


def training_job_of(run, cmdline):
    """Whether `cmdline` is the training job of `run` (its --run-dir is relative to the workflow's)."""
    cmdline = cmdline or []
    return "workflow_scripts.train.training_job" in cmdline and any(w.endswith(f"/{run.name}") for w in cmdline)


def wait_for(path, stop, poll=0.2):
    while not stop.is_set() and not path.exists():
        time.sleep(poll)
    return path.exists()


def slow_n2(pid, seconds):
    """n2's slurmd stopped for `seconds` (a node slow to answer): srun's signal to n2's rank waits."""
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)


def stop_when(rep, run, log, slurmd, stop):
    """Make or meet the stop of repeat `rep` with n2's slurmd slow around it: TERM to its training job
    (""), the watchdog's hang (_rep3), the end of its share of the job (_rep5)."""
    if not wait_for(run / "started.1", stop) or not wait_for(run / "started.0", stop):
        return
    if rep == "":
        job = next(p for p in psutil.process_iter(["cmdline"]) if training_job_of(run, p.info["cmdline"]))
        threading.Timer(1, job.send_signal, (signal.SIGTERM,)).start()
        slow_n2(slurmd, 20)
    elif rep == "_rep3":  # the watchdog's limit from the beat on, its look every 2 s, 3 s for the stacks
        time.sleep(HANG_IDLE_S - 2)
        slow_n2(slurmd, 25)
    else:
        while not stop.is_set() and "will stop the ranks at" not in log.read_text():
            time.sleep(0.5)
        at = re.search(r"will stop the ranks at (\d+):(\d+):(\d+)", log.read_text()).groups()
        now = time.localtime()
        stop_at = time.mktime((*now[:3], *map(int, at), 0, 0, -1))
        time.sleep(max(0.0, stop_at - 2 - time.time()))
        slow_n2(slurmd, 22)


def watch_repeats(runs, logs, slurmd, seen, stop):
    """For each stopped repeat: its stop (stop_when), then, the moment the next repeat's job starts
    (its attempt log appears), the stopped run's processes still alive."""
    try:
        for rep in STOPS:
            run = runs / f"pytorch_fp32_2gpu_synthetic{rep}"
            log = logs / f"pytorch_fp32_2gpu_synthetic{rep}.log.attempt1"
            nxt = {"": "_rep2", "_rep3": "_rep4", "_rep5": "_rep6"}[rep]
            if not wait_for(log, stop):
                return
            stop_when(rep, run, log, slurmd, stop)
            if wait_for(logs / f"pytorch_fp32_2gpu_synthetic{nxt}.log.attempt1", stop, poll=0.05):
                seen[rep] = run_processes(run)
    except Exception:  # said by the test, not lost in a thread
        seen["watcher failed"] = traceback.format_exc()


@pytest.fixture(scope="module")
def stopped_repeats(cluster, tmp_path_factory):
    """One point of 6 repeats over both nodes (every CPU of each), in one SLURM job, in turn: the first
    stopped by a TERM to its training job, the third by the watchdog, the fifth at the end of its own
    share of the job, each while n2's slurmd is slow to answer; the others train. The watchdog's
    start-up limit is off (0): _rep5's ranks never make a step, and with the limit clamped to a 3-minute
    job (plan/config_checks.py, clamp_hang_start) they would be stopped as hung before their share ends;
    _rep3's beat puts it under hang_idle_s, which stays."""
    work = tmp_path_factory.mktemp("stopped_repeats")
    fake = fake_python(work, "stopped-python", STOPPED_TRAINER)
    system = {**SYSTEM, "cpus_per_task": 2, "time_min": 3, "envs": {"pytorch": str(fake)}}
    cluster_config(
        work,
        systems={"two": system},
        training__systems=["two"],
        training__frameworks=["pytorch"],
        training__inputs=["synthetic"],
        training__repeats=6,
        training__retries=0,
        training__hang_idle_s=HANG_IDLE_S,
        training__hang_start_s=0,
        preflight__gate=False,
    )
    runs, logs = work / DIRS["results_dir"] / "runs" / "two", work / DIRS["log_dir"] / "train" / "two"
    slurmd, seen, stop = dict(cluster.started)["slurmd-n2"], {}, threading.Event()
    watcher = threading.Thread(target=watch_repeats, args=(runs, logs, slurmd, seen, stop), daemon=True)
    watcher.start()
    proc = run_snakemake(work, "training")
    try:
        out, _ = proc.communicate(timeout=1800)
    finally:
        stop.set()
        watcher.join(timeout=60)
        os.kill(slurmd, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, f"{out[-6000:]}\n{cluster.logs()}"
    return runs, logs, seen, out


def test_after_each_stop_no_rank_is_left_and_the_next_repeat_in_the_job_completes(stopped_repeats):
    """Whether TERM, the watchdog or the run's own share stopped it, a run's training job returns only
    once its step is over, though n2's slurmd was slow to pass the stop on: srun reported how each of
    its two tasks ended, no process of the stopped run is left on either node when the next repeat's
    job starts, and that repeat's steps find both nodes free at once; it trains in the same SLURM job,
    and the stopped run's record stays stopped. (The job used to SIGKILL srun at once and return,
    leaving the step to srun's shepherd: srun reported nothing, and each next repeat's first srun
    waited, "Requested nodes are busy", for the stopped step to let go of them.)"""
    runs, logs, seen, out = stopped_repeats
    assert seen == {rep: [] for rep in STOPS}, seen
    jobs = set()
    for k in range(1, 7):
        rep = f"_rep{k}" if k > 1 else ""
        s = json.loads((runs / f"pytorch_fp32_2gpu_synthetic{rep}" / "summary.json").read_text())
        log = (logs / f"pytorch_fp32_2gpu_synthetic{rep}.log").read_text()
        jobs.add(re.search(r"SLURM job (\d+)", log).group(1))
        if rep in STOPS:
            assert s["status"] == "failed" and s["stopped"] == STOPS[rep], (rep, s)
            assert s["permanent"] is (STOPS[rep] == "time limit"), (rep, s)
            ended = re.findall(r"^srun: error: (n\d): task (\d): \w+", log, re.M)
            assert sorted(ended) == [("n1", "0"), ("n2", "1")], (rep, log[-3000:])
        else:
            assert s["status"] == "ok" and s["timed_steps"] == 6 and s["num_nodes"] == 2, (rep, s)
            assert "step creation temporarily disabled" not in log, (rep, log[-3000:])
    assert len(jobs) == 1, jobs
