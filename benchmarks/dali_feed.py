"""DALI's training input alone and beside the plain loop's step it feeds, in one process: where the
images a second go between the decoder and the step (issue 60's real data under the preset).

    python3 -m benchmarks.dali_feed --data LMDB/train --out OUT.json --batch 128 --precision fp16 \\
        --amp-dtype float16 --fp32-math strict --runs synthetic step:cpu,t12 alone:mixed,h99,t4,k2

The step is benchmarks/plain_loop.py's (compiled once, CUDA graphs at reduce-overhead); the input
is workflow_scripts/train/dali_input.py's pipeline, built anew for each run. A run is MODE[:OPTS]:

  synthetic   the step on one batch of random data on the GPU: the rate the input must keep up with
  step        the step, each batch first copied from DALI into the step's input buffers
  alone       DALI's batches taken as fast as they come, no step running

OPTS, comma-separated: cpu|mixed (DALI's decoder), tN (DALI's CPU threads), hNN (the hardware
decoder's share, percent), kN (DALI's batch N times the step's, each split into N steps' batches
on the GPU), dN (prefetch depth), legacy (exec_dynamic=False, the pipelined executor before DALI 2),
cpusN (the process's threads held to the first N CPUs, as taskset holds a rank).

Timing: --warmup-s untimed first (the shuffle buffer's fill, cuDNN's tuning, the pipelines' first
batches), then --seconds timed. step: CUDA events before every step, so an input that falls behind
shows as a gap in the step's time; images/s = timed images / the steps' summed time. alone: host
clock over whole batches, the GPU synchronized at both ends. Each run also gives the mean host
seconds a DALI batch took to hand over (next_ms) and the CPU time the process used per image.
"""

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
from nvidia.dali.plugin.base_iterator import LastBatchPolicy
from nvidia.dali.plugin.pytorch import DALIGenericIterator

from benchmarks.plain_loop import build, cv, mark, windows
from workflow_scripts.train import dali_input


def parse_run(text):
    mode, _, opts = text.partition(":")
    if mode not in ("synthetic", "step", "alone"):
        raise SystemExit(f"--runs {text!r}: the mode is synthetic, step or alone")
    run = {"mode": mode, "decoder": "cpu", "threads": 4, "hw": None, "k": 1, "depth": 2, "legacy": False, "cpus": 0}
    for o in filter(None, opts.split(",")):
        if o in ("cpu", "mixed"):
            run["decoder"] = o
        elif o == "legacy":
            run["legacy"] = True
        elif o[0] in "thkd" and o[1:].isdigit():
            key = {"t": "threads", "h": "hw", "k": "k", "d": "depth"}[o[0]]
            run[key] = int(o[1:]) / 100 if key == "hw" else int(o[1:])
        elif o.startswith("cpus") and o[4:].isdigit():
            run["cpus"] = int(o[4:])
        else:
            raise SystemExit(f"--runs {text!r}: option {o!r} is not one of cpu, mixed, tN, hNN, kN, dN, legacy, cpusN")
    return run


def hold_cpus(n, every):
    """Holds every thread of this process to the first n CPUs (every: all of them) and returns the
    set; threads started later inherit it from the thread that starts them."""
    cpus = set(sorted(every)[:n]) if n else set(every)
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass
    return cpus


def escaped(cpus):
    """How many of this process's threads may run outside `cpus` (a library that pins its own)."""
    n = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            n += not os.sched_getaffinity(int(tid)) <= cpus
        except OSError:
            pass
    return n


def pipeline(data, run, batch, seed, gpu):
    # the trainer's pipeline (dali_input.training_pipeline), at DALI's own batch
    extra = {"exec_dynamic": False} if run["legacy"] else {}
    pipe = dali_input.training_pipeline(
        str(data),
        0,
        1,
        224,
        True,
        run["hw"],
        gpu,
        True,
        run["decoder"],
        (0, 0),
        batch_size=batch * run["k"],
        num_threads=run["threads"],
        device_id=0 if gpu else None,
        seed=seed,
        prefetch_queue_depth=run["depth"],
        **extra,
    )
    pipe.build()
    it = DALIGenericIterator(
        [pipe], ["x", "y"], reader_name=dali_input.READER, last_batch_policy=LastBatchPolicy.DROP, auto_reset=True
    )
    return pipe, it


