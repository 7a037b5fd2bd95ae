"""All-reduce time of one ResNet-50 step's gradients (25.6 M values) between the GPUs of a run,
as DDP sends them (fp32, or bf16 with --grad-compression bf16), alone on idle GPUs.

    python3 -m workflow_scripts.train.launch --nproc-per-node 2 -- python3 benchmarks/nccl_allreduce.py

Rank 0 prints JSON: per dtype and message size, the median of 20 timed all-reduces (5 warm-up
excluded), min..max, and the bus bandwidth (2 (n-1)/n x bytes / time, NCCL's convention)."""
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from workflow_scripts.common import multicast  # noqa: E402
from workflow_scripts.common.launch import detect  # noqa: E402
from workflow_scripts.common.timing import cuda_times  # noqa: E402

RESNET50_GRADIENTS = 25_557_032


def main():
    multicast.switch_off()  # before NCCL starts
    launch = detect()
    torch.cuda.set_device(launch.local_rank)
    dist.init_process_group("nccl", rank=launch.rank, world_size=launch.world_size,
                            init_method=f"tcp://{launch.master_addr}:{launch.master_port}")
    n = launch.world_size
    res = {"world_size": n, "device": torch.cuda.get_device_name(), "nccl": ".".join(map(str, torch.cuda.nccl.version()))}
    for dtype in (torch.float32, torch.bfloat16):
        for numel in (RESNET50_GRADIENTS, 25 * 2**20 // 4):  # the whole step; one 25 MB bucket
            x = torch.ones(numel, dtype=dtype, device="cuda")
            ms = [t * 1e3 for t in cuda_times(lambda: dist.all_reduce(x))]
            med = statistics.median(ms)
            nbytes = numel * x.element_size()
            res[f"{str(dtype).replace('torch.', '')}_{nbytes / 1e6:.0f}MB"] = {
                "median_ms": med, "min_ms": min(ms), "max_ms": max(ms),
                "bus_GBps": 2 * (n - 1) / n * nbytes / (med / 1e3) / 1e9}
    if launch.rank == 0:
        print(json.dumps(res))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
