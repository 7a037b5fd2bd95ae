"""A training run's timing, written the same way by every framework.

Per iteration one JSON line: step, phase (warmup | timed), wall time of the step, images in the
step (global, all ranks), loss, the logging (training) thread's CPU time and run-queue wait in the
step, and where the framework counts them, the step's wait for its input and its time on the
device (PyTorch). The summary's images/s is images timed / time timed, over the steps after the
warm-up (the scale-out whitepaper: 10 warm-up + 100 timed steps); beside it the mean and
coefficient of variation of the per-step images/s, and the variation of images/s over windows of
STABILITY_WINDOW timed steps, as the frameworks of the study reported it (one figure a logging
interval), and whether that variation is within the study's 2% ("stable"; docs/decisions.md#stable).
"""

import json
import statistics
import time
from pathlib import Path

STABLE_CV = 0.02
# Steps a window of images/s: tf_cnn_benchmarks' --display_every default, and the same for all three
# frameworks (docs/decisions.md#stable)
STABILITY_WINDOW = 10


def window_rates(timed, window=STABILITY_WINDOW):
    """images/s of each whole window of `window` timed steps (a trailing part window left out)."""
    out = []
    for i in range(0, len(timed) - window + 1, window):
        part = timed[i : i + window]
        out.append(sum(s["images"] for s in part) / sum(s["wall_s"] for s in part))
    return out


def thread_clocks():
    """The calling thread's CPU seconds and, where Linux's scheduler statistics exist, its seconds
    spent runnable but waiting for a CPU (/proc/thread-self/schedstat: run time, wait time, slices)."""
    clocks = {"thread_cpu_s": time.thread_time()}
    try:
        with open("/proc/thread-self/schedstat") as f:
            clocks["runqueue_wait_s"] = int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        pass
    return clocks


class StepLog:
    def __init__(self, path, warmup_steps, global_batch, write=True, beat=None):
        """beat: this rank's file of its last step (train/watchdog.py), written by every rank."""
        self.path = Path(path)
        self._beat = open(beat, "w") if beat else None
        self.warmup_steps = warmup_steps
        self.global_batch = global_batch
        self.write = write
        self.steps = []
        if write:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(self.path, "w")
        self._t = None
        self._thread = {}

    def start(self):
        """Mark the start of a step (call right before the step's work, in the thread that ends it)."""
        self._t = time.perf_counter()
        self._thread = thread_clocks()

    def end(self, loss, images=None, input_wait_s=None, device_s=None):
        """Mark the end of a step; `loss` must already be a host value (the step has synced).
        input_wait_s: seconds this step's process spent taking batches from its input, where the
        framework counts them (a slow step with a short wait was not held up by the input).
        device_s: seconds from the device reaching the step's first work to finishing its last, where
        the framework times it: a span, which includes any time the device waited for the host to
        launch more (a slow step whose device time is not longer idled the device).
        Each step also records this thread's CPU time and its time ready to run but not running
        (Linux's run-queue wait): a slow step whose launching thread ran longer or waited for a
        CPU was held up on the host, not by the device."""
        clocks = thread_clocks()
        now = time.perf_counter()
        step = len(self.steps)
        rec = {
            "step": step,
            "phase": "warmup" if step < self.warmup_steps else "timed",
            "wall_s": now - self._t,
            "images": images or self.global_batch,
            "loss": float(loss),
            "t_end": now,
            # wall-clock time of the same moment: the nodes' neighbour samples meet the steps on it
            "wall_end": time.time(),
            **({"input_wait_s": input_wait_s} if input_wait_s is not None else {}),
            **({"device_s": device_s} if device_s is not None else {}),
            **{k: clocks[k] - self._thread[k] for k in clocks if k in self._thread},
        }
        self.steps.append(rec)
        if self._beat:
            self._beat.seek(0)
            self._beat.write(f"{step:012d} {rec['wall_end']:017.3f}\n")
            self._beat.flush()
        if self.write:
            self._f.write(json.dumps(rec) + "\n")
            self._f.flush()
        # The thread's clocks are read inside each step's wall-clock interval (after its start, before
        # its end), so its CPU time and run-queue wait never count a preemption its wall time missed.
        self._t = now
        self._thread = thread_clocks()
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
    windows = window_rates(timed)
    # Fewer than two windows: no variation between them to speak of; the steps' is judged instead.
    window_cv = statistics.pstdev(windows) / statistics.fmean(windows) if len(windows) > 1 else None
    judged = window_cv if window_cv is not None else cv
    return {
        "warmup_steps": sum(s["phase"] == "warmup" for s in steps),
        "timed_steps": len(timed),
        "images_timed": images,
        "seconds_timed": seconds,
        "images_per_s": images / seconds,
        "step_images_per_s_mean": mean,
        "step_images_per_s_cv": cv,
        "window_steps": STABILITY_WINDOW,
        "window_images_per_s_cv": window_cv,
        "stable": judged <= STABLE_CV,
        "stable_by": "windows" if window_cv is not None else "steps",
        "first_loss": steps[0]["loss"],
        "last_loss": steps[-1]["loss"],
    }


def read_steps(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
