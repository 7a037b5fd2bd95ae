"""Start a data-parallel run: K processes on this host, or N nodes x K tasks through srun.

    python -m workflow_scripts.cluster.launcher --nproc-per-node 2 [--nodes 2] [--horovod] \
        -- python -m workflow_scripts.train.pytorch_ddp ...
    python -m workflow_scripts.cluster.launcher --per-node --nodes 2 -- python -m ...page_cache ...

Inside a SLURM allocation (SLURM_JOB_ID set) the tasks are started with srun, each reading
SLURM's variables (cluster/rank_env.py); elsewhere, or for a single process, as child processes
with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...). --per-node runs the
command once on every node of the run (page-cache clearing). With --horovod it also runs the
Gloo rendezvous server that horovodrun would run, here, and tells every worker where it is (or,
with --horovod-controller mpi, leaves the ranks to srun's MPI plugin). The network the ranks talk
over is chosen once, here (cluster/netif.py): its interface and address on this node, from which
each node's ranks take their own interface in that network (rank_env.detect). Each run gets a port
of its own for torch.distributed's rendezvous. Ranks in a container are given every variable set
here explicitly, since the runtime lets the image's own values win (cluster/container_env.py).

Stopped (an exception raised into its wait: the training job's stop; TERM to the launcher as a
process), it stops the ranks before it returns: srun through SLURM (stop_step), local ranks by TERM
and then KILL.
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

from ..common import schema
from . import comm_env, container_env, cpu_bind, cuda_cache, gpu_identity, nccl_log, netif, slurm
from .comm_env import SETTABLE

# torch.distributed's rendezvous port of a run started through srun (cluster/rank_env.py)
PORT_ENV = "DLSCALE_MASTER_PORT"


def _free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def rendezvous(python, hosts, per_node, here=None):
    """Horovod's rendezvous server (train/rendezvous.py) in the framework's interpreter, for as
    long as the run lasts; yields its port. A pyxis interpreter is a one-task srun of its own: it
    runs on this node (`here`), whose address the workers are given."""
    if container_env.runtime_of(python) == "pyxis" and here:
        python = [python[0], f"--nodelist={here}", *python[1:]]
    proc = subprocess.Popen(
        [*python, "-m", "workflow_scripts.train.rendezvous", "--hosts", ",".join(hosts), "--per-node", str(per_node)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        if not line.strip().isdigit():
            raise SystemExit(
                f"launch: Horovod's rendezvous server did not start ({shlex.join(python)}; exit "
                f"status {proc.wait()}): is Horovod installed in this interpreter?"
            )
        yield int(line)
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def srun_command(nodes, per_node, cpus_per_task, extra="", mpi=""):
    """The srun line for one run. Snakemake's SLURM job step strips the job's SLURM_* geometry
    from the environment, so every size is given here rather than inherited. Every task, on every
    node, gets the environment run() prepared (PYTHONPATH with the workflow's folder, the rendezvous,
    config nccl_env): --export=ALL whatever a site's SLURM_EXPORT_ENV says. mpi: srun's MPI plugin
    (config systems.<name>.srun_mpi), for programs whose ranks MPI connects."""
    cmd = [
        "srun",
        f"--nodes={nodes}",
        f"--ntasks={nodes * per_node}",
        f"--ntasks-per-node={per_node}",
        "--kill-on-bad-exit=1",
        "--label",
        "--export=ALL",
    ]
    if cpus_per_task:
        cmd.append(f"--cpus-per-task={cpus_per_task}")
    if mpi:
        cmd.append(f"--mpi={mpi}")
    return cmd + shlex.split(extra)


def config_env(assignments):
    """--env NAME=VALUE words (config nccl_env) as a dict; a name outside SETTABLE is refused."""
    env = {}
    for word in assignments:
        name, eq, value = word.partition("=")
        if not eq or not SETTABLE.fullmatch(name):
            raise SystemExit(
                f"launch: --env {word!r}: expected NAME=VALUE with NAME matching {SETTABLE.pattern} (config nccl_env)"
            )
        env[name] = value
    return env


def network_env(a, hosts, env, here=None):
    """The interface the ranks of a run on `hosts` talk over, chosen once here: (interface, its
    address, variables for NCCL's and Gloo's bootstraps). Runs on one node leave NCCL and Gloo to
    choose unless config names an interface; variables already set win. here: this host, the run's
    first node unless the launcher runs outside the allocation (salloc on a login node), whose own
    interface then says nothing of the nodes': each node's ranks choose theirs (netif.own_interface)."""
    off_nodes = len(hosts) > 1 and here is not None and here != hosts[0]
    try:
        iface, addr, why = netif.choose(hosts if off_nodes else hosts[1:], a.network_interface)
    except netif.InterfaceError as exc:
        raise SystemExit(f"launch: {exc}")
    said = "; this host is not one of the run's nodes: each node chooses its own" if off_nodes else ""
    print(f"launch: network interface {iface} ({addr}), from {why}{said}", file=sys.stderr, flush=True)
    extra = {}
    if len(hosts) > 1 or a.network_interface != "auto":
        # NCCL reads a bare name as a prefix (eth0 would also take eth0.100); '=' means exactly this one.
        for name, value in (("NCCL_SOCKET_IFNAME", f"={iface}"), ("GLOO_SOCKET_IFNAME", iface)):
            if name not in env:
                extra[name] = value
        # node 0's interface and network (or, from off the nodes, the nodes themselves): each node's
        # ranks swap in their own interface (rank_env.detect)
        named = [n for n in extra if n in netif.NODE_VARIABLES]
        if off_nodes and a.network_interface == "auto":
            extra.update(netif.peers_env(hosts, named))
        else:
            extra.update(netif.first_node_env(iface, addr, named))
    return iface, addr, extra


def horovod_env(a, stack, hosts, iface, addr, per_node, use_srun):
    """What Horovod's workers need beyond their rank: under Gloo the rendezvous server (started
    here, for as long as `stack` lasts), its address on the chosen interface and the time Gloo
    waits for every rank; under MPI only the controller's name."""
    if a.horovod_controller == "mpi":
        if a.nodes * per_node > 1 and not use_srun:
            raise SystemExit(
                "launch: config training.horovod_controller = mpi starts Horovod's ranks through srun's "
                "MPI plugin: run inside a SLURM allocation (snakemake --profile slurm), or use gloo"
            )
        return {"HOROVOD_CONTROLLER": "mpi"}
    port = stack.enter_context(rendezvous(shlex.split(a.python), hosts, per_node, hosts[0]))
    return {
        "DLSCALE_RENDEZVOUS_ADDR": addr,
        "DLSCALE_RENDEZVOUS_PORT": str(port),
        "DLSCALE_GLOO_IFACE": iface,
        "HOROVOD_GLOO_TIMEOUT_SECONDS": str(a.gloo_timeout_s),
    }


