"""The scaling model's error on every point it was tested on (issue 52): the table of
docs/interconnect.md ("Its own errors"), made from recorded figures alone, no GPU:

    .venv/bin/python -m benchmarks.model_errors

Our own GPU points come from the table of recorded inputs in docs/benchmarks.md's section "The
scaling model's errors (issue 52)", where each names the series it was measured in; the study on
paper's and the Brookhaven paper's from workflow_scripts/predict/paper_figures.yaml; the
embedded default's from the tables the tests keep (tests/data/conclusions_tables/). Each point is
set against the interval it was predicted with and, where another point of its workload can give
the overlap, against its leave-one-out prediction; outside the interval it is a miss.
"""

import argparse
import csv
import re
from pathlib import Path

from workflow_scripts.predict import brookhaven_busbw as bb
from workflow_scripts.predict import step_model as sm
from workflow_scripts.predict import study_on_paper as sop

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "benchmarks.md"
EMBEDDED = REPO / "tests" / "data" / "conclusions_tables" / "scaling_prediction.csv"
SECTION = "## The scaling model's errors (issue 52)"
AFTER_BACKWARD = "after the backward pass"
HEADER = ["point", "measured", "predicted", "interval", "error", "hit or miss"]


def recorded_inputs(text):
    """The rows ({column: cell}) of the first table under SECTION in docs/benchmarks.md."""
    if SECTION not in text:
        raise SystemExit(f"docs/benchmarks.md has no section {SECTION!r}")
    lines = [ln for ln in text.split(SECTION, 1)[1].split("\n## ", 1)[0].splitlines() if ln.startswith("|")]
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    return [dict(zip(cells[0], row)) for row in cells[2:]]


def number(cell):
    return float(re.sub(r"[,*]", "", cell))


def _pct(v):
    return f"{v:.1%}"


def _row(point, measured, predicted, no, full, fmt=_pct):
    by = sm.miss(measured, no, full)
    side = "" if by is None else f"miss, {abs(by):.1%} {'below' if by < 0 else 'above'}"
    return [
        point,
        fmt(measured),
        fmt(predicted) if predicted is not None else "interval only",
        f"{fmt(no)} to {fmt(full)}",
        f"{predicted / measured - 1:+.1%}" if predicted is not None else "",
        side or "hit",
    ]


def gpu_rows(inputs):
    """Our own runs: nothing of their all-reduce hides (one compiled graph, all-reduced after the
    backward pass), so the interval is the no-overlap figure and so is the prediction."""
    out = []
    for r in inputs:
        if r["sent"] != AFTER_BACKWARD:
            raise SystemExit(f"{r['point']}: only runs sent {AFTER_BACKWARD!r} can be recomputed from these figures")
        n, t1 = int(r["GPUs"]), number(r["batch per GPU"]) / number(r["1-GPU images/s"])
        measured = number(r["images/s"]) / (n * number(r["1-GPU images/s"]))
        c = number(r["all-reduce ms"]) * 1e-3
        no, full = sm.bounds(t1, c, 0.0)
        out.append(_row(f"{r['point']}, {n} GPUs", measured, no, no, full))
    return out


def paper_rows(doc):
    """The scale-out whitepaper's two points (the only ones of the source documents with a 1-GPU
    figure): each predicted from the overlap the other leaves."""
    rows = [r for r in sop.rows(doc) if r["setup"] == "scaleout_c4140k" and r["measured_efficiency"] is not None]
    points = []
    for r in rows:
        t1 = r["batch_per_gpu"] / r["one_gpu_images_per_s"]
        hideable = r["allreduce_s"] + t1 - t1 / r["efficiency_full_overlap"]
        points.append(sm.MeasuredPoint(r["gpus"], r["allreduce_s"], hideable, r["measured_efficiency"]))
    loo = sm.leave_one_out(t1, points)
    return [
        _row(
            f"scale-out whitepaper, TensorFlow, {r['gpus']} GPUs on {r['nodes']} node(s)",
            x["measured_efficiency"],
            x["predicted_efficiency"],
            x["efficiency_no_overlap"],
            x["efficiency_full_overlap"],
        )
        for r, x in zip(rows, loo)
    ]


def brookhaven_rows(doc):
    """The Brookhaven paper's bus bandwidths against the model's on the links' stated speed: within
    a node the ring; across nodes one ring (NCCL's choice at 1 GiB on 2 nodes, by the model), NCCL's
    tree and Horovod's hierarchical all-reduce."""
    out = []
    for r in bb.brookhaven_rows(doc):
        measured = r["measured_busbw_GBps"]
        if not measured or r["model_busbw_ring_GBps"] is None:
            continue
        where = f"Brookhaven paper, {r['system']}, {r['gpus']} GPUs on {r['nodes']} node(s), busbw"
        shown = [("one ring", r["model_busbw_ring_GBps"])]
        if r["nodes"] > 1:
            shown += [
                ("NCCL's tree", r["model_busbw_tree_GBps"]),
                ("Horovod's hierarchical", r["model_busbw_hierarchical_GBps"]),
            ]
        for name, model in shown:
            said = f"{where}{f' ({name})' if r['nodes'] > 1 else ''}"
            out.append([said, f"{measured:g} GB/s", f"{model:.3g} GB/s", "", f"{model / measured - 1:+.1%}", ""])
    return out


def embedded_rows(path=EMBEDDED):
    """The embedded default's 2-process runs against the interval its stage recorded (a2bf8c4: the
    message plan before issue 52; the per-size interconnect table to recompute it is not kept)."""
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["gpus"] == "2" and r["measured_efficiency"]]
    return [
        _row(
            f"embedded default, {r['framework']} on 2 CPU processes (interval as recorded)",
            float(r["measured_efficiency"]),
            None,
            float(r["efficiency_no_overlap"]),
            float(r["efficiency_full_overlap"]),
        )
        for r in rows
    ]


def table(doc_text):
    doc = sop.load()
    rows = gpu_rows(recorded_inputs(doc_text)) + paper_rows(doc) + brookhaven_rows(doc) + embedded_rows()
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--doc", default=str(DOC), help="the page holding the recorded inputs (docs/benchmarks.md)")
    ap.add_argument("--dry-run", action="store_true", help="check the arguments, print them and stop")
    a = ap.parse_args(argv)
    if a.dry_run:
        print(f"would print the model's errors from {a.doc}")
        return
    print(table(Path(a.doc).read_text()))


if __name__ == "__main__":
    main()
