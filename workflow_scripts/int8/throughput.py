"""Inference images/s of one engine's FP32 and INT8 files at one batch size (Fig. 9), timed in one
job, one process, on one device: an INT8/FP32 ratio compares the precisions and nothing else.

The batch is made once and put where each engine reads it (bound in memory for ONNX Runtime,
copied to the GPU for TensorRT). The timed runs of each precision are split into two blocks run in
ABBA order (FP32, INT8, INT8, FP32), so that a drift during the job (a clock settling, a node
warming up) weighs on both precisions alike; each block first discards `warmup` runs, then times
its runs as the engine always has ("timing": ONNX Runtime with the host clock around each run,
TensorRT with CUDA events between back-to-back enqueues, tensorrt_engine.Runner.time_runs).
images/s is the batch size over the median run time, with the fastest and slowest runs beside it.

The record names, for each precision, the device (GPU model, or CPU model and threads) and the
node it ran on, and the job's wall-clock start and end: the table refuses a pair from two devices
or nodes, and the start and end show whether another measuring job ran beside this one.

The job's node is sampled meanwhile (cluster/neighbours.py Watch): the record's `isolation` says,
by the training runs' rule, whether anything else used it while the blocks ran; and each
precision's `stable` whether its images/s held within the study's 2% over windows of
metrics.STABILITY_WINDOW runs (results/guards.py int8_caveats reads both).

The input is seeded noise: throughput does not depend on what the pixels show, and no dataset
read or decode is timed.
"""

import argparse
import os
import statistics
import time

import numpy as np

from ..cluster import cpus, neighbours, slurm
from ..cluster.telemetry import Gpus
from ..common import schema
from ..common.atomic import write_json
from ..common.errors import run_main
from ..common.metrics import STABILITY_WINDOW, STABLE_CV
from . import engines

PRECISIONS = ("fp32", "int8")
# the job's settings, as the record names them
SETTINGS = ("network", "engine", "batch_size", "image_size", "warmup", "repeats", "warmup_s", "duration_s", "threads")


def window_cv(times, batch, window=STABILITY_WINDOW):
    """The variation of images/s over windows of `window` runs in the order run (as training's steps
    are judged, common/metrics.py), or None with fewer than two whole windows."""
    rates = [batch * window / sum(times[i : i + window]) for i in range(0, len(times) - window + 1, window)]
    return statistics.pstdev(rates) / statistics.fmean(rates) if len(rates) > 1 else None


def summarize(times, batch):
    """Figures of one precision's timed runs (`times` in the order run)."""
    windows = window_cv(times, batch)
    run_cv = statistics.pstdev(times) / statistics.fmean(times) if len(times) > 1 else 0.0
    judged = windows if windows is not None else run_cv
    times = sorted(times)
    median = statistics.median(times)
    return {
        "runs": len(times),
        "median_s": median,
        "min_s": times[0],
        "max_s": times[-1],
        "images_per_s": batch / median,
        "images_per_s_best": batch / times[0],
        "images_per_s_worst": batch / times[-1],
        "cv": run_cv,
        "window_runs": STABILITY_WINDOW,
        "window_cv": windows,
        "stable": judged <= STABLE_CV,
        "stable_by": "windows" if windows is not None else "runs",
    }