# config training.*: what every rank of a run is started with
KEYS = ("cuda_cache_dir", "horovod_controller", "gloo_timeout_s", "network_interface", "bind_cpus")


def add_arguments(ap):
    """The launcher's options, shared with the jobs that call run() (train/training_job.py) or
    start the launcher (preflight/preflight_job.py: parse())."""
    ap.add_argument("--nproc-per-node", type=int, default=1)
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument(
        "--launcher",
        choices=("auto", "srun", "local"),
        default="auto",
        help="auto: srun inside a SLURM allocation when more than one process runs",
    )
    ap.add_argument("--cpus-per-task", type=int, default=0, help="srun only")
    ap.add_argument(
        "--srun-args",
        default="",
        help="further srun flags (e.g. --gpus-per-node=4), split into words as a shell would but never run by one",
    )
    ap.add_argument("--horovod", action="store_true", help="run Horovod's Gloo rendezvous server")
    schema.add_arguments(ap, "training", KEYS)
    ap.add_argument("--srun-mpi", default="", help="config systems.<name>.srun_mpi: srun's --mpi= for MPI programs")
    ap.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="config nccl_env: set in every rank's environment (NCCL_*, TORCH_SYMM_MEM_*, NVSHMEM_*)",
    )
    ap.add_argument(
        "--nccl-log-dir",
        default="",
        metavar="DIR",
        help="every rank writes NCCL's initialisation lines (NCCL_DEBUG=INFO) to DIR/nccl.<host>.<pid>.log, "
        "for cluster/nccl_log.py to say which transport NCCL used; NCCL variables already set win, and DIR's "
        "earlier nccl.*.log files are removed",
    )
    ap.add_argument(
        "--python",
        default=shlex.quote(sys.executable),
        help="the framework's interpreter as words (a container's exec line): runs the rendezvous server",
    )


