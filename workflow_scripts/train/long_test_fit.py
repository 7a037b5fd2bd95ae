"""Whether a long test's epochs can fit its jobs (plan/cluster_checks.py asks, through SLURM).

A run saves a checkpoint after every epoch, so it needs one epoch (and its evaluation) to finish
inside one job, before the job stops its ranks (job_stop.margin_s), and all its epochs inside
max_jobs jobs. Neither can be known before anything ran; what can be known is a bound: no epoch is
faster than the sweep's best measured images/s per GPU on that system, framework and precision,
scaled to the long test's GPUs as if scaling were perfect. When even that bound does not fit, the
run cannot, and the workflow says so before any job is submitted; without a measured rate or a
manifest there is nothing to bound it by and nothing is said.
"""

import json
import math
from pathlib import Path

from .job_stop import margin_s


def best_rate_per_gpu(runs_dir, system, framework, precision):
    """The best images/s per GPU of the sweep's ok runs of one system x framework x precision on real
    data (synthetic runs read no files), or None."""
    best = None
    for path in Path(runs_dir, system).glob(f"{framework}_{precision}_*gpu*/summary.json"):
        try:
            s = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if s.get("status") != "ok" or not s.get("images_per_s") or s.get("args", {}).get("data_source") != "real":
            continue
        rate = s["images_per_s"] / max(1, int(s.get("world_size") or 1))
        best = rate if best is None else max(best, rate)
    return best


def problem(point, epochs, train_images, rate_per_gpu, time_min, max_jobs, time_key):
    """A sentence naming the keys when the long test of `point` cannot fit its jobs, else None."""
    if not (train_images and rate_per_gpu and time_min):
        return None
    gpus = int(point["gpus"])
    epoch_s = train_images / (rate_per_gpu * gpus)
    usable_s = time_min * 60 - margin_s(time_min * 60)
    where = f"{point['system']} {point['framework']} {point['precision']} at {gpus} GPUs"
    bound = (
        f"{train_images} train images at no more than {rate_per_gpu:.0f} images/s per GPU, the best the sweep "
        f"measured there, scaled perfectly"
    )
    if epoch_s > usable_s:
        return (
            f"config {time_key} = {time_min}: the long test of {where} cannot save a single epoch within one job: "
            f"an epoch takes at least {epoch_s / 60:.0f} min ({bound}), and a job stops its ranks "
            f"{margin_s(time_min * 60) / 60:.1f} min before its limit. Raise training.long_test.time_min"
        )
    per_job = math.floor(usable_s / epoch_s)
    if per_job * max_jobs < epochs:
        return (
            f"config training.long_test.max_jobs = {max_jobs}: the long test of {where} cannot run its "
            f"{epochs} epochs: at most {per_job} epoch(s) fit in a job of {time_min} min ({time_key}; an epoch "
            f"takes at least {epoch_s / 60:.1f} min: {bound}), {per_job * max_jobs} in {max_jobs} jobs. Raise "
            f"training.long_test.max_jobs or time_min, or lower training.long_test.epochs"
        )
    return None
