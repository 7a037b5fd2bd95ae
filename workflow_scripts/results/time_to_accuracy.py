"""The scale-out whitepaper's long test as a table (its Fig. 35-40 as numbers): one row per
long-test run.

    python -m workflow_scripts.results.time_to_accuracy --points JSON --out results/time_to_accuracy.csv

writes time_to_accuracy.csv and .md from the runs' summaries (mode accuracy, train/long_test.py's
LongTest). A run that failed, or has no output, is listed with why.
"""

import argparse
import json
from pathlib import Path

import pandas as pd

from ..common import written_without as waiting
from ..common.output import write_table
from . import guards
from . import runs as run_records

# What a long-test run's summary records, in the table as it is.
LONG_TEST_KEYS = [
    "target_top1",
    "reached",
    "epoch_reached",
    "time_to_target_s",
    "epochs_run",
    "epochs_planned",
    "final_top1",
    "final_top5",
    "best_top1",
    "train_s",
    "eval_s",
    "elapsed_s",
]
COLUMNS = [
    "system",
    "framework",
    "precision",
    "gpus",
    "nodes",
    "status",
    "why",
    "result",
    *LONG_TEST_KEYS,
    "train_images_per_s",
    "jobs",
    "resumed_at",
    "val_images",
    "batch_per_gpu",
    "global_batch",
    "lr",
    "warmup_epochs",
    "milestones",
    "decay",
    "eval_every",
    "image_size",
    *run_records.EVIDENCE,
    *run_records.PROVENANCE,
    "run_dir",
]
SHOWN = [
    "system",
    "framework",
    "precision",
    "gpus",
    "status",
    "reached",
    "epoch_reached",
    "time_to_target_s",
    "final_top1",
    "final_top5",
    "train_images_per_s",
    "isolated",
]  # the markdown copy's; the CSV has COLUMNS

HOW = (
    "One row per long-test run (training.long_test). top-1 / top-5 in percent over the whole val split, each image "
    "scored exactly once (each rank its share, the counts summed), after every eval_every epochs and the last. "
    "time_to_target_s = wall time from the first training step to the end of the first evaluation with top-1 >= "
    "target_top1: training and evaluation, nothing excluded (no warm-up steps are left out, unlike the throughput "
    "tables), as time-to-train; empty where the target was not reached. train_s + eval_s = elapsed_s, the whole "
    "run (which stops at that evaluation). train_images_per_s = images trained / train_s. final_* = the last "
    "evaluation. lr = the schedule's starting rate (training.lr scaled to the global batch), multiplied by decay "
    "at each milestone epoch. isolated: whether anything else used the run's nodes while it ran "
    "(docs/training.md#isolation)."
)


def record(point):
    row, s = run_records.outcome(point)
    if s is None:
        return row
    lt, args = s.get("long_test"), s["args"]
    if lt is None:
        return {
            **row,
            "status": "invalid",
            "why": f"{point['run_dir']}/summary.json is not a long-test run (mode {args.get('mode')})",
        }
    sched = lt["schedule"]
    row = {
        **row,
        "nodes": s["num_nodes"],
        "result": lt["result"],
        **{k: lt[k] for k in (*LONG_TEST_KEYS, "val_images")},
        # over every epoch, those of earlier jobs of a resumed run too (their steps are not in this job's log)
        "train_images_per_s": lt["epochs_run"] * lt["steps_per_epoch"] * s["global_batch"] / lt["train_s"],
        "jobs": len(lt.get("jobs") or [None]),
        "resumed_at": " ".join(str(j["first_epoch"]) for j in lt.get("jobs", []) if j["first_epoch"] > 1),
        "batch_per_gpu": args["batch_per_gpu"],
        "global_batch": s["global_batch"],
        "lr": sched["lr"],
        "warmup_epochs": sched["warmup_epochs"],
        "milestones": " ".join(f"{m:g}" for m in sched["milestones"]),
        "decay": sched["decay"],
        "eval_every": sched["eval_every"],
        "image_size": args["image_size"],
        **run_records.provenance(s),
    }
    row.update(run_records.evidence(s))
    # No warm-up is excluded from the long test, so its step CV is no guard: only its isolation is.
    return {**row, "caveats": guards.join(c for c in guards.run_caveats(row) if not c.startswith("unstable"))}


def table(points):
    rows = pd.DataFrame([record(p) for p in points]).reindex(columns=COLUMNS + ["_args"])
    return rows.sort_values(["system", "framework", "precision", "gpus"], kind="stable")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", required=True, help="JSON list of {system, framework, precision, gpus, nodes, run_dir}")
    ap.add_argument("--out", required=True, help="the CSV; the markdown copy goes beside it (.md)")
    waiting.add_argument(ap)
    a = ap.parse_args()
    points = json.loads(a.points)
    rows = table(points)
    # a long test whose every point waits for its nodes is still one of this config
    none = [] if a.waiting else ["no long test in this config: set training.long_test.gpus"]
    notes = waiting.notes(a.waiting) + (run_records.mixed_settings(rows) if len(rows) else none)
    notes += [
        f"{r.system}/accuracy/{r.framework}_{r.precision}_{r.gpus}gpu {r.status}: {r.why}"
        for r in rows[rows.status != "ok"].itertuples()
    ]
    write_table(
        rows[COLUMNS],
        Path(a.out),
        "Time to accuracy: the scale-out whitepaper's long test (Fig. 35-40)",
        HOW,
        notes,
        columns=SHOWN,
    )


if __name__ == "__main__":
    main()
