"""Inference images/s of one engine at one batch size (Fig. 9): the batch is made once and put
where the engine reads it (bound in memory for ONNX Runtime, copied to the GPU for TensorRT),
`warmup` runs are discarded, then `repeats` runs are timed one by one; images/s is the batch
size over the median run time, with the fastest and slowest runs beside it. How the runs were
timed is recorded ("timing"): ONNX Runtime with the host clock around each run, TensorRT with
CUDA events between back-to-back enqueues (tensorrt_engine.Runner.time_runs).

The input is seeded noise: throughput does not depend on what the pixels show, and no dataset
read or decode is timed.
"""

import argparse
import statistics

import numpy as np

from ..common.atomic import write_json
from ..common.errors import StageError, run_main
from . import engines


def summarize(times, batch):
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
        "cv": statistics.pstdev(times) / statistics.fmean(times) if len(times) > 1 else 0.0,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    engines.add_engine_args(ap)
    ap.add_argument("--image-size", type=int, required=True)
    ap.add_argument("--batch-size", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1, help="onnxruntime: intra-op threads (the job's cores)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.repeats < 1:
        raise StageError("config inference.throughput.repeats must be at least 1")
    runner = engines.open_engine(a.engine, a.engine_file, a.threads)
    x = np.random.default_rng(0).standard_normal((a.batch_size, 3, a.image_size, a.image_size), dtype=np.float32)
    times = runner.time_runs(x, a.warmup, a.repeats)
    runner.close()
    result = summarize(times, a.batch_size)
    write_json(
        a.out,
        {
            "network": a.network,
            "precision": a.precision,
            "engine": a.engine,
            "batch_size": a.batch_size,
            "image_size": a.image_size,
            "warmup": a.warmup,
            "threads": a.threads,
            "device": runner.device,
            "timing": runner.timing,
            "times_s": times,
            **result,
        },
    )
    print(
        f"throughput: {a.network} {a.precision} on {a.engine}, batch {a.batch_size}: {result['images_per_s']:.1f} "
        f"images/s (median of {a.repeats}; {result['images_per_s_worst']:.1f}..{result['images_per_s_best']:.1f})"
    )


if __name__ == "__main__":
    run_main(main)
