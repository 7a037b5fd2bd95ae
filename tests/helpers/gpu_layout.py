"""A made-up GPU node for the tests of GPU choice and identity (no GPU here): a DGX-like layout, the
CPU sets SLURM's distributions give its tasks, what a rank reports, and a missing CUDA driver."""

from workflow_scripts.cluster.rank_env import Launch

# A DGX-like node: 2 sockets x 56 cores, 2 hardware threads each (CPU c and c + 112 are one core);
# GPUs 0-3 on socket 1's NUMA node, GPUs 4-7 on socket 0's.
SOCKET0 = [*range(0, 56), *range(112, 168)]
SOCKET1 = [*range(56, 112), *range(168, 224)]
NEAR = [SOCKET1] * 4 + [SOCKET0] * 4
BUS = [f"0000:{b:02x}:00.0" for b in (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)]
UUID = [f"GPU-{i}{i}{i}{i}aaaa-0000-0000-0000-00000000000{i}" for i in range(8)]


def block(r, per_task=12):
    """SLURM's block distribution: tasks 0-3 fill socket 0, 4-7 socket 1 (physical cores only)."""
    first = (0 if r < 4 else 56) + (r % 4) * per_task
    return list(range(first, first + per_task))


def cyclic(r, per_task=12):
    """SLURM's default second level (block:cyclic): tasks alternate between the sockets."""
    first = (0 if r % 2 == 0 else 56) + (r // 2) * per_task
    return list(range(first, first + per_task))


def visible(near=NEAR):
    gpus = [
        {"cuda_index": i, "bus_id": BUS[i], "uuid": UUID[i], "cpus": n, "numa_node": 1 - i // 4}
        for i, n in enumerate(near)
    ]
    return gpus, {"identity": "fake CUDA driver", "affinity": "fake NVML", "problem": None}


def report(cpus, near=NEAR, problem=None):
    return {"cpus": cpus, "gpus": visible(near)[0], "problem": problem}


def launch(local_rank, local_size=8):
    return Launch(rank=local_rank, world_size=local_size, local_rank=local_rank, local_size=local_size, hostname="n1")


def socket_of(cpus):
    return 0 if cpus[0] in SOCKET0 else 1


def no_driver():
    raise OSError("no CUDA driver library")
