"""The interconnect table's rows from the stage's raw JSON (collectives.py, nccl_tests.py), in
plain Python so that it also runs on a bare GPU host next to the measurement:

    python3 -m workflow_scripts.interconnect.bandwidth_rows OUT/x.json [OUT/nccl_tests.json] [--csv OUT/x.csv]

prints the rows as a markdown table (and writes them as CSV). The pipeline's table
(interconnect/interconnect_table.py) is made of the same rows.
"""

import argparse
import csv
import json
import sys
from pathlib import Path

from ..cluster import nccl_log
from ..common.errors import StageError, run_main

COLUMNS = [
    "system",
    "gpus",
    "nodes",
    "scope",
    "collective",
    "bytes",
    "source",
    "backend",
    "transport",
    "device",
    "time_statistic",
    "time_s",
    "median_s",
    "min_s",
    "max_s",
    "algbw_GBps",
    "busbw_GBps",
    "warmup",
    "iterations",
    "rank_hosts",
]


def load(path):
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise StageError(f"{path}: not the interconnect stage's raw JSON ({exc})")
    if "results" not in raw or "source" not in raw:
        raise StageError(f"{path}: not the interconnect stage's raw JSON (no 'source' or 'results')")
    return raw


def rows(raw, system="", gpus=None):
    """One row per collective and size of one raw output."""
    ours = raw["source"] != "nccl-tests"
    statistic = (
        f"median of {raw['iterations']} calls (slowest rank each)"
        if ours
        else f"nccl-tests: mean of {raw['iterations']} iterations"
    )
    common = {
        "system": system,
        "gpus": gpus or raw["world_size"],
        "nodes": raw["num_nodes"],
        "scope": "intra-node" if raw["num_nodes"] == 1 else "inter-node",
        "source": raw["source"],
        "backend": raw["backend"],
        # what NCCL said it used (its debug log, merged into the raw JSON as "nccl"); Gloo says nothing
        "transport": nccl_log.describe(raw.get("nccl"), raw.get("nccl_env")) if raw["backend"] == "nccl" else "",
        "device": raw["device"],
        "time_statistic": statistic,
        "warmup": raw["warmup"],
        "iterations": raw["iterations"],
        "rank_hosts": " ".join(raw["rank_hosts"]),
    }
    out = []
    for r in raw["results"]:
        out.append(
            {
                **common,
                "collective": r["collective"],
                "bytes": r["bytes"],
                "time_s": r["median_s"] if ours else r["time_s"],
                "median_s": r.get("median_s"),
                "min_s": r.get("min_s"),
                "max_s": r.get("max_s"),
                "algbw_GBps": r["algbw_GBps"],
                "busbw_GBps": r["busbw_GBps"],
            }
        )
    return out


def _cell(v):
    if v is None:
        return ""
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def markdown(table, columns=COLUMNS):
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in columns) + " |" for r in table]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw", nargs="+", help="raw JSON of collectives.py and/or nccl_tests.py")
    ap.add_argument("--system", default="", help="the system's name for the rows")
    ap.add_argument("--csv", help="also write the rows here")
    a = ap.parse_args()
    table = [row for path in a.raw for row in rows(load(path), a.system)]
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, COLUMNS)
            w.writeheader()
            w.writerows(table)
    sys.stdout.write(markdown(table) + "\n")


if __name__ == "__main__":
    run_main(main)
