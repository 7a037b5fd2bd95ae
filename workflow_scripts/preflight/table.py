"""results/preflight.csv and .md: one row per check per system x framework and geometry.

python -m workflow_scripts.preflight.table --results R1.json ... --out results/preflight.csv

write_stopped() writes the data checks' table again where the workflow stopped before it could
(Snakefile, onerror).
"""

import argparse
import json
import subprocess
from pathlib import Path

from ..common import input_bound
from ..common.output import write_table
from . import input_rows
from .check_rows import FAILED

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


STOPPED = (
    "Written as the workflow stopped on a failed check, before this table could be made the usual way "
    "(it waits for every pair's input check, and each waits for its pair's data gate)."
)
DROPPED = (
    "No input_capacity rows for {pairs}: its data check failed, and what its input check measured was read "
    "from that data before."
)


def _failed(result):
    try:
        return any(r["status"] == FAILED for r in json.loads(Path(result).read_text())["rows"])
    except (OSError, ValueError, KeyError, TypeError):
        return True  # unreadable: nothing measured from it is shown


def measured_on_damaged_data(result):
    """Whether `result` is an input check's whose pair's data check (beside it) failed since."""
    data = Path(str(result).replace(".input.json", ".data.json"))
    return str(result).endswith(".input.json") and data.exists() and _failed(data)


def refresh_words(data_results, input_results, out):
    """(the results to show, those of them the table showed already) where the data checks' table
    `out` is out of date once the workflow stopped, else None. A data check that runs again and
    fails stops the workflow at its pair's gate; the table, which waits for every pair's data and
    input checks, is then not written where another is still to run, and would keep the rows of the
    checks before, the failed one's "ok" among them."""
    data = [Path(r) for r in data_results if Path(r).exists()]
    table = Path(out)
    written = table.stat().st_mtime if table.exists() else None
    if not data or (written is not None and max(r.stat().st_mtime for r in data) <= written):
        return None
    shown = [*map(str, data), *(str(r) for r in input_results if Path(r).exists())]
    earlier = [str(r) for r in data if written is not None and r.stat().st_mtime <= written]
    return shown, earlier


def write_stopped(data_results, input_results, out, command):
    """Where refresh_words says so, `command` (this module's, with the judgement's words) writes the
    data checks' table `out`; the lines that say so (none where it is not out of date)."""
    found = refresh_words(data_results, input_results, out)
    if not found:
        return []
    shown, earlier = found
    words = [*command, "--stopped", *earlier, "--out", str(out), "--results", *shown]
    proc = subprocess.run(words, capture_output=True, text=True)
    if proc.returncode:
        return [f"preflight: {out} could not be written again ({proc.stderr.strip()[-300:]}): it is out of date"]
    return [f"preflight: {out} written again as the workflow stopped, from the data checks' results"]


def _notes(df, a, dropped, earlier):
    failed, notes = int((df["status"] == "failed").sum()), []
    if failed:
        notes.append(
            f"{failed} check(s) failed: the training and interconnect jobs of those system x framework pairs will "
            f"not start."
        )
    if a.stopped is not None:
        notes.append(
            STOPPED
            + (f" The rows of {', '.join(earlier)} are from their last check, before this run." if earlier else "")
        )
    if dropped:
        notes.append(DROPPED.format(pairs=", ".join(dropped)))
    bound = df[(df["check"] == input_rows.CHECK) & df["cause"].astype(str).str.startswith("input-bound")]
    if len(bound):
        notes.append(
            f"{len(bound)} input path(s) and precision(s) did not keep up with the GPUs at some GPU counts "
            "(input_capacity): those runs still start, each is judged again against the sweep's synthetic runs of its "
            "point, and those that fall short carry the caveat input-bound (the rows say where)."
        )
    return notes


def main():
    import pandas as pd  # here, not above: the workflow's own process imports write_stopped

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", nargs="*", default=[])
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--stopped",
        nargs="*",
        metavar="EARLIER",
        help="written as the workflow stopped (write_stopped), after the data checks' results EARLIER (none: all ran)",
    )
    input_bound.add_judge_arguments(ap)
    a = ap.parse_args()
    records, dropped, earlier = [], [], []
    for path in a.results:
        res = json.loads(Path(path).read_text())
        pair = f"{res['system']} x {res['framework']}"
        if measured_on_damaged_data(path):
            dropped.append(pair)
            continue
        earlier += [pair] if a.stopped and path in a.stopped else []
        for r in res["rows"] + input_rows.rows(res, a.input_tolerance, a.input_bound_expected):
            records.append({**{k: res[k] for k in ("system", "framework", "nodes", "tasks")}, **r})
    df = pd.DataFrame(records, columns=COLUMNS)
    write_table(df, a.out, "Preflight", HOW, _notes(df, a, dropped, earlier))


if __name__ == "__main__":
    main()
