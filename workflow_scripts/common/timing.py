"""Per-call timings of a repeated operation, warm-up calls excluded: CUDA events for work queued
on a GPU, perf_counter for a call that returns when its work is done. Seconds, one per timed call,
so a caller reports the median and the spread, not a mean that hides the outliers."""

import time


def cuda_times(fn, warmup=5, reps=20, before=None):
    """Seconds of each of `reps` calls of fn on the current CUDA stream, after `warmup` untimed
    calls; `before()` runs ahead of every timed call, outside the timing (e.g. a barrier)."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        if before:
            before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) / 1e3)
    return out


def wall_times(fn, warmup=5, reps=20, before=None):
    """Seconds of each of `reps` calls of a blocking fn, after `warmup` untimed calls; `before()`
    runs ahead of every timed call, outside the timing."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        if before:
            before()
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out