def blocks(repeats, precisions=PRECISIONS):
    """[(precision, timed runs), ...] in the order they run: ABBA, each precision's `repeats` runs
    in two blocks (a single run each where repeats is 1). With A first and last, a drift that is
    linear in time adds the same to both precisions' sums."""
    a, b = precisions
    first, second = -(-repeats // 2), repeats // 2
    return [(p, n) for p, n in ((a, first), (b, first), (b, second), (a, second)) if n]


def time_alternating(runners, x, warmup, repeats, warmup_s=0.0, duration_s=0.0):
    """({precision: seconds of each timed run, in the order run}, {precision: [each block's warm-up
    and timed runs and seconds]}) for the two runners, in blocks() order, each block after at least
    `warmup` discarded runs and `warmup_s`; each precision's blocks share `duration_s`."""
    times, spans = {p: [] for p in runners}, {p: [] for p in runners}
    plan = blocks(repeats, tuple(runners))
    per_block = {p: sum(1 for q, _ in plan if q == p) for p in runners}
    for p, n in plan:
        times[p] += runners[p].time_runs(x, warmup, n, warmup_s, duration_s / per_block[p])
        spans[p].append(runners[p].last)
    return times, spans


def add_timing_arguments(ap):
    """The settings of a timed pair, shared with the job that times many (timing_job.py)."""
    ap.add_argument("--engine", choices=engines.ENGINES, required=True)
    ap.add_argument("--image-size", type=int, required=True)
    schema.add_arguments(ap, "inference.throughput", ("warmup", "repeats"))
    cpus.add_job_threads(ap)
    ap.add_argument(
        "--warmup-s", type=float, default=0.0, help="config inference.tensorrt.warmup_ms: each block's least warm-up"
    )
    ap.add_argument(
        "--duration-s",
        type=float,
        default=0.0,
        help="config inference.tensorrt.duration_s: each precision's least timing",
    )


def arg_parser():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_timing_arguments(ap)
    ap.add_argument("--network", required=True)
    for p in PRECISIONS:
        ap.add_argument(f"--{p}", required=True, metavar="ENGINE_FILE", help=f"the {p.upper()} engine file")
    ap.add_argument("--batch-size", type=int, required=True)
    ap.add_argument("--out", required=True)
    return ap


def measure(a):
    """({precision: its record} of both engine files, timed alternately on one device, what else
    used the node while the blocks ran (warm-ups included), by the training runs' rule)."""
    runners, where = {}, {}
    watch = neighbours.Watch(f"int8:{a.out}:{os.getpid()}", gpus=Gpus() if a.engine == "tensorrt" else None)
    try:
        for p in PRECISIONS:
            runners[p] = engines.open_engine(a.engine, getattr(a, p), a.threads)
            where[p] = {"device": runners[p].device, "host": engines.host_name()}
        x = np.random.default_rng(0).standard_normal((a.batch_size, 3, a.image_size, a.image_size), dtype=np.float32)
        with watch:
            timed_from = time.time()
            times, spans = time_alternating(runners, x, a.warmup, a.repeats, a.warmup_s, a.duration_s)
            ended_at = time.time()
    finally:
        for runner in runners.values():
            runner.close()
    job = os.environ.get("SLURM_JOB_ID", "")
    sharing = (slurm.job_sharing(job) or {"job": job, "oversubscribe": None, "exclusive": None}) if job else None
    results = {
        p: {
            "precision": p,
            "engine_file": getattr(a, p),
            **where[p],
            "timing": runners[p].timing,
            # what each block warmed up and timed (by count, and by duration where asked for)
            "spans": spans[p],
            "times_s": times[p],
            **summarize(times[p], a.batch_size),
        }
        for p in PRECISIONS
    }
    return results, watch.evidence(timed_from, ended_at, sharing)


def said(a, r):
    """The job's one line: both precisions' images/s and their ratio."""
    rates = "; ".join(
        f"{p.upper()} {r[p]['images_per_s']:.1f} images/s ({r[p]['images_per_s_worst']:.1f}.."
        f"{r[p]['images_per_s_best']:.1f})"
        for p in PRECISIONS
    )
    ratio = r["int8"]["images_per_s"] / r["fp32"]["images_per_s"]
    return (
        f"throughput: {a.network} on {a.engine} ({r['fp32']['device']}, {r['fp32']['host']}), batch {a.batch_size}: "
        f"{rates}; INT8/FP32 {ratio:.2f}x (median of {a.repeats} each)"
    )


def run(a):
    """Time one pair (a: arg_parser()'s settings, threads resolved) and write its record to a.out."""
    started_at = time.time()
    results, isolation = measure(a)
    write_json(
        a.out,
        {
            **{k: getattr(a, k) for k in SETTINGS},
            "blocks": blocks(a.repeats),
            "started_at": started_at,
            "ended_at": time.time(),
            "slurm_job": os.environ.get("SLURM_JOB_ID", ""),
            "isolation": isolation,
            "precisions": results,
        },
    )
    print(said(a, results))


def main():
    a = arg_parser().parse_args()
    a.threads = cpus.job_threads(a)  # the record names the threads that ran, not the ones asked
    run(a)


if __name__ == "__main__":
    run_main(main)
