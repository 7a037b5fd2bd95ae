"""One attempt of one training run, as rules/train.smk runs it inside its job (a SLURM job on a
cluster, a child of snakemake locally):

    python -m workflow_scripts.train.training_job --run-dir RUN --results-dir RESULTS --log LOG \
        --attempt N --retries R [--data PATH ...] [--cache-clear-command CMD] --python 'WORDS' \
        [launcher options] -- workflow_scripts.train.pytorch_ddp --batch-per-gpu 64 ...

It runs the measuring jobs' sequence (train/measuring_job.py, preflight's too): it empties the
run directory (only ever one that lies inside --results-dir), clears the page cache once on every
node of the run (node-wide only where the job holds its nodes alone:
page_cache.scope_for), then starts the trainer's ranks through the launcher, everything it starts
marked as the run's (neighbours.MARKER). Once they have exited it adds to the summary what only
the whole run shows: whether anything else used its nodes in the timed window, the GPUs' state,
SLURM's word on sharing, when the job ran (run_evidence). All of
it goes to LOG.attemptN, which survives Snakemake's retries (it deletes LOG before each), and is
copied to LOG. A failure on the last attempt is recorded as the run's result (status failed, and
why), so the tables list it rather than the sweep stopping short of them; so is a permanent one
(failure.permanent: a framework build with no code for the GPU) on any attempt, and the job then
exits 0 so that Snakemake does not resubmit it.

No shell is involved: every path and setting reaches the programs as one argument each. Only
--cache-clear-command, which is meant to be a command, is run by a shell (in page_cache).
"""

import argparse
import shlex
import shutil
import sys
import time
import uuid
from pathlib import Path

from ..cluster import launcher, neighbours, page_cache
from ..common import schema
from ..common.errors import StageError, run_main
from . import checkpoint, failure, job_stop, run_evidence, watchdog
from .measuring_job import MeasuringJob, host


def checked_run_dir(run_dir, results_dir):
    """The run directory, refused unless it lies strictly inside the results directory: it is
    deleted before every attempt."""
    run, results = Path(run_dir).resolve(), Path(results_dir).resolve()
    if run == results or not run.is_relative_to(results):
        raise StageError(f"run directory {run_dir} does not lie inside results_dir {results_dir}: not deleting it")
    return run


def _hung(why, run, ranks, log):
    """The watchdog's verdict (its thread): the ranks asked for their stacks, which go into the log
    (srun's, labelled, through it; the local ranks' from their files), the ones that gave none
    named; then the job stopped."""
    watchdog.dump_stacks()
    silent = watchdog.unanswered(run, ranks, log.read_text(errors="replace") if log.exists() else "")
    why += (
        f"; ranks that gave no stack when asked (stopped, or stuck outside Python): {', '.join(map(str, silent))}"
        if silent
        else "; every rank gave its stack"
    ) + " (the attempt's log holds them)"
    print(f"job: hung: {why}\n{watchdog.stacks_text(run)}", flush=True)
    job_stop.stop_from_thread("hung", why)


def arg_parser():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--results-dir", required=True, help="config results_dir: the run dir must lie inside it")
    ap.add_argument("--log", required=True)
    ap.add_argument("--attempt", type=int, default=1)
    ap.add_argument(
        "--share-min",
        type=float,
        default=0,
        help="the run's own time limit in minutes (its time_min), where one SLURM job runs a point's "
        "repeats in turn; 0: the job's",
    )
    # the attempts and the progress watchdog's limits (0: no watchdog then)
    schema.add_arguments(ap, "training", ("retries", "hang_start_s", "hang_idle_s"))
    ap.add_argument("--data", nargs="*", default=[], help="the dataset the run reads (page-cache clearing)")
    page_cache.add_arguments(ap)
    launcher.add_arguments(ap)
    ap.add_argument("trainer", nargs=argparse.REMAINDER, help="-- MODULE ARGS...: the trainer and its options")
    return ap


