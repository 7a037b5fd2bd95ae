"""MXNet's CPU runs with oneDNN off and on, alternated: the workflow's own job of a sweep run
(`snakemake --forcerun train <its summary.json>`), first with MXNET_MKLDNN_ENABLED=0, then with it
unset (MXNet's default: on), for --rounds rounds, so that a slow spell of the machine falls on
both. Prints each run's images/s, step CV, whether oneDNN ran (the summary's `onednn`) and its
status and isolation, then per setting and run the mean images/s and spread (min-max) of the
runs that passed and had their node to themselves, and how many did not.
Run it where `snakemake all` has run (the data converted, preflight passed).

    .venv/bin/python benchmarks/mxnet_onednn.py --runs local/mxnet_fp32_1gpu local/mxnet_fp32_2gpu --rounds 3
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SETTINGS = {"off": {"MXNET_MKLDNN_ENABLED": "0"}, "on": {}}


def run_once(run, setting, results):
    summary = Path(results) / "runs" / run / "summary.json"
    env = {k: v for k, v in os.environ.items() if k != "MXNET_MKLDNN_ENABLED"}
    proc = subprocess.run(
        [str(REPO / ".venv" / "bin" / "snakemake"), "--forcerun", "train", "--", str(summary)],
        cwd=REPO,
        env={**env, **SETTINGS[setting]},
        capture_output=True,
        text=True,
    )
    try:
        s = json.loads(summary.read_text())
    except (OSError, ValueError):
        return {"run": run, "setting": setting, "status": f"snakemake exited {proc.returncode}", "images_per_s": None}
    return {
        "run": run,
        "setting": setting,
        "status": s.get("status") if proc.returncode == 0 else f"{s.get('status')}, snakemake exited {proc.returncode}",
        "images_per_s": s.get("images_per_s"),
        "step_cv": s.get("step_images_per_s_cv"),
        "onednn": s.get("onednn"),
        "isolated": (s.get("isolation") or {}).get("isolated"),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--runs",
        nargs="+",
        default=["local/mxnet_fp32_1gpu", "local/mxnet_fp32_2gpu"],
        help="sweep runs as <system>/<run directory>",
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--results", default="results", help="the config's results_dir")
    ap.add_argument("--dry-run", action="store_true", help="check the arguments, print them and stop")
    a = ap.parse_args(argv)
    if a.dry_run:
        print(vars(a))
        return
    rows = []
    for rnd in range(1, a.rounds + 1):
        for setting in SETTINGS:
            for run in a.runs:
                row = {"round": rnd, **run_once(run, setting, a.results)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    print("\nrun                          oneDNN  runs  failed or shared  images/s mean  min-max")
    for run in a.runs:
        for setting in SETTINGS:
            mine = [r for r in rows if r["run"] == run and r["setting"] == setting]
            # a run that shared its node with other work is shown in its row, not averaged here
            rates = [r["images_per_s"] for r in mine if r["status"] == "ok" and r["images_per_s"] and r["isolated"]]
            spread = f"{min(rates):.1f}-{max(rates):.1f}" if rates else "-"
            mean = f"{statistics.fmean(rates):.1f}" if rates else "-"
            print(f"{run:28s} {setting:6s} {len(mine):5d} {len(mine) - len(rates):17d}  {mean:>13s}  {spread}")


if __name__ == "__main__":
    sys.exit(main())
