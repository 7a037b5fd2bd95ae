"""The sweep's failed runs, and how to run only them again.

    python -m workflow_scripts.common.failed_runs            # each failed run: its cause, attempts, log
    python -m workflow_scripts.common.failed_runs --retry    # set them aside, so that the next
    snakemake --profile slurm all                            # ... reruns those runs, and only those

A run that failed on its last attempt is a result (train/failure.py writes it: its summary.json
says failed and why), so Snakemake does not run it again by itself. --retry moves each failed
summary.json to .failed-records/<run>.<n>.json in its system's folder (kept: a rerun empties only
its own run directory), which leaves exactly those runs' outputs missing. A point's later repeats
follow a run through its log, not its summary (rules/train.smk), so they are not rerun with it. A permanent failure (a
build that cannot run on the GPU) is listed but set aside only with --include-permanent: it would
fail alike.
"""

import argparse
import json
from pathlib import Path


def failed_runs(results):
    """[(run directory, its failed summary)] under results/runs, the long test's included."""
    out = []
    for summary in sorted(Path(results, "runs").glob("**/summary.json")):
        try:
            s = json.loads(summary.read_text())
        except (OSError, ValueError):
            continue
        if s.get("status") == "failed":
            out.append((summary.parent, s))
    return out


KEPT = ".failed-records"  # beside the run directories: a rerun empties its own directory, not this


def set_aside(run_dir):
    """The run's summary.json -> <its system's folder>/.failed-records/<run>.<n>.json (the first n
    not taken); returns the new path."""
    keep = run_dir.parent / KEPT
    keep.mkdir(exist_ok=True)
    n = 1
    while (keep / f"{run_dir.name}.{n}.json").exists():
        n += 1
    target = keep / f"{run_dir.name}.{n}.json"
    (run_dir / "summary.json").rename(target)
    return target


def lines(runs):
    return [
        f"{d}\t{'permanent' if s.get('permanent') else 'failed'} after {s.get('attempts', '?')} attempt(s): "
        f"{s.get('reason', '?')}\tlog: {s.get('log', '?')}"
        for d, s in runs
    ]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="results", help="config results_dir")
    ap.add_argument("--retry", action="store_true", help="set the failed runs' records aside for the next run")
    ap.add_argument("--include-permanent", action="store_true", help="with --retry: the permanent ones too")
    a = ap.parse_args(argv)
    runs = failed_runs(a.results)
    if not runs:
        print(f"no failed runs under {a.results}/runs")
        return
    print("\n".join(lines(runs)))
    if a.retry:
        again = [(d, s) for d, s in runs if a.include_permanent or not s.get("permanent")]
        for d, _ in again:
            set_aside(d)
        print(
            f"set aside {len(again)} of {len(runs)} failed run(s)'s records (in {KEPT}/ beside them); "
            "`snakemake --profile slurm all` now runs them again, and only them"
        )


if __name__ == "__main__":
    main()