def parse(words):
    """The launcher's options among `words` (a job that starts the launcher with them reads them too)."""
    ap = argparse.ArgumentParser(prog="launcher")
    add_arguments(ap)
    return ap.parse_args(words)


def uses_srun(a, per_node, cmd=()):
    """Whether a run of a.nodes x per_node processes starts through srun (else as children here):
    always for a pyxis container, which only srun starts."""
    if container_env.runtime_of(list(cmd)) == "pyxis":
        if "SLURM_JOB_ID" not in os.environ:
            raise SystemExit(
                "launch: a pyxis container (config runtime: pyxis) starts only through srun: run inside a "
                "SLURM allocation (snakemake --profile slurm), or use runtime: apptainer"
            )
        return True
    return a.launcher == "srun" or (a.launcher == "auto" and "SLURM_JOB_ID" in os.environ and a.nodes * per_node > 1)


def run(cmd, a, per_node_once=False, stdout=None, env_record=None):
    """Start `cmd` as the ranks of one run (or, with per_node_once, once on every node of it);
    returns the first failing exit status, else 0. stdout: where the ranks' output goes (a file
    object; default: ours). env_record: a dict that receives the communication settings the
    ranks were given (cluster/comm_env.py)."""
    per_node = 1 if per_node_once else a.nproc_per_node
    use_srun = uses_srun(a, per_node, cmd)
    if a.nodes > 1 and not use_srun:
        raise SystemExit(
            f"launch: {a.nodes} nodes need srun: run inside a SLURM allocation (snakemake --profile slurm)"
        )
    env = dict(os.environ, **({} if per_node_once else cuda_cache.environment(a.cuda_cache_dir, cmd)))
    cmd = cmd if per_node_once else cuda_cache.bound(cmd, env)
    here = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    with contextlib.ExitStack() as stack:
        if not per_node_once:
            env.update(config_env(a.env))
            remote = use_srun and (a.horovod or a.nodes > 1)
            hosts = slurm.job_hosts(os.environ["SLURM_JOB_ID"])[: a.nodes] if remote else [here]
            iface, addr, extra = network_env(a, hosts, env, here)
            env.update(extra)
            if a.horovod:
                env.update(horovod_env(a, stack, hosts, iface, addr, per_node, use_srun))
            if a.nccl_log_dir:
                nccl_log.prepare(a.nccl_log_dir)
                debug, note = nccl_log.debug_env(a.nccl_log_dir, env)
                env.update(debug)
                if note:
                    print(f"launch: NCCL's transport: {note}", file=sys.stderr, flush=True)
        if env_record is not None:
            env_record.update(comm_env.recorded(env))
        if use_srun:
            if not per_node_once:
                # One port per run, not per job: a point's repeats share one job, one after another.
                env.setdefault(PORT_ENV, str(_free_port()))
            srun = srun_command(a.nodes, per_node, a.cpus_per_task, a.srun_args, "" if per_node_once else a.srun_mpi)
            env = container_env.passed(cmd, env, os.environ)
            line = container_env.srun_line(srun, cmd, env)
            print("launch:", shlex.join(line), file=sys.stderr, flush=True)
            return run_step(line, env, stdout)
        bind = a.bind_cpus == "auto" and not per_node_once
        return _local(cmd, env, per_node, stdout, bind)


# srun waits up to SLURM's KillWait + 2 s (30 + 2 by default) for a stopped step's tasks to end
STEP_STOP_S = 45.0
# the longest stop_step takes before it returns, for a caller that waits for the launcher to stop
STOP_S = 2 * STEP_STOP_S + 10
# stop_step's words in the log, before srun reports the step it stops (train/job_stop.cause_of)
STOPPING = "launch: stopping srun"


