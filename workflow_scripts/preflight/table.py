"""results/preflight.csv and .md: one row per check per system x framework and geometry.

python -m workflow_scripts.preflight.table --results R1.json ... --out results/preflight.csv
"""

import argparse
import json
from pathlib import Path

import pandas as pd

from ..common import input_bound
from ..common.output import write_table
from . import input_rows

COLUMNS = ["system", "framework", "nodes", "tasks", "check", "status", "figure", "node", "cause", "fix"]
HOW = (
    "Each system x framework of the sweep, launched as its training runs are (launcher, interpreter or "
    "container, srun geometry, SLURM resources) on one node with all its tasks, and on two nodes where the sweep "
    "crosses nodes. Per task: the GPUs the framework sees, a tiny conv net's forward and backward per precision "
    "(seconds of the first call, JIT included), an all-reduce's sum and the time of one of ResNet-50's gradient "
    "size, CPUs and threads, telemetry sources, the transport NCCL's own log says it used; per node: page-cache "
    "clearing, the dataset against its manifest, its files readable (by a check job of its own once the dataset "
    "is converted: until then those rows say so), and whether each real-data input path keeps up with the "
    "GPUs at every GPU count of the sweep (input_capacity: the trainer on real data against the same trainer on "
    "synthetic data, back to back on the pair's first node; at other ranks a node estimated by the decode threads "
    "a rank gets, docs/preflight.md#the-input-check). Where several ranks measured a figure, its range over them."
)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", nargs="*", default=[])
    ap.add_argument("--out", required=True)
    input_bound.add_judge_arguments(ap)
    a = ap.parse_args()
    records = []
    for path in a.results:
        res = json.loads(Path(path).read_text())
        for r in res["rows"] + input_rows.rows(res, a.input_tolerance, a.input_bound_expected):
            records.append({**{k: res[k] for k in ("system", "framework", "nodes", "tasks")}, **r})
    df = pd.DataFrame(records, columns=COLUMNS)
    failed = int((df["status"] == "failed").sum())
    notes = (
        [
            f"{failed} check(s) failed: the training and interconnect jobs of those system x framework pairs will "
            f"not start."
        ]
        if failed
        else []
    )
    bound = df[(df["check"] == input_rows.CHECK) & df["cause"].astype(str).str.startswith("input-bound")]
    if len(bound):
        notes.append(
            f"{len(bound)} input path(s) and precision(s) did not keep up with the GPUs at some GPU counts "
            "(input_capacity): those runs still start, each is judged again against the sweep's synthetic runs of its "
            "point, and those that fall short carry the caveat input-bound (the rows say where)."
        )
    write_table(df, a.out, "Preflight", HOW, notes)


if __name__ == "__main__":
    main()
