"""Record a run that failed on its last attempt as a result, so the sweep's tables show it as
failed, with why, instead of leaving it out (train/training_job.py calls record(); also a command:

    python -m workflow_scripts.train.failure --out RUN_DIR --log ATTEMPT_LOG --attempts N --exit-code RC)

summary.json then holds status "failed", the last lines of the log that look like the cause,
and where the whole log is. A permanent failure (permanent(): a build that cannot run on the
GPU) is recorded on the attempt that met it, whatever attempts are left: another would fail alike. Delete the
run directory (or use --forcerun) to run it again.
"""

import argparse
import re
from pathlib import Path

from ..cluster.kernel_check import classify
from ..common.atomic import write_json
from ..common.errors import PERMANENT_TAG

WORKER = re.compile(r"Caught \w+ in DataLoader worker process \d+")
CAUSE = re.compile(r"error|exception|traceback|fail|killed|cancel|oom|denied|not found|needs", re.I)


def reason(log_text, lines=3):
    """The last few log lines that name a cause, else the log's last lines; a line every rank
    printed counts once."""
    all_lines = list(dict.fromkeys(ln.strip() for ln in log_text.splitlines() if ln.strip()))
    picked = [ln for ln in all_lines if CAUSE.search(ln)][-lines:] or all_lines[-lines:]
    return " | ".join(ln[:600] for ln in picked) or "no output"


def permanent(log_text):
    """The line of a log that names a cause no retry can remove, else None: a rank's PermanentError
    (kernel_check's, with the GPU, the build and the fix), else a CUDA message of the same causes
    from a kernel that failed after that check."""
    lines = [ln.strip() for ln in log_text.splitlines()]
    tagged = [ln for ln in lines if PERMANENT_TAG in ln]
    # A DataLoader worker's error reaches the main process as "Caught <error> in DataLoader worker
    # process N.", its message further down, inside the worker's traceback: that line says why.
    said = [ln for ln in tagged if not WORKER.search(ln)]
    return next(iter(said or tagged), None) or next((ln for ln in lines if classify(ln)), None)


def record(run_dir, log, attempts, exit_code, permanent_cause=None, stopped=None, out=None):
    """The failed run's summary.json (or `out`); stopped: the cause when the job was stopped from
    outside (time limit, cancelled, node failure: train/job_stop.py), whose line the log holds."""
    log = Path(log)
    text = log.read_text(errors="replace") if log.exists() else ""
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    said = next((ln.strip() for ln in reversed(text.splitlines()) if ln.startswith("job: stopped (")), None)
    write_json(
        Path(out) if out else Path(run_dir) / "summary.json",
        {
            "status": "failed",
            "reason": permanent_cause[:1200] if permanent_cause else (said if stopped and said else reason(text)),
            "exit_code": exit_code,
            "attempts": attempts,
            "permanent": permanent_cause is not None,
            "stopped": stopped,
            "log": str(log),
        },
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--attempts", type=int, required=True)
    ap.add_argument("--exit-code", type=int, required=True)
    a = ap.parse_args()
    record(a.out, a.log, a.attempts, a.exit_code)


if __name__ == "__main__":
    main()
