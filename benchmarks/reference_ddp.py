"""A plain reference beside the pipeline (benchmarks/slurm_gpu.py): torchvision's ResNet-50,
torch.compile, bfloat16 autocast, channels-last, SGD, DistributedDataParallel, synthetic data, one
process per GPU under torchrun; then a plain torch.distributed all-reduce of --allreduce-bytes.
None of the pipeline's code runs here.

    torchrun --standalone --nproc-per-node=N -m benchmarks.reference_ddp --out OUT.json [--steps 100]

images/s: the global batch over the median step (each step timed alone, synchronized), after
--warmup untimed steps (compilation among them); the all-reduce's bus bandwidth as nccl-tests
defines it (2(n-1)/n x bytes / median time; the bytes / time on one GPU).
"""

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torchvision


def timed(fn, n):
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=256, help="images per GPU per step")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--allreduce-bytes", type=int, default=2**30)
    ap.add_argument("--allreduce-iterations", type=int, default=20)
    a = ap.parse_args()
    rank, world, local = (int(os.environ.get(k, d)) for k, d in (("RANK", 0), ("WORLD_SIZE", 1), ("LOCAL_RANK", 0)))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)
    x = torch.randn(a.batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (a.batch,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()

    @torch.compile
    def forward(x, y):
        with torch.autocast("cuda", torch.bfloat16):
            return loss_fn(ddp(x), y)

    def step():
        opt.zero_grad(set_to_none=True)
        forward(x, y).backward()
        opt.step()

    t = time.perf_counter()
    timed(step, a.warmup)
    warmup_s = time.perf_counter() - t
    steps = timed(step, a.steps)
    buf = torch.ones(a.allreduce_bytes // 4, dtype=torch.float32, device="cuda")
    timed(lambda: dist.all_reduce(buf), 5)
    calls = timed(lambda: dist.all_reduce(buf), a.allreduce_iterations)
    # every rank's median: the slowest rank's is the step's (and the call's) time
    medians = [None] * world
    dist.all_gather_object(medians, (statistics.median(steps), statistics.median(calls)))
    step_s, call_s = max(m[0] for m in medians), max(m[1] for m in medians)
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump(
                {
                    "gpus": world,
                    "device": torch.cuda.get_device_name(local),
                    "torch": torch.__version__,
                    "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                    "batch_per_gpu": a.batch,
                    "warmup_steps": a.warmup,
                    "warmup_s": round(warmup_s, 1),
                    "steps": a.steps,
                    "images_per_s": world * a.batch / step_s,
                    "median_step_ms": step_s * 1e3,
                    "step_cv": statistics.pstdev(steps) / statistics.mean(steps),
                    "allreduce_bytes": a.allreduce_bytes,
                    "allreduce_median_s": call_s,
                    "allreduce_busbw_GBps": (2 * (world - 1) / world if world > 1 else 1)
                    * a.allreduce_bytes
                    / call_s
                    / 1e9,
                },
                f,
                indent=1,
            )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
