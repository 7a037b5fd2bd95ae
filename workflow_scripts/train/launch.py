"""Start a data-parallel run: K processes on this host, or N nodes x K tasks through srun.

    python -m workflow_scripts.train.launch --nproc-per-node 2 [--srun --nodes 2] [--horovod] \
        -- python -m workflow_scripts.train.pytorch_ddp ...

Locally it sets torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...) per child;
under srun each task reads SLURM's (common/launch.py). With --horovod it also runs the Gloo
rendezvous server that horovodrun would run, here, and tells every worker where it is.
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def _free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _rendezvous(hosts, per_node):
    """Horovod's own HTTP rendezvous server, initialised with the slot plan horovodrun makes."""
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    from horovod.runner.http.http_server import RendezvousServer

    server = RendezvousServer(verbose=0)
    port = server.start()
    plan = get_host_assignments(parse_hosts(",".join(f"{h}:{per_node}" for h in hosts)), len(hosts) * per_node)
    server.init(plan)
    return server, port


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc-per-node", type=int, default=1)
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--srun", action="store_true", help="start the tasks with srun (inside a SLURM job)")
    ap.add_argument("--horovod", action="store_true", help="run Horovod's Gloo rendezvous server")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("no command to launch")
    env = dict(os.environ)
    here = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    if a.srun:
        from ..common.launch import expand_nodelist

        hosts = expand_nodelist(os.environ["SLURM_JOB_NODELIST"])[: a.nodes]
    else:
        hosts = [here]
    server = None
    if a.horovod:
        server, port = _rendezvous(hosts, a.nproc_per_node)
        env.update(DLSCALE_RENDEZVOUS_ADDR=here, DLSCALE_RENDEZVOUS_PORT=str(port))
    try:
        if a.srun:
            srun = ["srun", f"--nodes={a.nodes}", f"--ntasks={a.nodes * a.nproc_per_node}",
                    f"--ntasks-per-node={a.nproc_per_node}", "--kill-on-bad-exit=1"]
            sys.exit(subprocess.call(srun + cmd, env=env))
        sys.exit(_local(cmd, env, a.nproc_per_node))
    finally:
        if server:
            server.stop()


def _local(cmd, env, n):
    port = str(_free_port())
    procs = []
    for r in range(n):
        e = dict(env, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(n),
                 GROUP_RANK="0", NNODES="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen(cmd, env=e))
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