class TrainingJob(MeasuringJob):
    """One attempt of a run (measuring_job's sequence): its log is LOG.attemptN, copied to LOG at the end."""

    def __init__(self, a, trainer):
        log = Path(a.log)
        super().__init__(a, log.with_name(f"{log.name}.attempt{a.attempt}"))
        self.run_dir, self.final_log, self.trainer = checked_run_dir(a.run_dir, a.results_dir), log, trainer
        self.share_s = a.share_min * 60
        self.progress = None

    @property
    def what(self):
        return f"attempt {self.a.attempt}"

    def open_log(self):
        super().open_log()
        self.progress = checkpoint.JobProgress(self.trainer, self.a.attempt)

    def prepare(self):
        if self.progress.dir and self.a.attempt == 1 and self.progress.before == 0:
            run_evidence.jobs_file(self.run_dir).unlink(missing_ok=True)  # a long test from its start: no earlier jobs
        shutil.rmtree(self.run_dir, ignore_errors=True)
        self.run_dir.mkdir(parents=True)
        # Every process of this attempt (srun, the ranks, their workers) inherits the marker: the nodes'
        # samplers count them as the run's and everything else as a neighbour.
        neighbours.mark_run(f"{self.run_dir}:{self.a.attempt}:{uuid.uuid4().hex}")

    def clear_cache(self):
        # Page caches are the host's: cleared from this (the workflow's) interpreter, never from
        # inside a container; the ranks run in the framework's interpreter.
        words = [*self.a.data, *page_cache.argv(self.a.cache_clear_command, self.scope)]
        cmd = [sys.executable, "-m", "workflow_scripts.cluster.page_cache", "--paths", *words]
        return launcher.run([*cmd, "--out", str(self.run_dir / "cache.{node}.json")], self.a, per_node_once=True)

    def measure(self):
        a, run = self.a, self.run_dir
        # NCCL's initialisation lines into the run directory: which transport it chose (nccl_log)
        a.nccl_log_dir = a.nccl_log_dir or str(run)
        ranks = a.nodes * a.nproc_per_node
        dog = watchdog.Watchdog(
            run, ranks, a.hang_start_s, a.hang_idle_s, lambda why: _hung(why, run, ranks, self.log)
        ).start()
        try:
            return launcher.run([*shlex.split(a.python), "-m", *self.trainer, "--out", str(run)], a)
        finally:
            dog.stop()

    def judge(self, rc, stopped):
        """(a cause no other attempt would remove, or None; whether no attempt follows)."""
        a = self.a
        if stopped:
            cause = f"{stopped.cause}: {stopped.why}" if stopped.permanent else None
        else:
            cause = failure.permanent(self.log_text()) if rc != 0 else None
        cause, last, line = self.progress.judge(a.attempt, a.retries, rc, cause, stopped and stopped.cause)
        if line:
            self.say(line)
        if cause and not last:
            self.say(
                f"job: attempt {a.attempt} failed for a cause another attempt would meet again: recorded now, "
                f"not retried (training.retries {a.retries})"
            )
        return cause, last

    def record(self, rc, stopped):
        """The run's evidence once it ran; a failure another attempt would meet again, or on the
        last attempt, as the run's result (the job then exits 0: Snakemake does not resubmit it)."""
        cause, last = self.judge(rc, stopped)
        if rc == 0:
            self.add_evidence()
        shutil.copyfile(self.log, self.final_log)
        if self.progress.dir and rc != 0 and not (cause or last):
            # a long test's job that will be resumed: its own isolation, for the last job to judge with
            device = "gpu" if any(self.run_dir.glob("gpu.rank*.json")) or "--require-gpu" in self.trainer else "cpu"
            summary = run_evidence.job_summary(self.run_dir, "accuracy", device, self.slurm_record())
            run_evidence.keep_job_evidence(self.run_dir, summary, self.a.attempt)
        if stopped:
            self.record_stop(self.run_dir, rc, self.a.attempt, stopped, cause)
        if rc != 0 and (cause or last):
            failure.record(self.run_dir, self.log, self.a.attempt, rc, cause, stopped=stopped and stopped.cause)
            rc = 0
        return rc

    def add_evidence(self):
        """What only the whole run shows, added to its summary (run_evidence)."""
        job = {"started_at": self.started, "ended_at": time.time(), "host": host(), "attempt": self.a.attempt}
        extra = {"job": job, "slurm": self.slurm_record(), "cache_scope": self.cache_record()}
        run_evidence.add_to_summary(self.run_dir, extra)


def main():
    ap = arg_parser()
    a = ap.parse_args()
    trainer = a.trainer[1:] if a.trainer[:1] == ["--"] else a.trainer
    if not trainer:
        ap.error("no trainer module given after --")
    sys.exit(TrainingJob(a, trainer).run())


if __name__ == "__main__":
    run_main(main)
