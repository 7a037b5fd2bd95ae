"""The long test's checkpoint, so that a run longer than one job's time limit goes on in the next.

After every epoch but the last, rank 0 writes into the checkpoint directory (config results_dir,
checkpoints/<system>/accuracy/<run>, outside the run directory, which every attempt empties):

  epoch<k>/        the framework's model, optimizer and loss-scale state (its adapter's save_state)
  predictions/     the evaluated epochs' predictions, copied back into the next job's run directory
  state.json       written last, atomically: the epoch, the epoch records so far, which arguments
                   the run had (a checkpoint of other arguments is never resumed) and the jobs so far

A job that finds a matching state.json loads epoch<k> on every rank and trains from epoch k + 1.
The directory is removed once the run has its summary, so a later run of the same arguments starts
from the beginning. train/training_job.py reads state.json's epoch before and after an attempt: a job
stopped at its time limit after an epoch was saved is resumed, not failed (docs/long-test.md).
"""

import json
import os
import shutil
import time
from pathlib import Path

from ..common.atomic import write_json

STATE = "state.json"
# Arguments that change nothing the run computes: where it writes, what it samples, which config
# key chose the interpreter, how many jobs it may span.
NOT_IDENTITY = {"out", "checkpoint_dir", "max_jobs", "telemetry_interval", "env_key", "require_gpu", "nccl_log_dir"}


def identity(args, world_size):
    """What a checkpoint must have been made with to be resumed: every argument that decides what is
    computed, and the number of ranks (the global batch and each rank's share of the val split)."""
    kept = {k: v for k, v in sorted(vars(args).items()) if k not in NOT_IDENTITY}
    return json.loads(json.dumps({**kept, "world_size": world_size}, default=str))


def saved_epoch(directory):
    """The last epoch a checkpoint directory holds (0: none): train/training_job.py's measure of progress."""
    try:
        return int(json.loads((Path(directory) / STATE).read_text())["epoch"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


class Checkpoint:
    def __init__(self, directory, ident, say=print):
        self.dir, self.ident, self.say = Path(directory), ident, say

    def load(self):
        """The state to resume from, or None (nothing saved, or saved by a run of other arguments:
        said, and left for the next save to replace)."""
        path = self.dir / STATE
        if not path.exists():
            return None
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            self.say(f"long test: {path} is unreadable ({exc}): starting from epoch 1")
            return None
        if state.get("identity") != self.ident:
            differ = sorted(
                k
                for k in set(state.get("identity", {})) | set(self.ident)
                if state.get("identity", {}).get(k) != self.ident.get(k)
            )
            self.say(
                f"long test: the checkpoint in {self.dir} is of a run with other arguments "
                f"({', '.join(differ)}): starting from epoch 1"
            )
            return None
        if not (self.dir / state["weights"]).is_dir():
            self.say(f"long test: {path} names {state['weights']}, which is missing: starting from epoch 1")
            return None
        return state

    def restore_predictions(self, run_dir):
        saved = self.dir / "predictions"
        if saved.is_dir():
            shutil.copytree(saved, Path(run_dir) / "predictions", dirs_exist_ok=True)

    def save(self, epoch, records, jobs, save_state, digest, run_dir):
        """Rank 0 only: the framework's state into epoch<epoch>/, the epoch's predictions, then
        state.json; older epochs' states are removed after it. -> seconds it took."""
        start = time.perf_counter()
        weights = self.dir / f"epoch{epoch:03d}"
        shutil.rmtree(weights, ignore_errors=True)
        weights.mkdir(parents=True)
        save_state(weights)
        predictions = Path(run_dir) / "predictions"
        for f in predictions.glob(f"epoch{epoch:03d}.rank*.tsv.gz"):
            (self.dir / "predictions").mkdir(exist_ok=True)
            shutil.copy2(f, self.dir / "predictions" / f.name)
        write_json(
            self.dir / STATE,
            {
                "epoch": epoch,
                "weights": weights.name,
                "weights_sha256": digest(),  # the resuming ranks check what they loaded against it
                "identity": self.ident,
                "records": records,
                "jobs": jobs,
            },
        )
        for old in self.dir.glob("epoch*"):
            if old.is_dir() and old != weights:
                shutil.rmtree(old, ignore_errors=True)
        return time.perf_counter() - start

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def this_job():
    """How the summary names the job that ran a stretch of epochs."""
    return {"slurm_job": os.environ.get("SLURM_JOB_ID"), "started": time.time()}


def trainer_option(argv, name, default=None):
    """The value of a trainer's option, from its command line as train/training_job.py receives it."""
    for i, word in enumerate(argv):
        if word == name and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return default


class JobProgress:
    """train/training_job.py's view of a long test's checkpoint across attempts: an attempt that saved an
    epoch made progress and is not a failure; one stopped at the time limit after saving an epoch is
    resumed by the next attempt rather than recorded as failed. The run spans at most --max-jobs
    jobs, plus training.retries attempts that saved nothing (the rule's retries are their sum)."""

    def __init__(self, trainer_argv, attempt):
        directory = trainer_option(trainer_argv, "--checkpoint-dir", "")
        self.dir = Path(directory) if directory else None
        self.max_jobs = int(trainer_option(trainer_argv, "--max-jobs", "1"))
        self.before = saved_epoch(self.dir) if self.dir else 0
        if self.dir and attempt == 1:  # a new invocation: earlier attempts' tally no longer counts
            (self.dir / "attempts.jsonl").unlink(missing_ok=True)

    def judge(self, attempt, retries, rc, cause, stopped):
        """-> (cause: permanent or None, last: no attempt follows, a line for the log or None)."""
        if not self.dir or rc == 0:  # a finished run removed its checkpoint: nothing to tally
            return cause, attempt > retries, None
        after = saved_epoch(self.dir)
        progressed = after > self.before
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "attempts.jsonl", "a") as f:
            f.write(
                json.dumps({"attempt": attempt, "saved_before": self.before, "saved_after": after, "rc": rc}) + "\n"
            )
        with open(self.dir / "attempts.jsonl") as f:
            idle = sum(1 for ln in f if (r := json.loads(ln))["rc"] != 0 and r["saved_after"] <= r["saved_before"])
        line = None
        if stopped == "time limit":
            if progressed:
                cause = None
                line = f"job: the long test saved epoch {after}: the next job resumes from it"
            else:
                cause = (
                    "time limit: no epoch of the long test finished within the job's time limit, so nothing "
                    "was saved to resume from: raise training.long_test.time_min"
                )
        last = attempt > retries + self.max_jobs - 1 or idle > retries
        if rc != 0 and last and progressed and not cause:
            cause = (
                f"the long test used its {self.max_jobs} jobs (training.long_test.max_jobs) and saved epoch {after}: "
                "raise training.long_test.max_jobs or time_min; a rerun resumes from that epoch"
            )
        return cause, last, line
