"""The interconnect stage as a table (the Brookhaven paper, section III):

    python -m workflow_scripts.interconnect.interconnect_table --points JSON --out results/interconnect.csv

one row per system x GPU count x collective x message size x source (torch.distributed, and
nccl-tests where configured), .csv and .md (headed by what was measured and how).
"""

import argparse
import json

import pandas as pd

from ..common import written_without as waiting
from ..common.errors import StageError, run_main
from ..common.output import write_table
from .bandwidth_rows import COLUMNS, load, rows

HOW = (
    "All-reduce (sum) and broadcast (root 0) of float32 messages from interconnect.min_bytes to "
    "interconnect.max_bytes in x2 steps, in place, between the processes of a run of N GPUs, started by the "
    "training stage's launcher with the same nodes, tasks and SLURM resources as the training run of N GPUs "
    "(torch.distributed: NCCL on GPUs, Gloo on the CPU). Per size interconnect.warmup calls are excluded, then "
    "interconnect.iterations calls are timed one by one, each after a barrier (CUDA events on a GPU, "
    "perf_counter around the blocking call on the CPU); a call's time is its slowest rank's. time_s is the "
    "median over the timed calls, min_s/max_s their spread. algbw = bytes / time_s; busbw = algbw x 2(n-1)/n "
    "for all-reduce, = algbw for broadcast (n ranks; NVIDIA nccl-tests' definitions, GB = 1e9 bytes), so "
    "busbw compares with a link's bandwidth. Rows of source nccl-tests are its all_reduce_perf / "
    "broadcast_perf with the same sizes, warm-up and iterations (-b -e -f 2 -w -n), in-place columns; their "
    "time is nccl-tests' mean per iteration, so they have no min/max. transport is what NCCL's own debug log "
    "says it used within and between nodes (results/interconnect/<system>/<N>gpu/nccl_logs/). Every call's time "
    "on every rank is in results/interconnect/<system>/<N>gpu/*.json."
)

# The markdown copy's columns; the CSV has all of rows.COLUMNS.
SHOWN = ["system", "gpus", "scope", "collective", "bytes", "source", "backend", "time_s", "algbw_GBps", "busbw_GBps"]


def build(points, still_waiting=()):
    """waiting: the points still waiting for their nodes (common/written_without.py), named in the notes."""
    table, notes = [], []
    for p in points:
        for source in ("torch", "nccl_tests"):
            if p.get(source):
                point = rows(load(p[source]), p["system"], p["gpus"])
                table += point
                if point and point[0]["transport"]:
                    notes.append(f"{p['system']}, {p['gpus']} GPUs, {point[0]['source']}: {point[0]['transport']}")
    if not points and not still_waiting:
        notes.append("training.gpus has no GPU count above 1: there is no exchange between GPUs to measure")
    elif not any(p.get("nccl_tests") for p in points):
        notes.append(
            "nccl-tests not run: set interconnect.nccl_tests to a build of NVIDIA nccl-tests to put its "
            "figures beside these"
        )
    notes = waiting.notes(list(still_waiting)) + notes
    df = pd.DataFrame(table, columns=COLUMNS)
    if (df.backend == "gloo").any():
        notes.append(
            "rows of backend gloo ran on the CPU: the processes exchange data through the host's "
            "loopback TCP, not a GPU link"
        )
    return df.sort_values(["system", "gpus", "collective", "source", "bytes"], kind="stable"), notes


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--points", required=True, help="JSON list of {system, gpus, torch: raw JSON, nccl_tests: raw JSON or empty}"
    )
    ap.add_argument("--out", required=True, help="the CSV (the markdown copy goes beside it)")
    waiting.add_argument(ap)
    a = ap.parse_args()
    try:
        points = json.loads(a.points)
    except ValueError as exc:
        raise StageError(f"--points is not JSON: {exc}")
    df, notes = build(points, a.waiting)
    write_table(
        df,
        a.out,
        "Interconnect: all-reduce and broadcast bandwidth by message size (the Brookhaven paper, Fig. 2)",
        HOW,
        notes,
        columns=SHOWN,
    )


if __name__ == "__main__":
    run_main(main)
