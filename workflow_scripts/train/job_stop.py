"""How a training job ends when it is stopped from outside, so that a stopped run costs one
attempt, never a blind second one (train/training_job.py):

- **SLURM's time limit.** Before SLURM's own TERM, the job stops its ranks itself, `margin_s()`
  before the job's EndTime (from `scontrol show job`), and records the run as failed, permanently:
  another attempt with the same time limit would end the same way. The job then exits 0, so SLURM
  marks it COMPLETED and Snakemake does not resubmit it; the tables list the run with why. (sbatch's
  `--signal` reaches the job steps but not the batch step this job runs in, unless `B:`, which
  reaches only the batch shell: the job keeps its own clock instead.)
- **TERM from SLURM** (scancel, a node failure, the limit where the job could not see it coming):
  the job stops its ranks, names the cause in SLURM's own words (slurmstepd's "*** JOB ... CANCELLED
  AT ... DUE TO TIME LIMIT ***" line in the log, else the job's state in scontrol) and records it,
  within SLURM's KillWait. A cancelled or failed node may be retried (training.retries); a time
  limit is not, unless the run is a long test that saved an epoch in this job: the next job resumes
  from it (checkpoint.JobProgress).
"""

import os
import re
import signal
import subprocess
import threading
import time
from datetime import datetime

import psutil

from ..cluster import launcher

# slurmstepd's words, in the log of an srun step the job started
SLURM_LINE = re.compile(r"\*\*\* (?:JOB|STEP) [\d.]+ ON \S+ CANCELLED AT \S+(?: DUE TO ([A-Z ]+?))? \*\*\*")
STATES = {
    "TIMEOUT": "time limit",
    "CANCELLED": "cancelled",
    "NODE_FAIL": "node failure",
    "PREEMPTED": "pre-empted",
    "DEADLINE": "deadline",
}
DUE_TO = {"TIME LIMIT": "time limit", "NODE FAILURE": "node failure", "PREEMPTION": "pre-empted"}


class Stopped(Exception):
    """The job was told to stop; cause: time limit | cancelled | node failure | ..., with why."""

    def __init__(self, cause, why):
        super().__init__(f"{cause}: {why}")
        self.cause, self.why = cause, why

    @property
    def permanent(self):
        return self.cause == "time limit"


def margin_s(limit_s):
    """How long before the time limit the job stops its ranks: a tenth of the limit, between 15 s
    (a short test job) and 5 minutes (time to stop, record and leave on a large run)."""
    return min(300.0, max(15.0, 0.1 * limit_s))


def _scontrol(job):
    try:
        return subprocess.run(
            ["scontrol", "show", "job", "-o", str(job)], capture_output=True, text=True, timeout=20
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _field(text, name):
    m = re.search(rf"\b{name}=(\S+)", text)
    return m.group(1) if m else None


def _limit_s(text):
    """SLURM's TimeLimit ([D-]HH:MM:SS, MM:SS, UNLIMITED) in seconds, or None."""
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", text or "")
    if not m:
        return None
    d, h, mi, s = (int(x or 0) for x in m.groups())
    return ((d * 24 + h) * 60 + mi) * 60 + s


def deadline(job, text=None):
    """(wall-clock second to stop the ranks at, SLURM's EndTime in seconds, the limit in seconds)
    of a SLURM job, or None where it has no limit or scontrol cannot say."""
    text = _scontrol(job) if text is None else text
    end, limit = _field(text, "EndTime"), _limit_s(_field(text, "TimeLimit"))
    if not end or limit is None:
        return None
    try:
        end_s = datetime.strptime(end, "%Y-%m-%dT%H:%M:%S").timestamp()
    except ValueError:  # Unknown, None: no end
        return None
    return end_s - margin_s(limit), end_s, limit


def _slurm_line(text):
    """(cause, slurmstepd's line) of the last such line in `text`, or None."""
    found = list(SLURM_LINE.finditer(text or ""))
    if not found:
        return None
    return DUE_TO.get(found[-1].group(1) or "", "cancelled"), found[-1].group(0)


def _slurms_words(log_text):
    """The log without slurmstepd's bare "STEP ... CANCELLED" lines that follow the launcher's own
    stop of its step (launcher.stop_step, which srun then reports): they say that stop, not why the
    job was told to stop. SLURM's JOB lines and those with a DUE TO are kept wherever they are."""
    head, mark, tail = (log_text or "").partition(launcher.STOPPING)
    if not mark:
        return head
    kept = []
    for line in tail.splitlines():
        m = SLURM_LINE.search(line)
        if not (m and m.group(0).startswith("*** STEP") and m.group(1) is None):
            kept.append(line)
    return head + mark + "\n".join(kept)


def _tail(path, size=65536):
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - size))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def cause_of(log_text, job=None, text=None, tries=3):
    """(cause, why) of a TERM from outside, in SLURM's own words where it gave any: slurmstepd's
    line in the run's log (an srun step's) or in the job's own output file, where slurmstepd writes
    it as it stops the batch step; else the job's state, which while its processes stop is mostly
    COMPLETING, and says nothing of why."""
    said = _slurm_line(_slurms_words(log_text))
    if said:
        return said[0], f"SLURM: {said[1]}"
    state = reason = None
    for attempt in range(tries if job else 0):
        text = _scontrol(job) if text is None or attempt else text
        outputs = {_field(text, "StdOut"), _field(text, "StdErr")} - {None}
        said = next((_slurm_line(_tail(out)) for out in outputs if _slurm_line(_tail(out))), None)
        if said:
            return said[0], f"SLURM: {said[1]}"
        state, reason = _field(text, "JobState"), _field(text, "Reason")
        if state in STATES:
            return STATES[state], f"SLURM: JobState={state} Reason={reason}"
        time.sleep(1)  # slurmstepd may write its line just after the TERM
    said = f"; SLURM says JobState={state} Reason={reason}" if state else ""
    return "stopped", f"SIGTERM from outside the job (no word from SLURM on why{said})"


