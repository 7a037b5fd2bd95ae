"""A training run's timing, written the same way by every framework.

Per iteration one JSON line: step, phase (warmup | timed), wall time of the step, images in the
step (global, all ranks), loss, and where the framework counts it, the step's wait for its input
(PyTorch). The summary's images/s is images timed / time timed, over the
steps after the warm-up (seed 002: 10 warm-up + 100 timed steps); beside it the mean and
coefficient of variation of the per-step images/s, and whether that variation is within the
study's 2% ("stable").
"""
import json
import statistics
import time
from pathlib import Path

STABLE_CV = 0.02


class StepLog:
    def __init__(self, path, warmup_steps, global_batch, write=True):
        self.path = Path(path)
        self.warmup_steps = warmup_steps
        self.global_batch = global_batch
        self.write = write
        self.steps = []
        if write:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(self.path, "w")
        self._t = None

    def start(self):
        """Mark the start of a step (call right before the step's work)."""
        self._t = time.perf_counter()

    def end(self, loss, images=None, input_wait_s=None):
        """Mark the end of a step; `loss` must already be a host value (the step has synced).
        input_wait_s: seconds this step's process spent taking batches from its input, where the
        framework counts them (a slow step with a short wait was not held up by the input)."""
        now = time.perf_counter()
        step = len(self.steps)
        rec = {"step": step, "phase": "warmup" if step < self.warmup_steps else "timed",
               "wall_s": now - self._t, "images": images or self.global_batch, "loss": float(loss),
               "t_end": now, **({"input_wait_s": input_wait_s} if input_wait_s is not None else {})}
        self.steps.append(rec)
        if self.write:
            self._f.write(json.dumps(rec) + "\n")
            self._f.flush()
        self._t = now
        return rec

    def close(self):
        if self.write:
            self._f.close()


def summarize(steps):
    """Summary of per-iteration records (as StepLog writes them)."""
    timed = [s for s in steps if s["phase"] == "timed"]
    if not timed:
        raise ValueError("no timed steps: the run was shorter than its warm-up")
    images = sum(s["images"] for s in timed)
    seconds = sum(s["wall_s"] for s in timed)
    rates = [s["images"] / s["wall_s"] for s in timed]
    mean = statistics.fmean(rates)
    cv = statistics.pstdev(rates) / mean if len(rates) > 1 else 0.0
    return {
        "warmup_steps": sum(s["phase"] == "warmup" for s in steps),
        "timed_steps": len(timed),
        "images_timed": images,
        "seconds_timed": seconds,
        "images_per_s": images / seconds,
        "step_images_per_s_mean": mean,
        "step_images_per_s_cv": cv,
        "stable": cv <= STABLE_CV,
        "first_loss": steps[0]["loss"],
        "last_loss": steps[-1]["loss"],
    }


def read_steps(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
