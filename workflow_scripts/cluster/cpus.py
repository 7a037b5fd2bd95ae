"""The CPUs a rank may run on, and the thread counts the trainers and the interconnect stage derive
from them.

Under SLURM with task binding (TaskPlugin=task/affinity or task/cgroup) a task runs on its
--cpus-per-task CPUs only; counts taken from the node (os.cpu_count()) would start a node's worth
of threads on each rank's few CPUs. So every count starts from the process's affinity set
(os.sched_getaffinity), and a rank's share of it is:

  bound:   the whole set, which is the rank's own;
  shared:  the set divided by the node's ranks (local_size), as they all run on it.

A rank the local launcher bound to whole cores of its own (config training.bind_cpus auto,
cluster/cpu_bind.py) is bound. Otherwise the set is shared when it holds all of the node's CPUs (the
local launcher unbound, or SLURM with task/none: nothing is bound), when the local launcher started
the rank unbound (a set smaller than the node is then a container's or a job's, common to its
ranks), or when, under SLURM, it holds every local task's --cpus-per-task CPUs (a step-wide cpuset
without per-task binding). Otherwise it is bound.

The study's rules, per rank on its share: TensorFlow's decode threads are the share's physical
cores - 4 on a GPU (4 threads per GPU go to compute, copies, events and communication: over a
node's ranks this is the study's "cores - 4 per GPU"), at least 1, and all of its cores on a CPU;
intra-op and torch threads are the share's CPUs; PyTorch's DataLoader/DALI workers and MXNet's
decode threads are counted from the share's CPUs in their trainers.

SLURM's CPUs are hardware threads where a node has ThreadsPerCore=2: --cpus-per-task=10 there is 5
physical cores, and TensorFlow's rule then leaves one decode thread. Preflight warns where a GPU
rank has fewer cores than its framework's rule keeps from decoding plus MIN_DECODE_CORES
(CPUs.cores_short).
"""

import os
from dataclasses import dataclass

from .affinity import CPU_ROOT, core_groups
from .cpu_bind import BOUND_ENV

SPARE_PER_GPU = 4  # the study's threads per GPU kept from decoding
MXNET_DECODE_PER_GPU = 16  # the study's MXNet decode threads per GPU
# Fewest physical cores a GPU rank's decoding should have once its rule's spare cores are taken: as
# many as TensorFlow's rule keeps for the GPU's own threads (the study's 10-core rank decodes on 6).
# A threshold for preflight's warning, not a measurement.
MIN_DECODE_CORES = SPARE_PER_GPU


@dataclass(frozen=True)
class CPUs:
    allowed: int  # CPUs in the affinity set
    cores: int  # physical cores in it
    bound: bool  # the set is this rank's own (else shared by local_size ranks)
    local_size: int = 1

    @property
    def per_rank(self):
        """CPUs of the rank's share."""
        return max(1, self.allowed if self.bound else self.allowed // self.local_size)

    @property
    def cores_per_rank(self):
        """Physical cores of the rank's share."""
        return max(1, self.cores if self.bound else self.cores // self.local_size)

    def tf_decode_threads(self, gpu):
        return max(1, self.cores_per_rank - SPARE_PER_GPU) if gpu else self.cores_per_rank

    def mxnet_decode_threads(self, gpu):
        """The threads the rule gives MXNet's record iterator (its preprocess_threads)."""
        return min(MXNET_DECODE_PER_GPU, self.per_rank) if gpu else self.per_rank

    def mxnet_threads_run(self, asked):
        """How many of `asked` preprocess threads MXNet's record parser starts: at most
        max(CPUs / 2 - 1, 1) of the CPUs OpenMP sees, this process's whole affinity set
        (iter_image_recordio_2.cc); so a rank bound to 16 CPUs decodes on 7, whatever it asks."""
        return min(asked, max(self.allowed // 2 - 1, 1))

    def cores_short(self, spare):
        """(cores needed, cores lacking) for the rank's rule to keep `spare` cores from decoding and
        decode on MIN_DECODE_CORES more; lacking is 0 where the share has them."""
        need = spare + MIN_DECODE_CORES
        return need, max(0, need - self.cores_per_rank)

    @property
    def threads_per_core(self):
        return max(1, round(self.allowed / self.cores)) if self.cores else 1

    def describe(self, **threads):
        """For a summary: the set, how it was read, and the counts used on it."""
        return {
            "allowed": self.allowed,
            "cores": self.cores,
            "bound": self.bound,
            "local_size": self.local_size,
            "per_rank": self.per_rank,
            "threads": threads,
        }


def is_bound(allowed, node_cpus, local_size, source, cpus_per_task=0, launcher_bound=False):
    """The rule of the module's docstring. allowed: CPUs in the set; node_cpus: the node's CPUs;
    source: the launch's source (common.launch: slurm, env, single); cpus_per_task: SLURM's, 0
    where unknown; launcher_bound: the local launcher gave this rank its own cores."""
    if launcher_bound and local_size > 1:
        return True
    if allowed >= node_cpus or source == "env":
        return False
    if source == "slurm" and local_size > 1 and cpus_per_task > 0:
        return allowed < local_size * cpus_per_task
    return True


def of(launch, env=None, root=CPU_ROOT, allowed=None, node_cpus=None):
    """This process's CPUs, for the rank `launch` (common.launch.Launch) describes. allowed and
    node_cpus (a made-up set and node, for tests): else the process's affinity set and the node's
    CPU count."""
    env = os.environ if env is None else env
    allowed = os.sched_getaffinity(0) if allowed is None else set(allowed)
    try:
        per_task = int(env.get("SLURM_CPUS_PER_TASK", "0") or 0)
    except ValueError:
        per_task = 0
    node_cpus = node_cpus or on_node() or len(allowed)
    own = env.get(BOUND_ENV) == "1"
    bound = is_bound(len(allowed), node_cpus, launch.local_size, launch.source, per_task, own)
    return CPUs(len(allowed), len(core_groups(allowed, root)), bound, launch.local_size)


def on_node():
    """The node's CPUs (None where unknown): for shares of the whole node, such as what other
    processes used of it; a rank's thread counts come from of() instead."""
    return os.cpu_count()


def add_job_threads(ap):
    """--threads and --cpus-per-task of a CPU stage's job (conversion, index): resolved by job_threads."""
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads where the job runs here")
    ap.add_argument(
        "--cpus-per-task",
        type=int,
        default=0,
        help="the CPUs the rule asks SLURM for: inside a SLURM job the threads come from the allocation, "
        "not from --threads (Snakemake caps that at the submitting host's --cores)",
    )


def job_threads(a, env=None, allowed=None):
    """A CPU stage's threads: inside a SLURM job its allocation (the CPUs it may run on, at most
    --cpus-per-task), else --threads."""
    env = os.environ if env is None else env
    allowed = len(os.sched_getaffinity(0)) if allowed is None else allowed
    if env.get("SLURM_JOB_ID") and a.cpus_per_task:
        return max(1, min(a.cpus_per_task, allowed))
    return max(1, a.threads)