TERM_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def hold_term():
    """Hold back TERM and INT until watch() can record them: a job cancelled while it still asks
    SLURM about itself would otherwise die with no record of why (the default action). Children
    inherit a blocked mask, so nothing may be started between this and watch()."""
    signal.pthread_sigmask(signal.SIG_BLOCK, TERM_SIGNALS)


def own_deadline(limit, share_s, started):
    """deadline()'s (stop at, end, limit) narrowed to the run's own share of its job: a job that runs
    a point's repeats in turn has the sum of their time limits, and one run must not take the
    next one's time. -> (stop at, end, limit, whether the share decides)."""
    stop_at, end_s, limit_s = limit
    if not share_s or share_s >= limit_s:
        return stop_at, end_s, limit_s, False
    own_end = started + share_s
    if own_end >= end_s:
        return stop_at, end_s, limit_s, False
    return own_end - margin_s(share_s), own_end, share_s, True


_asked = []  # (cause, why) of a stop asked for from another thread (stop_from_thread)
_raised = []  # the stop raised in the main thread: one per job


def _raise_once(stopped):
    """Raise `stopped` in the main thread, out of whatever it waits for, the first time only: a later
    TERM, time limit or hang while the first stop is under way (the launcher stopping srun's step,
    cluster/launcher.stop_step) must not cut it short and leave the ranks running."""
    if _raised:
        return
    _raised.append(stopped)
    # TERM first: local ranks stop, and srun starts stopping its step
    terminate_children()
    raise stopped


def _on_asked(signum, frame):
    _raise_once(Stopped(*_asked[-1]))


def stop_from_thread(cause, why):
    """Stop the job from another thread (the progress watchdog): Stopped(cause, why) is raised in the
    main thread, out of whatever it waits for, as the time limit's is."""
    _asked.append((cause, why))
    os.kill(os.getpid(), signal.SIGUSR2)


def watch(job, say, share_s=0, started=None):
    """Handlers for the TERM SLURM sends (and INT), and, under a time limit, a timer that stops the
    ranks margin_s() before it (before the end of the run's own share of the job, share_s seconds
    from `started`, where that comes first): each raises Stopped in the main thread, out of whatever
    it waits for. A TERM held since hold_term() is raised here, so the caller calls this inside its try."""

    def on_term(signum, frame):
        _raise_once(Stopped("TERM", ""))  # the cause is read once the ranks are down (cause_of)

    for signum in TERM_SIGNALS:
        signal.signal(signum, on_term)
    signal.signal(signal.SIGUSR2, _on_asked)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, TERM_SIGNALS)
    limit = deadline(job) if job else None
    if not limit:
        return None
    stop_at, end_s, limit_s, shared = own_deadline(limit, share_s, time.time() if started is None else started)
    whose = (
        f"the end of its own {limit_s / 60:.0f} min in a SLURM job it shares with its point's other repeats"
        if shared
        else f"SLURM's time limit of {limit_s / 60:.0f} min"
    )

    why = (
        f"stopped by the pipeline {end_s - stop_at:.0f} s before {whose} "
        f"({'at' if shared else 'EndTime'} {datetime.fromtimestamp(end_s):%Y-%m-%dT%H:%M:%S}): "
        "raise the system's time_min (the long test: training.long_test.time_min) or run fewer steps"
    )
    timer = threading.Timer(max(0.0, stop_at - time.time()), stop_from_thread, ("time limit", why))
    timer.daemon = True
    timer.start()
    say(f"job: will stop the ranks at {datetime.fromtimestamp(stop_at):%H:%M:%S}, before {whose}")
    return timer


def terminate_children():
    """TERM to every process this job started (srun passes it on to the ranks); returns them."""
    children = psutil.Process().children(recursive=True)
    for p in children:
        try:
            p.terminate()
        except psutil.Error:
            pass
    return children


def stop_children(grace_s=10.0):
    """terminate_children(), then KILL to what is left after grace_s; returns how many there were."""
    children = terminate_children()
    _, alive = psutil.wait_procs(children, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    return len(children)
