"""The sequence every measuring job runs, written once: an attempt of a training run or of a long
test (train/training_job.py) and a preflight check (preflight/preflight_job.py).

    hold TERM -> open the log -> watch for a stop -> prepare -> scope the cache
      -> clear it on every node -> measure (launch, supervise) -> record

Each job supplies its own steps (MeasuringJob's methods it overrides); the order, the page cache's
scope and what a stop from outside leaves are the same for all of them. A stop (SLURM's TERM,
its time limit coming, the progress watchdog: train/job_stop.py) ends the measuring wherever it
is: the job's processes are stopped, the cause named in SLURM's words where it gave any, said in
the log as `job: stopped (cause): why`, and recorded beside the log (record_stop), whatever the
job then makes of it.
"""

import os
import socket
import sys
import time
from pathlib import Path

from ..cluster import page_cache, slurm
from . import failure, job_stop

STOPPED_RC = 143  # a stopped job's exit status, as a TERM's would be


def host():
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def into_log(path):
    """This process's output and every child's, from here on, into `path`."""
    with open(path, "w") as f:
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)


class MeasuringJob:
    """One measuring job. `a`: its parsed arguments (page_cache.add_arguments' among them); `log`:
    where all of its output goes. run() is the sequence; a job overrides its steps."""

    what = "job"  # the log's first words
    share_s = 0  # the job's own share of its SLURM job in seconds, where it shares one (0: all of it)

    def __init__(self, a, log):
        self.a, self.log = a, Path(log)
        self.slurm_job = os.environ.get("SLURM_JOB_ID")
        self.started = self.sharing = self.scope = None
        self.scope_why = ""

    def run(self):
        """The steps in order; -> the job's exit status (record's)."""
        job_stop.hold_term()  # from the log on, a TERM is recorded (watch, below)
        self.started = time.time()
        self.open_log()
        stopped = None
        try:
            job_stop.watch(self.slurm_job, self.say, share_s=self.share_s, started=self.started)
            self.prepare()
            self.scope_cache()
            rc = self.clear_cache()
            if rc == 0:
                rc = self.measure()
        except job_stop.Stopped as exc:
            stopped = self.stopped(exc)
            rc = STOPPED_RC
        sys.stdout.flush(), sys.stderr.flush()
        return self.record(rc, stopped)

    def say(self, line):
        """A line of the job's own in its log."""
        print(line, flush=True)

    def open_log(self):
        self.log.parent.mkdir(parents=True, exist_ok=True)
        into_log(self.log)
        self.say(f"{self.what} on {host()}, SLURM job {self.slurm_job or 'none'}")

    def prepare(self):
        """What the job makes ready before the cache is cleared (its directories)."""

    def scope_cache(self):
        """Node-wide clearing only where the job holds its nodes alone (page_cache.scope_for)."""
        self.sharing = slurm.job_sharing(self.slurm_job) if self.slurm_job else None
        self.scope, self.scope_why = page_cache.scope_for(self.a.cache_clear, self.sharing)
        if self.scope_why:
            self.say(f"job: page cache: {self.scope_why}")

    def clear_cache(self):
        """The page cache cleared once on every node of the job, in self.scope; -> 0 when done."""
        return 0

    def measure(self):
        """Launch and supervise what the job measures; -> its exit status."""
        return 0

    def record(self, rc, stopped):
        """What the job leaves (stopped: a job_stop.Stopped, or None); -> the job's exit status."""
        return rc

    def stopped(self, exc):
        """A stop from outside: everything the job started stopped, then the cause, said in the log."""
        job_stop.stop_children()
        sys.stdout.flush(), sys.stderr.flush()
        cause, why = (exc.cause, exc.why) if exc.cause != "TERM" else job_stop.cause_of(self.log_text(), self.slurm_job)
        self.say(f"job: stopped ({cause}): {why}")
        return job_stop.Stopped(cause, why)

    def record_stop(self, where, rc, attempts, stopped, cause=None):
        """A stop's record beside the log (<log>.json): Snakemake deletes a failed job's outputs, and
        the next attempt empties the run's directory. where: the directory the job measured in."""
        failure.record(where, self.log, attempts, rc, cause, stopped=stopped.cause, out=f"{self.log}.json")

    def log_text(self):
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def cache_record(self):
        """The scope the cache was cleared in, for the job's record."""
        return {"configured": self.a.cache_clear, "used": self.scope, "why": self.scope_why}

    def slurm_record(self):
        """SLURM's word on the job's nodes (slurm.job_sharing), for the job's record; None outside SLURM."""
        if self.sharing or not self.slurm_job:
            return self.sharing
        return {"job": self.slurm_job, "oversubscribe": None, "exclusive": None}
