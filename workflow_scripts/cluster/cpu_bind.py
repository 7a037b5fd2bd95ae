"""CPUs of its own for each rank the local launcher starts (config training.bind_cpus).

srun binds a task to its CPUs where the site's TaskPlugin does; the local launcher starts its ranks
as plain children, so without this every rank's decode threads roam over all of the node's CPUs,
the other ranks' and the other socket's included. With `auto`, each local rank gets a disjoint
slice of whole physical cores of the launcher's own CPU set, taken from the CPUs near its GPU
where the GPUs' NUMA nodes are known (ranks whose GPUs share a node split that node's cores),
else in order of CPU number. The rank learns it is bound through BOUND_ENV, so its thread counts
(cluster/cpus.py) come from its slice, not from a share of the whole set.

Why `none` is the default: docs/decisions.md#bind_cpus.
"""

import os

from .affinity import CPU_ROOT, core_groups

BOUND_ENV = "DLSCALE_CPUS_BOUND"


def _split(cores, n):
    """Whole cores (lists of sibling CPUs) in n contiguous runs, sizes differing by at most one."""
    size, extra = divmod(len(cores), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(sorted(c for core in cores[start:end] for c in core))
        start = end
    return out


def slices(allowed, n, near=None, root=CPU_ROOT):
    """n disjoint CPU lists, one a local rank, or None where binding cannot give every rank a
    core of its own. allowed: the launcher's CPUs; near: for each local rank, the CPUs near its
    GPU (None or any empty entry: unknown, so the set is split in CPU order)."""
    allowed = set(allowed)
    if n < 2:
        return None
    cores = core_groups(allowed, root)
    if len(cores) < n:
        return None
    if near and len(near) == n and all(near):
        groups = {}
        for rank, cpus in enumerate(near):
            groups.setdefault(frozenset(cpus), []).append(rank)
        out = [None] * n
        for cpus, ranks in groups.items():
            mine = [core for core in cores if set(core) <= cpus]
            if len(mine) < len(ranks):
                break
            for rank, part in zip(ranks, _split(mine, len(ranks))):
                out[rank] = part
        else:
            return out
    return _split(cores, n)


def near_gpus(n, env=None):
    """For local ranks 0..n-1, the CPUs near the GPU CUDA numbers with that index (NVML or the
    kernel, without initialising CUDA in the launcher); None where that is not known."""
    from .gpu_identity import visible_gpus  # NVML is imported only when binding is asked

    def no_cuda():
        raise RuntimeError("not asked in the launcher")

    try:
        gpus, _ = visible_gpus(env=env, cuda=no_cuda)
    except Exception:  # no NVML, no sysfs: split in CPU order
        return None
    if not gpus or len(gpus) < n:
        return None
    return [g.get("cpus") for g in gpus[:n]]


def pinner(cpus):
    """A subprocess preexec_fn that binds the child to `cpus` before it starts any thread."""
    return lambda: os.sched_setaffinity(0, cpus)
