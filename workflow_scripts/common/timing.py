"""Per-call timings of a repeated operation, warm-up calls excluded: CUDA events for work queued
on a GPU, perf_counter for a call that returns when its work is done. Seconds, one per timed call,
so a caller reports the median and the spread, not a mean that hides the outliers. Also a warm-up
and a timed span that go by duration as well as by count, as trtexec's do (INT8 timing)."""

import math
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


def warm_up(execute, sync, runs, seconds, clock=time.perf_counter):
    """Run `execute` (then `sync`) at least `runs` times and for at least `seconds`, as trtexec's
    warm-up does, so that the GPU's clocks have risen before anything is timed. Returns (runs done,
    seconds taken, seconds of the last run)."""
    start = last = clock()
    done, run_s = 0, 0.0
    while done < runs or last - start < seconds:
        execute()
        sync()
        now = clock()
        run_s, last, done = now - last, now, done + 1
    return done, last - start, run_s


def timed_runs(repeats, seconds, run_s):
    """How many runs to queue back to back so that at least `repeats` runs and about `seconds` are
    timed, from the warm-up's last run time."""
    return max(repeats, math.ceil(seconds / run_s) if run_s > 0 else repeats)
