"""The PyTorch trainer of two source trees on one GPU, alternated: the same trainer words (what the
workflow runs for the default config on a one-GPU workstation system, at 224 px), run from tree A,
then tree B, then A, then B, so that a slow spell of the machine falls on both.

    python3 benchmarks/before_after.py --before DIR --out OUT [--inputs synthetic dali] [--rounds 2]

--before is a source tree holding workflow_scripts/ (e.g. `git archive <commit> workflow_scripts`
unpacked); the tree this script lies in is "after". The data (the embedded default as LMDB) and the
trainer's words come from this tree's workflow, as in pipeline_gpu.py. Writes OUT/before_after.json
and prints one row per run and a summary per input and tree: mean images/s, the spread of the
runs (min-max), and each run's step CV.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a file: pipeline_gpu beside it
try:
    from benchmarks.pipeline_gpu import REPO, TRAINER, figures, overlay, snakemake, trainer_commands
except ImportError:
    from pipeline_gpu import REPO, TRAINER, figures, overlay, snakemake, trainer_commands


def run_once(work, tree, run, words, out_dir, timeout):
    # The tree first; the rest of PYTHONPATH (carried packages) kept, this repository's entry dropped.
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != REPO]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), *rest]))
    i = words.index("--out") if "--out" in words else None
    words = words[:i] + words[i + 2 :] if i is not None else words
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", TRAINER, *words, "--out", str(out_dir)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    (out_dir.parent / f"{out_dir.name}.log").write_text(proc.stdout + proc.stderr)
    summary = out_dir / "summary.json"
    rec = figures(summary) if summary.exists() else {"status": f"exit {proc.returncode}", "reason": proc.stderr[-800:]}
    rec["wall_s"] = round(time.perf_counter() - start, 1)
    return rec


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="a source tree holding workflow_scripts/")
    ap.add_argument("--out", required=True)
    ap.add_argument("--inputs", nargs="+", default=["synthetic", "dali"])
    ap.add_argument("--rounds", type=int, default=2, help="before, after: this many times")
    ap.add_argument("--first-round", type=int, default=1, help="the first round's number (a later call's)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=560, help="no run starts past this")
    ap.add_argument("--classes", type=int, default=0, help="the embedded dataset's classes (0: config.yaml's)")
    ap.add_argument("--train-per-class", type=int, default=0, help="its train images per class (0: config.yaml's)")
    ap.add_argument("--dry-run", action="store_true", help="check the arguments, print them and stop")
    ap.add_argument("--work", default="/tmp/dlscale-before-after", help="data and runs (kept for a later call)")
    a = ap.parse_args(argv)
    if a.dry_run:
        print(vars(a))
        return
    start = time.perf_counter()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    cfg = overlay(a.inputs, a.batch, a.steps, a.warmup)
    # A larger embedded set than the default's 480 images: DALI then starts an epoch every few batches
    # rather than every other one.
    embedded = {k: v for k, v in (("classes", a.classes), ("train_per_class", a.train_per_class)) if v}
    if embedded:
        cfg["dataset"] = {"embedded": embedded}
    (work / "gpu.yaml").write_text(yaml.safe_dump(cfg))
    proc, seconds = snakemake(work, "data/lmdb", timeout=300)  # nothing to do when a call before made it
    print(f"snakemake data/lmdb: exit {proc.returncode} in {seconds:.0f} s", flush=True)
    if proc.returncode:
        sys.exit(proc.stdout[-2000:] + proc.stderr[-2000:])
    commands = trainer_commands(work, timeout=120)
    trees = {"before": Path(a.before).resolve(), "after": REPO}
    record = {
        "inputs": a.inputs,
        "batch": a.batch,
        "steps": a.steps,
        "warmup": a.warmup,
        "commands": commands,
        "runs": [],
    }
    for n in range(a.first_round - 1, a.first_round - 1 + a.rounds):
        for name, tree in trees.items():
            for run, words in commands.items():
                if time.perf_counter() - start > a.budget_s:
                    print(f"{name} {run} round {n + 1}: skipped (budget)", flush=True)
                    continue
                rec = run_once(work, tree, run, words, work / "runs" / f"{name}{n + 1}_{run}", timeout=300)
                rec.update(tree=name, run=run, round=n + 1)
                record["runs"].append(rec)
                print(
                    f"{name:6s} {n + 1} {run:30s} {rec.get('images_per_s') or 0:9,.1f} img/s  "
                    f"CV {rec.get('cv') or 0:.1%}  {rec['status']}  {rec['wall_s']} s",
                    flush=True,
                )
    print(f"\n{'run':30s} {'tree':6s} {'mean images/s':>14s} {'min-max':>20s}  step CVs")
    for run in commands:
        for name in trees:
            got = [r for r in record["runs"] if r["run"] == run and r["tree"] == name and r.get("images_per_s")]
            if got:
                v = [r["images_per_s"] for r in got]
                print(
                    f"{run:30s} {name:6s} {statistics.mean(v):14,.1f} {min(v):9,.1f}-{max(v):<9,.1f}  "
                    + ", ".join(f"{r['cv']:.1%}" for r in got)
                )
    (out / "before_after.json").write_text(json.dumps(record, indent=1))
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
