"""Start a data-parallel run: K processes on this host, or N nodes x K tasks through srun.

    python -m workflow_scripts.train.launch --nproc-per-node 2 [--nodes 2] [--horovod] \
        -- python -m workflow_scripts.train.pytorch_ddp ...
    python -m workflow_scripts.train.launch --per-node --nodes 2 -- python -m ...page_cache ...

Inside a SLURM allocation (SLURM_JOB_ID set) the tasks are started with srun, each reading
SLURM's variables (common/launch.py); elsewhere, or for a single process, as child processes
with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...). --per-node runs the
command once on every node of the run (page-cache clearing). With --horovod it also runs the
Gloo rendezvous server that horovodrun would run, here, and tells every worker where it is.
"""
import argparse
import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import time

from ..common import cuda_cache, slurm


def _free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def rendezvous(python, hosts, per_node):
    """Horovod's rendezvous server (train/rendezvous.py) in the framework's interpreter, for as
    long as the run lasts; yields its port."""
    proc = subprocess.Popen([*python, "-m", "workflow_scripts.train.rendezvous", "--hosts", ",".join(hosts),
                             "--per-node", str(per_node)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if not line.strip().isdigit():
            raise SystemExit(f"launch: Horovod's rendezvous server did not start ({shlex.join(python)}; exit "
                             f"status {proc.wait()}): is Horovod installed in this interpreter?")
        yield int(line)
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def srun_command(nodes, per_node, cpus_per_task, extra=""):
    """The srun line for one run. Snakemake's SLURM job step strips the job's SLURM_* geometry
    from the environment, so every size is given here rather than inherited."""
    cmd = ["srun", f"--nodes={nodes}", f"--ntasks={nodes * per_node}", f"--ntasks-per-node={per_node}",
           "--kill-on-bad-exit=1", "--label"]
    if cpus_per_task:
        cmd.append(f"--cpus-per-task={cpus_per_task}")
    return cmd + shlex.split(extra)


def add_arguments(ap):
    """The launcher's options, shared with the training job (train/job.py) that calls run()."""
    ap.add_argument("--nproc-per-node", type=int, default=1)
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--launcher", choices=("auto", "srun", "local"), default="auto",
                    help="auto: srun inside a SLURM allocation when more than one process runs")
    ap.add_argument("--cpus-per-task", type=int, default=0, help="srun only")
    cuda_cache.add_argument(ap)
    ap.add_argument("--srun-args", default="", help="further srun flags (e.g. --gpus-per-node=4), split "
                    "into words as a shell would but never run by one")
    ap.add_argument("--horovod", action="store_true", help="run Horovod's Gloo rendezvous server")
    ap.add_argument("--python", default=shlex.quote(sys.executable),
                    help="the framework's interpreter as words (a container's exec line): runs the rendezvous server")


def uses_srun(a, per_node):
    """Whether a run of a.nodes x per_node processes starts through srun (else as children here)."""
    return a.launcher == "srun" or (a.launcher == "auto" and "SLURM_JOB_ID" in os.environ and a.nodes * per_node > 1)


def run(cmd, a, per_node_once=False, stdout=None):
    """Start `cmd` as the ranks of one run (or, with per_node_once, once on every node of it);
    returns the first failing exit status, else 0. stdout: where the ranks' output goes (a file
    object; default: ours)."""
    per_node = 1 if per_node_once else a.nproc_per_node
    use_srun = uses_srun(a, per_node)
    if a.nodes > 1 and not use_srun:
        raise SystemExit(f"launch: {a.nodes} nodes need srun: run inside a SLURM allocation "
                         f"(snakemake --profile slurm)")
    env = dict(os.environ, **({} if per_node_once else cuda_cache.environment(a.cuda_cache_dir, cmd)))
    here = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    with contextlib.ExitStack() as stack:
        if a.horovod and not per_node_once:
            hosts = slurm.job_hosts(os.environ["SLURM_JOB_ID"])[: a.nodes] if use_srun else [here]
            port = stack.enter_context(rendezvous(shlex.split(a.python), hosts, per_node))
            env.update(DLSCALE_RENDEZVOUS_ADDR=here, DLSCALE_RENDEZVOUS_PORT=str(port))
        if use_srun:
            srun = srun_command(a.nodes, per_node, a.cpus_per_task, a.srun_args)
            print("launch:", shlex.join(srun + cmd), file=sys.stderr, flush=True)
            return subprocess.call(srun + cmd, env=env, stdout=stdout)
        return _local(cmd, env, per_node, stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap)
    ap.add_argument("--per-node", action="store_true", help="one task per node (node-level work)")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("no command to launch")
    sys.exit(run(cmd, a, per_node_once=a.per_node))


def _local(cmd, env, n, stdout=None):
    port = str(_free_port())
    procs = []
    for r in range(n):
        e = dict(env, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(n),
                 GROUP_RANK="0", NNODES="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen(cmd, env=e, stdout=stdout))
    # One failed rank would leave the others blocked in a collective: stop them all.
    while True:
        codes = [p.poll() for p in procs]
        failed = [c for c in codes if c not in (None, 0)]
        if failed:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                p.wait()
            return failed[0]
        if all(c == 0 for c in codes):
            return 0
        time.sleep(0.2)


if __name__ == "__main__":
    main()
