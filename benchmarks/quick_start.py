"""Where the quick start's minutes go: a finished `snakemake all` directory read back.

Prints the run's wall time (its Snakemake log's first and last lines), each rule's jobs and
seconds (their benchmark files: a job's own wall time, `s`), and for each measuring job of the
sweep and the long test its phases: from the job's start to its first step (the job's set-up,
page-cache clearing, the launcher, the ranks' imports, model and input built), the warm-up steps,
the timed steps, and from the last step to the job's end (evidence, summary). Measuring jobs run
one at a time, so their sum is time the run waited on them.

    .venv/bin/snakemake all && .venv/bin/python benchmarks/quick_start.py --run .
"""

import argparse
import csv
import json
import re
from datetime import datetime
from pathlib import Path

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]", re.M)


def wall_s(run):
    """Seconds from the first to the last time stamp of the newest Snakemake log, or None."""
    logs = sorted((run / ".snakemake" / "log").glob("*.snakemake.log"))
    if not logs:
        return None
    stamps = [
        datetime.strptime(" ".join(m.split()), "%a %b %d %H:%M:%S %Y") for m in STAMP.findall(logs[-1].read_text())
    ]
    return (stamps[-1] - stamps[0]).total_seconds() if len(stamps) > 1 else None


def rule_seconds(run):
    """{rule: (jobs, seconds)} from the benchmark files under logs/ (a rule's name: the log folder
    and file it writes, as the rules name them)."""
    out = {}
    for bench in (run / "logs").rglob("*.bench.tsv"):
        with open(bench) as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
        if not rows:
            continue
        key = bench.relative_to(run / "logs").parts[0]
        jobs, seconds = out.get(key, (0, 0.0))
        out[key] = (jobs + 1, seconds + float(rows[-1]["s"]))
    return out


def phases(run_dir):
    """(start-up, warm-up, timed, after) seconds of one measuring job, from its summary and steps."""
    summary = json.loads((run_dir / "summary.json").read_text())
    steps = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines() if line.strip()]
    job = summary.get("job") or {}
    if not steps or not job.get("started_at"):
        return None
    first = steps[0]["wall_end"] - steps[0]["wall_s"]
    warm = sum(s["wall_s"] for s in steps if s["phase"] == "warmup")
    timed = sum(s["wall_s"] for s in steps if s["phase"] != "warmup")
    return first - job["started_at"], warm, timed, job["ended_at"] - steps[-1]["wall_end"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default=".", help="the directory `snakemake all` ran in")
    ap.add_argument("--dry-run", action="store_true", help="say what would be read, and stop")
    a = ap.parse_args(argv)
    run = Path(a.run)
    if a.dry_run:
        print(f"would read {run / '.snakemake' / 'log'}, {run / 'logs'} and {run / 'results' / 'runs'}")
        return
    total = wall_s(run)
    print(f"snakemake all: {total:.0f} s wall" if total else "snakemake all: no log with time stamps")
    print("\nby stage (logs/<stage>): jobs, seconds of their own wall time")
    for key, (jobs, seconds) in sorted(rule_seconds(run).items(), key=lambda kv: -kv[1][1]):
        print(f"  {key:<14} {jobs:>3} {seconds:8.1f}")
    print("\nmeasuring jobs: start-up to the first step, warm-up, timed steps, after the last step (s)")
    for summary in sorted((run / "results" / "runs").rglob("summary.json")):
        p = phases(summary.parent)
        if p:
            name = summary.parent.relative_to(run / "results" / "runs")
            print(f"  {str(name):<40} {p[0]:6.1f} {p[1]:6.1f} {p[2]:7.1f} {p[3]:6.1f}")


if __name__ == "__main__":
    main()