def run_step(cmd, env, stdout=None):
    """srun's exit status; an exception raised into the wait (the job being stopped) stops the step
    first (stop_step), then goes on."""
    proc = subprocess.Popen(cmd, env=env, stdout=stdout)
    try:
        return proc.wait()
    except BaseException:
        stop_step(proc)
        raise


def _say(line):
    print(f"launch: {line}", file=sys.stderr, flush=True)


def stop_step(proc, wait_s=STEP_STOP_S):
    """Stop srun's step through SLURM and return once srun has exited. TERM to srun has slurmd kill
    the step's tasks on every node, and srun exits once they are gone, saying so in the log; where
    it is still there after wait_s, a second TERM is srun's abort. Only an srun that outlives both is
    killed, alone. Killed at once, as subprocess.call does on an exception, srun reports nothing of
    its tasks, and the step ends only if srun's shepherd (a child of srun that ignores TERM and
    cancels the step through slurmctld once srun is gone) lives to do it: a KILL that reaches both,
    as one to srun's process group does, leaves the tasks running under slurmstepd."""
    for attempt in (1, 2):
        if proc.poll() is not None:
            return
        again = "" if attempt == 1 else " again"
        print(f"{STOPPING} (pid {proc.pid}) and its step{again}", file=sys.stderr, flush=True)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=wait_s)
            _say(f"srun exited ({proc.returncode}): its step is over")
            return
        except subprocess.TimeoutExpired:
            continue
    job = os.environ.get("SLURM_JOB_ID", "?")
    _say(f"srun did not exit in {2 * wait_s:.0f} s: killed; if its tasks still run, `scancel` their step of job {job}")
    proc.kill()
    proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap)
    ap.add_argument("--per-node", action="store_true", help="one task per node (node-level work)")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("no command to launch")
    _exit_on_term()
    sys.exit(run(cmd, a, per_node_once=a.per_node))


def _exit_on_term():
    """TERM (a job that stops its launcher, preflight/preflight_job.py) raises SystemExit in the
    wait, so that what the launcher started is stopped before it exits (run_step, _local) instead of
    being left by TERM's default action. Once: a further TERM must not cut that stop short."""

    def on_term(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)


def _bound_sets(env, n, bind):
    """Each local rank's CPUs (cluster/cpu_bind.py), or None: not asked, or not possible."""
    if not bind or n < 2:
        return None
    sets = cpu_bind.slices(os.sched_getaffinity(0), n, cpu_bind.near_gpus(n, env))
    if sets is None:
        print(f"launch: {n} ranks not bound to CPUs: fewer physical cores than ranks", file=sys.stderr, flush=True)
        return None
    for r, cpus in enumerate(sets):
        print(f"launch: rank {r} bound to CPUs {gpu_identity.cpu_text(cpus)}", file=sys.stderr, flush=True)
    return sets


def _local(cmd, env, n, stdout=None, bind=False):
    port = str(_free_port())
    procs = []
    sets = _bound_sets(env, n, bind)
    try:
        for r in range(n):
            e = dict(
                env,
                RANK=str(r),
                WORLD_SIZE=str(n),
                LOCAL_RANK=str(r),
                LOCAL_WORLD_SIZE=str(n),
                GROUP_RANK="0",
                NNODES="1",
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
            )
            pin = None
            if sets:
                e[cpu_bind.BOUND_ENV] = "1"
                pin = cpu_bind.pinner(sets[r])
            e = container_env.passed(cmd, e, os.environ)
            procs.append(subprocess.Popen(cmd, env=e, stdout=stdout, preexec_fn=pin))
        return _wait_local(procs)
    except BaseException:
        _stop_local(procs)
        raise


def _wait_local(procs):
    """The ranks' exit status: the first failure's, else 0. One failed rank would leave the others
    blocked in a collective: the others are then stopped."""
    while True:
        codes = [p.poll() for p in procs]
        failed = [c for c in codes if c not in (None, 0)]
        if failed:
            _stop_local(procs)
            return failed[0]
        if all(c == 0 for c in codes):
            return 0
        time.sleep(0.2)


def _stop_local(procs, grace_s=10.0):
    """TERM to the ranks still running, KILL to those still there after grace_s."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.time() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
