"""A plain ResNet-50 training loop on one GPU or, under torchrun, on several (DistributedDataParallel
over NCCL), the reference the pipeline's trainer is held to (benchmarks/trainer_vs_plain.py):
torchvision's model, channels-last, a fused SGD, torch.compile of the model in the given mode,
autocast in the given 16-bit type (float16 with a GradScaler), random data on the device. None of
the pipeline's code runs here.

    python3 -m benchmarks.plain_loop --batch 128 --precision fp16 --amp-dtype float16 \\
        --fp32-math strict --compile reduce-overhead --out OUT.json [--read-loss every|never]
    torchrun --standalone --nproc-per-node 4 -m benchmarks.plain_loop ... --ddp-graph whole

Under torchrun, DDP wraps the model before it is compiled; --ddp-graph split cuts the compiled graph
at DDP's buckets (dynamo's optimize_ddp), whole keeps one graph; --bucket-cap-mb and
--broadcast-buffers are DDP's own options. A step's time is the slowest rank's, images/s the
global batch over those times, and rank 0 writes --out.

Timing: a CUDA event before every step and one after the last; a step's time is from its event to
the next one, so the steps' times add up to the GPU's time over them, idle gaps included (the host
falling behind shows there). --warmup steps first, untimed (compilation and cuDNN's tuning among
them). images/s = the timed images / the timed steps' summed time; also the mean and coefficient of
variation of the per-step images/s and of images/s over windows of --window steps (the pipeline's
"stable" judges the windows). --read-loss every: each step's loss is read on the host before the
next step is launched (what a loop that logs every loss pays); never: only after the last step.
"""

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torchvision


def windows(times, batch, size):
    """images/s of each whole window of `size` steps."""
    return [batch * size / sum(times[i : i + size]) for i in range(0, len(times) - size + 1, size)]


def mark(cuda):
    """A CUDA event recorded now on the stream (a host clock without CUDA)."""
    if not cuda:
        return time.perf_counter()
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def cv(values):
    return statistics.pstdev(values) / statistics.fmean(values) if len(values) > 1 else 0.0


def build(batch, image_size, precision, amp_dtype, fp32_math, compile, dev, ddp=None):
    """(step(x, y) -> the loss on the device, x, y): the model, optimizer and loss scaler, and a
    batch of random data on `dev` in the step's layout. ddp: None (one process) or
    {"graph": split|whole, "bucket_cap_mb": ..., "broadcast_buffers": ...}."""
    cuda = dev.type == "cuda"
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = fp32_math == "tf32"
    torch.manual_seed(0)
    model = torchvision.models.resnet50().to(dev, memory_format=torch.channels_last)
    net = model
    if ddp:
        net = torch.nn.parallel.DistributedDataParallel(
            model,
            device_ids=[dev.index] if cuda else None,
            bucket_cap_mb=ddp["bucket_cap_mb"],
            gradient_as_bucket_view=True,
            broadcast_buffers=ddp["broadcast_buffers"],
        )
        torch._dynamo.config.optimize_ddp = ddp["graph"] == "split"
    net = net if compile == "off" or not cuda else torch.compile(net, mode=compile, dynamic=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4, fused=cuda)
    amp = getattr(torch, amp_dtype) if precision == "fp16" else None
    scaler = torch.amp.GradScaler(dev.type, enabled=amp == torch.float16)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(batch, 3, image_size, image_size, device=dev).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=dev)

    def step(x, y):
        if compile == "reduce-overhead" and cuda:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(dev.type, dtype=amp or torch.float32, enabled=amp is not None):
            loss = loss_fn(net(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.detach()

    return step, x, y


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--precision", choices=("fp32", "fp16"), required=True)
    ap.add_argument("--amp-dtype", choices=("bfloat16", "float16"), default="bfloat16")
    ap.add_argument("--fp32-math", choices=("tf32", "strict"), default="tf32")
    ap.add_argument("--compile", choices=("off", "default", "reduce-overhead"), default="reduce-overhead")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--read-loss", choices=("never", "every"), default="never")
    ap.add_argument("--ddp-graph", choices=("split", "whole"), default="whole", help="under torchrun")
    ap.add_argument("--bucket-cap-mb", type=float, default=25, help="under torchrun")
    ap.add_argument("--broadcast-buffers", choices=("on", "off"), default="off", help="under torchrun")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    started = time.perf_counter()
    cuda = torch.cuda.is_available()  # without one (trying the script), host clocks and no compile
    rank, world, local = (int(os.environ.get(k, 0)) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    world = max(world, 1)
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    ddp = None
    if world > 1:
        if cuda:
            torch.cuda.set_device(dev)
        dist.init_process_group("nccl" if cuda else "gloo")
        ddp = {"graph": a.ddp_graph, "bucket_cap_mb": a.bucket_cap_mb, "broadcast_buffers": a.broadcast_buffers == "on"}
    step, x, y = build(a.batch, a.image_size, a.precision, a.amp_dtype, a.fp32_math, a.compile, dev, ddp)
    amp = a.amp_dtype if a.precision == "fp16" else None

    for _ in range(a.warmup):
        step(x, y).item()
    warm_s = time.perf_counter() - started
    marks, losses = [], []
    for _ in range(a.steps):
        marks.append(mark(cuda))
        loss = step(x, y)
        if a.read_loss == "every":
            losses.append(loss.item())
    marks.append(mark(cuda))
    if cuda:
        torch.cuda.synchronize()
        times = [marks[i].elapsed_time(marks[i + 1]) / 1e3 for i in range(a.steps)]
    else:
        times = [marks[i + 1] - marks[i] for i in range(a.steps)]
    if world > 1:  # each step as long as its slowest rank's
        every = [None] * world
        dist.all_gather_object(every, times)
        times = [max(column) for column in zip(*every)]
        dist.destroy_process_group()
        if rank:
            return
    batch = a.batch * world
    rates = [batch / t for t in times]
    wins = windows(times, batch, a.window)
    result = {
        "reference": "plain_loop",
        "device": torch.cuda.get_device_name(dev) if cuda else "cpu",
        "torch": torch.__version__,
        **{k: getattr(a, k) for k in ("batch", "image_size", "precision", "fp32_math", "compile", "read_loss")},
        "gpus": world,
        **({k: getattr(a, k) for k in ("ddp_graph", "bucket_cap_mb", "broadcast_buffers")} if ddp else {}),
        "amp_dtype": amp or "float32",
        "warmup_steps": a.warmup,
        "timed_steps": a.steps,
        "warmup_s": warm_s,
        "images_per_s": batch * a.steps / sum(times),
        "median_step_ms": statistics.median(times) * 1e3,
        "step_images_per_s_cv": cv(rates),
        "window_images_per_s_cv": cv(wins),
        "last_loss": losses[-1] if losses else loss.item(),
    }
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
