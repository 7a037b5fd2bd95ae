"""Who this process is in a data-parallel run: rank, world size, local rank, master address.

Read from SLURM (a task started by srun), from torchrun-style variables (RANK, WORLD_SIZE, ...,
as the project's local launcher sets them), or a single process. Each framework's trainer turns
this into its own launcher's settings: torch.distributed's MASTER_ADDR/PORT, Horovod's Gloo
rendezvous variables. detect() also points the communication libraries of a run across nodes at
this node's own interface in the network the launcher chose (netif.own_interface), before any of
them starts: node names need not name their interfaces alike.
"""

import os
import re
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass

from ..common.errors import StageError
from . import container_env, netif

DEFAULT_PORT = 29500


@dataclass(frozen=True)
class Launch:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_size: int = 1
    node_rank: int = 0
    num_nodes: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int = DEFAULT_PORT
    source: str = "single"
    hostname: str = ""
    job_id: str = ""

    def as_dict(self):
        return asdict(self)

    def horovod_env(self, rendezvous_addr, rendezvous_port, iface):
        """The variables horovodrun's Gloo mode gives each worker, for workers started by srun
        or by the local launcher instead (the launcher runs the rendezvous server and chose the
        interface, cluster/netif.py)."""
        return {
            "HOROVOD_GLOO_IFACE": iface,
            "HOROVOD_RANK": str(self.rank),
            "HOROVOD_SIZE": str(self.world_size),
            "HOROVOD_LOCAL_RANK": str(self.local_rank),
            "HOROVOD_LOCAL_SIZE": str(self.local_size),
            "HOROVOD_CROSS_RANK": str(self.node_rank),
            "HOROVOD_CROSS_SIZE": str(self.num_nodes),
            "HOROVOD_HOSTNAME": self.hostname,
            "HOROVOD_CONTROLLER": "gloo",
            "HOROVOD_CPU_OPERATIONS": "gloo",
            "HOROVOD_GLOO_RENDEZVOUS_ADDR": rendezvous_addr,
            "HOROVOD_GLOO_RENDEZVOUS_PORT": str(rendezvous_port),
        }


HOROVOD_STALL_SHUTDOWN_S = 600


def setup_horovod(launch, env=None, mpi_built=None):
    """Before hvd.init(): give a worker started by srun or the local launcher horovodrun's
    variables, pointing at the launcher's rendezvous server. Under the MPI controller (the
    launcher set HOROVOD_CONTROLLER=mpi) MPI itself tells Horovod the ranks; mpi_built: the
    framework's hvd.mpi_built, to refuse a build that cannot do that."""
    env = os.environ if env is None else env
    # A collective that some ranks never join stops Horovod with its own words (which tensors, which
    # ranks) rather than only warning; the training job's watchdog stops what hangs elsewhere.
    env.setdefault("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", str(HOROVOD_STALL_SHUTDOWN_S))
    if env.get("HOROVOD_CONTROLLER") == "mpi":
        if mpi_built is not None and not mpi_built():
            raise StageError(
                "config training.horovod_controller = mpi, but this Horovod was built without MPI: "
                "build it where mpicc is on PATH (envs/setup.sh does so then), or use gloo"
            )
        return
    if "HOROVOD_RANK" in env:
        return
    if launch.world_size == 1:
        # A Horovod built with MPI (where mpicc was on PATH at set-up) defaults to the MPI controller,
        # and MPI_Init inside a plain `srun -n1` aborts where MpiDefault=none: one process needs no
        # rendezvous, and Gloo without one runs it alone.
        env.setdefault("HOROVOD_CONTROLLER", "gloo")
        env.setdefault("HOROVOD_CPU_OPERATIONS", "gloo")
        return
    env.update(
        launch.horovod_env(env["DLSCALE_RENDEZVOUS_ADDR"], env["DLSCALE_RENDEZVOUS_PORT"], env["DLSCALE_GLOO_IFACE"])
    )


def expand_nodelist(nodelist):
    """SLURM's compressed host list ('n[1-2,5]') as host names, via scontrol where it exists."""
    try:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30, check=True
        ).stdout.split()
        if out:
            return out
    except (OSError, subprocess.SubprocessError):
        pass
    hosts = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist):
        prefix, ranges = m.group(1), m.group(2)
        if not ranges:
            hosts.append(prefix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            for n in range(int(lo), int(hi or lo) + 1):
                hosts.append(f"{prefix}{n:0{len(lo)}d}")
    return hosts


def _tasks_on_node(spec, node):
    """SLURM_STEP_TASKS_PER_NODE ('2(x3),1') -> tasks on node number `node`."""
    counts = []
    for part in spec.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts[node]


def detect(env=None):
    """This process's Launch, from `env` (this process's environment by default), whose network
    variables are set to this node's own interface on the way (own_network)."""
    env = os.environ if env is None else env
    launch = _detect(env)
    # what the launcher asked a container to pass in, compared before own_network changes any of it
    container_env.remember(env, launch.local_rank)
    own_network(launch, env)
    return launch


def own_network(launch, env):
    """The launcher's first-node interface in `env` replaced by this node's (netif.own_interface),
    said once per node where they differ; a node with no way to the first node's network stops."""
    try:
        found = netif.own_interface(env)
    except netif.InterfaceError as exc:
        raise StageError(f"rank {launch.rank} on {launch.hostname}: {exc}") from None
    if found and found[0] != env.get(netif.FIRST_IFACE) and launch.local_rank == 0:
        print(
            f"rank {launch.rank} on {launch.hostname}: network interface {found[0]} ({found[1]}), "
            f"{found[2]}" + (f" (the first node's is {env[netif.FIRST_IFACE]})" if netif.FIRST_IFACE in env else ""),
            file=sys.stderr,
            flush=True,
        )


def _detect(env):
    host = env.get("SLURMD_NODENAME") or socket.gethostname()
    port = int(env.get("DLSCALE_MASTER_PORT", 0) or 0)
    if "RANK" in env and "WORLD_SIZE" in env:
        return Launch(
            rank=int(env["RANK"]),
            world_size=int(env["WORLD_SIZE"]),
            local_rank=int(env.get("LOCAL_RANK", 0)),
            local_size=int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"])),
            node_rank=int(env.get("GROUP_RANK", env.get("NODE_RANK", 0))),
            num_nodes=int(env.get("NNODES", 1)),
            master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
            master_port=int(env.get("MASTER_PORT", port or DEFAULT_PORT)),
            source="env",
            hostname=host,
            job_id=env.get("SLURM_JOB_ID", ""),
        )
    if "SLURM_PROCID" in env and "SLURM_STEP_NUM_TASKS" in env:
        nodes = expand_nodelist(env["SLURM_STEP_NODELIST"])
        node = int(env.get("SLURM_NODEID", 0))
        job = env.get("SLURM_JOB_ID", "0")
        return Launch(
            rank=int(env["SLURM_PROCID"]),
            world_size=int(env["SLURM_STEP_NUM_TASKS"]),
            local_rank=int(env.get("SLURM_LOCALID", 0)),
            local_size=_tasks_on_node(env.get("SLURM_STEP_TASKS_PER_NODE", "1"), node),
            node_rank=node,
            num_nodes=len(nodes),
            master_addr=nodes[0],
            # The launcher gives each run its own (a point's repeats share one job); else one per job.
            master_port=port or DEFAULT_PORT + int(job) % 2000,
            source="slurm",
            hostname=host,
            job_id=job,
        )
    return Launch(hostname=host, master_port=port or DEFAULT_PORT)
