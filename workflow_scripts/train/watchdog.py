"""The training job's progress watchdog (train/training_job.py): a run whose ranks stop making
steps is stopped and recorded as hung, instead of holding its nodes until the time limit and being
filed as one (docs/training.md#a-run-that-hangs).

Every rank writes its last step to beat.rank<r> in the run directory (common/metrics.StepLog). The
watchdog reads them every few seconds. Before the first step it allows training.hang_start_s
(imports, NCCL's set-up, compilation and JIT at scale); after it, the larger of
training.hang_idle_s and STEP_FACTOR times the median step seen so far. Past the limit it asks
each rank for its Python stacks (SIGUSR1: answer_stacks registers faulthandler on it; srun passes
the signal on to its tasks), then stops the job as "hung", naming the last step, the limit and the
ranks that were behind or never reported.

A rank started by srun writes its stacks to its stderr, which srun (--label, cluster/launcher.py)
forwards into the job's log line by line, each line headed by the rank: a file the rank wrote on
another node would reach the job's node only once that node's NFS client flushed it and this one's
attribute cache expired, long after the job has gone. A rank the local launcher started, on the
job's own node, writes stacks.rank<r>.txt.
"""

import faulthandler
import os
import re
import signal
import statistics
import sys
import threading
import time
from pathlib import Path

import psutil

BEAT = "beat.rank{rank}"
STACKS = "stacks.rank{rank}.txt"  # faulthandler's dump on SIGUSR1 (harness)
STEP_FACTOR = 20  # a step 20 times the median one is no longer a slow step
POLL_S = 2.0


def beats(run_dir):
    """{rank: (last step, wall-clock time)} from the ranks' beat files."""
    out = {}
    for path in Path(run_dir).glob("beat.rank*"):
        try:
            step, when = path.read_text().split()
            out[int(path.name.removeprefix("beat.rank"))] = (int(step), float(when))
        except (OSError, ValueError):
            continue
    return out


def behind(seen, ranks):
    """The ranks whose last step is below the others', or that never reported, in order."""
    top = max((s for s, _ in seen.values()), default=None)
    return [r for r in range(ranks) if r not in seen or seen[r][0] != top]


class Watchdog:
    """Watches run_dir's beat files from a thread; on a hang calls on_hang(why) once."""

    def __init__(self, run_dir, ranks, start_s, idle_s, on_hang, poll_s=POLL_S, clock=time.time):
        self.run_dir, self.ranks, self.start_s, self.idle_s = run_dir, ranks, start_s, idle_s
        self.on_hang, self.poll_s, self.clock = on_hang, poll_s, clock
        self.started = clock()
        self.progress = (None, self.started)  # (top step, when it was first seen)
        self.step_s = []  # seconds a step, between the tops seen
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="watchdog")

    def start(self):
        if self.start_s or self.idle_s:
            self._thread.start()
        return self

    def stop(self):
        self._stop.set()

    def limit(self):
        """(seconds allowed without a new step, how the limit was set)."""
        if self.progress[0] is None:
            return self.start_s, "training.hang_start_s before the first step"
        if self.step_s:
            median = statistics.median(self.step_s)
            if STEP_FACTOR * median > self.idle_s:
                return STEP_FACTOR * median, f"{STEP_FACTOR} x the median step of {median:.2f} s"
        return self.idle_s, "training.hang_idle_s"

    def check(self):
        """One look at the beats: the hang's description, or None."""
        now, seen = self.clock(), beats(self.run_dir)
        top = max((s for s, _ in seen.values()), default=None)
        last, since = self.progress
        if top is not None and (last is None or top > last):
            if last is not None:
                self.step_s.append((now - since) / (top - last))
            self.progress = (top, now)
            return None
        limit, how = self.limit()
        idle = now - self.progress[1]
        if not limit or idle <= limit:
            return None
        slow = behind(seen, self.ranks)
        where = f"after step {last} (the last any rank reported)" if last is not None else "before the first step"
        return (
            f"no training step for {idle:.0f} s {where}, over the limit of {limit:.0f} s ({how}); "
            f"ranks behind or silent: {', '.join(map(str, slow)) or 'none (all stopped at the same step)'}"
        )

    def _loop(self):
        while not self._stop.wait(self.poll_s):
            why = self.check()
            if why:
                self.on_hang(why)
                return


# a faulthandler dump's first line as srun --label forwards it: "3: Thread 0x00007f... (most recent
# call first):", the rank right-aligned to the widest one's digits
LABELLED_STACK = re.compile(r"^\s*(\d+): (?:Current thread|Thread) 0x[0-9a-f]+", re.M)


def answer_stacks(run_dir, launch, stderr=None):
    """Where this rank's stacks go when the watchdog asks (SIGUSR1), every thread's, written by
    faulthandler from the signal itself, so a rank blocked in a collective or a read still answers:
    under srun (launch.source "slurm") its stderr, which reaches the job's log from any node; else
    stacks.rank<r>.txt in run_dir. -> the file opened for it (keep it open), or None."""
    if launch.source == "slurm":
        faulthandler.register(signal.SIGUSR1, file=stderr or sys.stderr, all_threads=True)
        return None
    out = open(Path(run_dir) / STACKS.format(rank=launch.rank), "w")
    faulthandler.register(signal.SIGUSR1, file=out, all_threads=True)
    return out


def unanswered(run_dir, ranks, log_text=""):
    """The ranks that gave no stack when asked (dump_stacks): none in their stacks.rank<r>.txt and
    none under their label in the job's log (log_text, what srun forwarded); stopped, or stuck
    where not even a signal handler runs: with the ranks behind, the ones to look at first."""
    labelled = {int(r) for r in LABELLED_STACK.findall(log_text)}
    return [r for r in range(ranks) if r not in labelled and not _size(Path(run_dir) / STACKS.format(rank=r))]


def stacks_text(run_dir):
    """Every rank's dumped stacks in the run directory (the local launcher's ranks), for the
    attempt's log; srun's ranks put theirs there themselves."""
    out = []
    for path in sorted(Path(run_dir).glob("stacks.rank*.txt")):
        text = path.read_text(errors="replace").strip()
        if text:
            out.append(f"--- {path.name} ---\n{text}")
    return "\n".join(out)


def _size(path):
    try:
        return path.stat().st_size
    except OSError:
        return 0


def dump_stacks(grace_s=3.0):
    """SIGUSR1 to the job's children that take it: the ranks (faulthandler prints their stacks) and
    srun (which passes it on to its tasks); then a moment for them to write."""
    for p in psutil.Process().children(recursive=True):
        try:
            name = p.name()
            if name == "srun" or "python" in name:
                os.kill(p.pid, signal.SIGUSR1)
        except (psutil.Error, OSError):
            pass
    time.sleep(grace_s)
