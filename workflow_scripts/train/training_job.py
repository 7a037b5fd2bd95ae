"""One attempt of one training run, as rules/train.smk runs it inside its job (a SLURM job on a
cluster, a child of snakemake locally):

    python -m workflow_scripts.train.training_job --run-dir RUN --results-dir RESULTS --log LOG \
        --attempt N --retries R [--data PATH ...] [--cache-clear-command CMD] --python 'WORDS' \
        [launcher options] -- workflow_scripts.train.pytorch_ddp --batch-per-gpu 64 ...

It empties the run directory (only ever one that lies inside --results-dir), clears the page
cache once on every node of the run (node-wide only where the job holds its nodes alone:
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
import os
import shlex
import shutil
import socket
import sys
import time
import uuid
from pathlib import Path

from ..common import launcher, neighbours, page_cache, slurm
from ..common.errors import StageError, run_main
from ..common.schema import default as config_default
from . import checkpoint, failure, job_stop, run_evidence, watchdog


def checked_run_dir(run_dir, results_dir):
    """The run directory, refused unless it lies strictly inside the results directory: it is
    deleted before every attempt."""
    run, results = Path(run_dir).resolve(), Path(results_dir).resolve()
    if run == results or not run.is_relative_to(results):
        raise StageError(f"run directory {run_dir} does not lie inside results_dir {results_dir}: not deleting it")
    return run


def _hung(why, run, ranks):
    """The watchdog's verdict (its thread): the ranks asked for their stacks, which go into the log,
    the ones that gave none named; then the job stopped."""
    watchdog.dump_stacks()
    silent = watchdog.unanswered(run, ranks)
    why += (
        f"; ranks that gave no stack when asked (stopped, or stuck outside Python): {', '.join(map(str, silent))}"
        if silent
        else "; every rank gave its stack"
    ) + " (the attempt's log holds them)"
    print(f"job: hung: {why}\n{watchdog.stacks_text(run)}", flush=True)
    job_stop.stop_from_thread("hung", why)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--results-dir", required=True, help="config results_dir: the run dir must lie inside it")
    ap.add_argument("--log", required=True)
    ap.add_argument("--attempt", type=int, default=1)
    ap.add_argument("--retries", type=int, default=config_default("training.retries"), help="config training.retries")
    ap.add_argument(
        "--share-min",
        type=float,
        default=0,
        help="the run's own time limit in minutes (its time_min), where one SLURM job runs a point's "
        "repeats in turn; 0: the job's",
    )
    ap.add_argument(
        "--hang-start-s",
        type=float,
        default=config_default("training.hang_start_s"),
        help="config training.hang_start_s: seconds allowed before the first step (0: no watchdog then)",
    )
    ap.add_argument(
        "--hang-idle-s",
        type=float,
        default=config_default("training.hang_idle_s"),
        help="config training.hang_idle_s: seconds allowed between steps, at least (0: no watchdog then)",
    )
    ap.add_argument("--data", nargs="*", default=[], help="the dataset the run reads (page-cache clearing)")
    ap.add_argument(
        "--cache-clear-command",
        default=config_default("training.cache_clear_command"),
        help="config training.cache_clear_command",
    )
    ap.add_argument("--cache-clear", default=config_default("training.cache_clear"), help="config training.cache_clear")
    launcher.add_arguments(ap)
    ap.add_argument("trainer", nargs=argparse.REMAINDER, help="-- MODULE ARGS...: the trainer and its options")
    a = ap.parse_args()
    job_stop.hold_term()  # from the attempt's log on, a TERM is recorded (job_stop.watch, below)
    started = time.time()
    trainer = a.trainer[1:] if a.trainer[:1] == ["--"] else a.trainer
    if not trainer:
        ap.error("no trainer module given after --")
    run = checked_run_dir(a.run_dir, a.results_dir)
    log = Path(a.log)
    attempt_log = log.with_name(f"{log.name}.attempt{a.attempt}")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(attempt_log, "w") as f:
        # Every child (launcher, srun, ranks) writes into the attempt's log.
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
    print(
        f"attempt {a.attempt} on {os.environ.get('SLURMD_NODENAME') or socket.gethostname()}, "
        f"SLURM job {os.environ.get('SLURM_JOB_ID', 'none')}",
        flush=True,
    )
    progress = checkpoint.JobProgress(trainer, a.attempt)
    if progress.dir and a.attempt == 1 and progress.before == 0:
        run_evidence.jobs_file(run).unlink(missing_ok=True)  # a long test from its start: no earlier jobs
    stopped = sharing = scope = why = None
    job = os.environ.get("SLURM_JOB_ID")
    try:
        job_stop.watch(job, lambda line: print(line, flush=True), share_s=a.share_min * 60, started=started)
        shutil.rmtree(run, ignore_errors=True)
        run.mkdir(parents=True)
        # Every process of this attempt (srun, the ranks, their workers) inherits the marker: the nodes'
        # samplers count them as the run's and everything else as a neighbour.
        neighbours.mark_run(f"{run}:{a.attempt}:{uuid.uuid4().hex}")
        sharing = slurm.job_sharing(job) if job else None
        scope, why = page_cache.scope_for(a.cache_clear, sharing)
        if why:
            print(f"job: page cache: {why}", flush=True)
        # Page caches are the host's: cleared from this (the workflow's) interpreter, never from
        # inside a container; the ranks run in the framework's interpreter.
        rc = launcher.run(
            [
                sys.executable,
                "-m",
                "workflow_scripts.common.page_cache",
                "--paths",
                *a.data,
                f"--cache-clear-command={a.cache_clear_command}",
                f"--cache-clear={scope}",
                "--out",
                str(run / "cache.{node}.json"),
            ],
            a,
            per_node_once=True,
        )
        if rc == 0:
            # NCCL's initialisation lines into the run directory: which transport it chose (nccl_log)
            a.nccl_log_dir = a.nccl_log_dir or str(run)
            ranks = a.nodes * a.nproc_per_node
            dog = watchdog.Watchdog(
                run, ranks, a.hang_start_s, a.hang_idle_s, lambda why: _hung(why, run, ranks)
            ).start()
            try:
                rc = launcher.run([*shlex.split(a.python), "-m", *trainer, "--out", str(run)], a)
            finally:
                dog.stop()
    except job_stop.Stopped as exc:
        # Stopped from outside: the ranks down first, then the cause in SLURM's words, recorded.
        job_stop.stop_children()
        sys.stdout.flush(), sys.stderr.flush()
        cause, why = (
            (exc.cause, exc.why)
            if exc.cause != "TERM"
            else job_stop.cause_of(attempt_log.read_text(errors="replace"), job)
        )
        stopped = job_stop.Stopped(cause, why)
        print(f"job: stopped ({cause}): {why}", flush=True)
        rc = 143
    sys.stdout.flush(), sys.stderr.flush()
    if stopped:
        cause = f"{stopped.cause}: {stopped.why}" if stopped.permanent else None
    else:
        cause = failure.permanent(attempt_log.read_text(errors="replace")) if rc != 0 else None
    cause, last, line = progress.judge(a.attempt, a.retries, rc, cause, stopped and stopped.cause)
    if line:
        print(line, flush=True)
    if cause and not last:
        print(
            f"job: attempt {a.attempt} failed for a cause another attempt would meet again: recorded now, "
            f"not retried (training.retries {a.retries})",
            flush=True,
        )
    if rc == 0:
        run_evidence.add_to_summary(
            run,
            {
                "job": {
                    "started_at": started,
                    "ended_at": time.time(),
                    "host": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
                    "attempt": a.attempt,
                },
                "slurm": sharing or ({"job": job, "oversubscribe": None, "exclusive": None} if job else None),
                "cache_scope": {"configured": a.cache_clear, "used": scope, "why": why},
            },
        )
    shutil.copyfile(attempt_log, log)
    if progress.dir and rc != 0 and not (cause or last):
        # a long test's job that will be resumed: its own isolation, for the last job to judge with
        mode = "accuracy"
        device = "gpu" if any(run.glob("gpu.rank*.json")) or "--require-gpu" in trainer else "cpu"
        slurm_record = sharing or ({"job": job, "oversubscribe": None, "exclusive": None} if job else None)
        run_evidence.keep_job_evidence(run, run_evidence.job_summary(run, mode, device, slurm_record), a.attempt)
    if stopped:
        # A record beside the attempt's log too: Snakemake deletes a failed job's outputs (a
        # cancelled job's summary.json among them), and the next attempt empties the run directory.
        failure.record(run, attempt_log, a.attempt, rc, cause, stopped=stopped.cause, out=f"{attempt_log}.json")
    if rc != 0 and (cause or last):
        failure.record(run, attempt_log, a.attempt, rc, cause, stopped=stopped and stopped.cause)
        rc = 0
    sys.exit(rc)


if __name__ == "__main__":
    run_main(main)