def batches(it, k, batch, next_times):
    """The step's batches: each of DALI's split into k on the GPU (channels_last views)."""
    while True:
        t = time.perf_counter()
        try:
            out = next(it)[0]
        except StopIteration:
            out = next(it)[0]
        next_times.append(time.perf_counter() - t)
        x, y = out["x"].permute(0, 3, 1, 2), out["y"].view(-1)
        for i in range(k):
            yield x[i * batch : (i + 1) * batch], y[i * batch : (i + 1) * batch]


def measure(run, step, x, y, data, batch, seconds, warmup_s, every):
    cuda = x.is_cuda
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    cpus = hold_cpus(run["cpus"], every)
    next_times, feed = [], None
    if run["mode"] != "synthetic":
        pipe, it = pipeline(data, run, batch, 1, cuda)
        feed = batches(it, run["k"], batch, next_times)
    one = step if run["mode"] != "alone" else None

    def advance():
        if feed is not None:
            bx, by = next(feed)
            if one is None:
                return
            x.copy_(bx)
            y.copy_(by)
        one(x, y)

    end = time.perf_counter() + warmup_s
    while time.perf_counter() < end:
        advance()
    sync()
    result = {**run, "cpus": len(cpus), "escaped_threads": escaped(cpus)}
    del next_times[:]
    cpu0, t0 = time.process_time(), time.perf_counter()
    marks = []
    while time.perf_counter() - t0 < seconds:
        marks.append(mark(cuda))
        advance()
    marks.append(mark(cuda))
    sync()
    wall = time.perf_counter() - t0
    n = len(marks) - 1
    if one is not None:
        if cuda:
            times = [marks[i].elapsed_time(marks[i + 1]) / 1e3 for i in range(n)]
        else:
            times = [marks[i + 1] - marks[i] for i in range(n)]
        result.update(
            images_per_s=batch * n / sum(times),
            step_cv=cv([batch / t for t in times]),
            window_cv=cv(windows(times, batch, 10)),
            median_step_ms=statistics.median(times) * 1e3,
        )
    else:
        result.update(images_per_s=batch * n / wall)
    result.update(
        steps=n,
        wall_s=wall,
        next_ms=statistics.fmean(next_times) * 1e3 if next_times else None,
        cpu_ms_per_image=(time.process_time() - cpu0) * 1e3 / (batch * n) if n else None,
    )
    if feed is not None:
        feed.close()
        del it, pipe
    hold_cpus(0, every)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="an LMDB split (the data stage's lmdb/train)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--precision", choices=("fp32", "fp16"), default="fp16")
    ap.add_argument("--amp-dtype", choices=("bfloat16", "float16"), default="float16")
    ap.add_argument("--fp32-math", choices=("tf32", "strict"), default="strict")
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--warmup-s", type=float, default=4)
    ap.add_argument("--runs", nargs="+", required=True, type=parse_run)
    a = ap.parse_args()
    cuda = torch.cuda.is_available()  # without one (trying the script): the CPU, uncompiled
    every = os.sched_getaffinity(0)
    dev = torch.device("cuda" if cuda else "cpu")
    step, x, y = build(a.batch, 224, a.precision, a.amp_dtype, a.fp32_math, "reduce-overhead" if cuda else "off", dev)
    t = time.perf_counter()
    for _ in range(15 if cuda else 1):
        step(x, y)
    if cuda:
        torch.cuda.synchronize()
    results = {
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "cpus": len(every),
        "compile_s": time.perf_counter() - t,
    }
    results["runs"] = []
    for run in a.runs:
        r = measure(run, step, x, y, a.data, a.batch, a.seconds, a.warmup_s, every)
        results["runs"].append(r)
        print(json.dumps(r), flush=True)
        a.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
