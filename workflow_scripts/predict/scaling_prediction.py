"""What the interconnect and the sweep predict for more GPUs than were run (docs/interconnect.md,
"Predicting past the largest machine measured"): the links fitted to the interconnect stage's
all-reduces, each step's messages as its library sends them, the overlap fitted to the sweep's runs
within what the backward pass can hide, one row per system x framework x precision x GPU count, each
measured point checked against the interval it was predicted with (a miss where it lies outside)
and by leave-one-out, and the model's own verdict on itself.

    python -m workflow_scripts.predict.scaling_prediction --interconnect results/interconnect.csv \\
        --points JSON --systems '{"local": 2}' --out results/scaling_prediction.csv \\
        --figure results/figures/scaling_prediction.png [--max-gpus 1024 --inter-node-busbw-GBps 12.5 ...]

--points are the sweep's runs as rules/results.smk gives them to the training tables ({system,
framework, precision, gpus, nodes, input, gpu_request, run_dir}); --systems each system's own GPUs
per node. The flags after them are config.yaml's prediction section (schemas/config.schema.yaml),
the rule passing every key (plan/prediction_args.py). Writes the CSV, its markdown copy beside it,
and the figure.
"""

import argparse
import json

import pandas as pd

from ..common import written_without as waiting
from ..common.errors import StageError, run_main
from ..common.output import write_table
from ..common.plotting import set_footer
from . import collective_model as cm
from . import step_model as sm
from .link_fit import (
    allreduces,
    extrapolated,
    held_out_link_errors,
    link_errors,
    links,
    quality,
    read_table,
)
from .prediction_figure import draw
from .prediction_settings import Settings, add_arguments
from .sweep_runs import run_record, workloads

TITLE = "Scaling prediction: what the interconnect and the sweep predict past the largest machine run"


# ---------------------------------------------------------------------------------------------
# The links


COLUMNS = [
    "system",
    "framework",
    "precision",
    "input",
    "device",
    "gpus",
    "nodes",
    "gpus_per_node",
    "measured",
    "gradient_bytes",
    "gradient_bytes_from",
    "bucket_bytes",
    "bucket_from",
    "allreduce_s",
    "one_gpu_images_per_s",
    "efficiency_no_overlap",
    "efficiency_predicted",
    "efficiency_full_overlap",
    "images_per_s_no_overlap",
    "images_per_s_predicted",
    "images_per_s_full_overlap",
    "overlap_fraction",
    "overlap_position",
    "measured_images_per_s",
    "measured_efficiency",
    "measured_within_interval",
    "measured_position",
    "loo_efficiency",
    "loo_rel_error",
    "model",
    "model_why",
    "intra_busbw_GBps",
    "intra_latency_us",
    "intra_from",
    "inter_busbw_GBps",
    "inter_latency_us",
    "inter_from",
    "topology",
    "algorithm",
    "note",
]
SHOWN = [
    "system",
    "framework",
    "precision",
    "input",
    "gpus",
    "nodes",
    "allreduce_s",
    "efficiency_no_overlap",
    "efficiency_predicted",
    "efficiency_full_overlap",
    "images_per_s_predicted",
    "measured_efficiency",
    "loo_rel_error",
    "model",
]
RENAME = {"efficiency_fitted": "efficiency_predicted", "images_per_s_fitted": "images_per_s_predicted"}


def measured_points(w, system):
    """The multi-GPU runs as the model sees them (sm.MeasuredPoint): the all-reduce it gives their
    GPU count on the system as timed, what of it can hide, their efficiency and messages."""
    out = []
    model = w.model
    for n in sorted(w.images_per_s):
        c = sm.allreduce_at(system, model, n) if n > 1 else None
        if c and w.t1:
            h = sm.hideable_at(system, model, n, c)
            out.append(sm.MeasuredPoint(n, c, h, w.efficiency(n), sm.messages_at(system, model, n)))
    return out


def misses(t1, every, unstable):
    """{GPU count: the sentence} of every measured point outside the interval its all-reduce gives
    (whatever the overlap: the interval does not depend on the point), with its size and by how
    much; an unstable point is said to be one."""
    out = {}
    for p in every:
        no, full = sm.bounds(t1, p.allreduce_s, p.hideable_s)
        by = sm.miss(p.efficiency, no, full)
        if by is not None:
            out[p.gpus] = sm.describe_miss(p, no, full, by) + (" (an unstable run)" if p.gpus in unstable else "")
    return out


def no_prediction_note(w, lk, nodes):
    """Why a row has no all-reduce, naming what would give it one."""
    if nodes > 1 and lk.target.inter is None:
        return (
            f"no link between nodes known ({lk.inter.how}): a training.gpus count above "
            f"systems.{w.system}.gpus_per_node times one, or set prediction.inter_node.busbw_GBps"
        )
    return (
        f"no link within a node known ({lk.intra.how}); a training.gpus count within one node times one, "
        f"or set prediction.intra_node.busbw_GBps"
    )


def link_columns(lk):
    t = lk.target
    intra, inter = t.intra, t.inter
    return {
        "intra_busbw_GBps": intra.busbw_GBps if intra else None,
        "intra_latency_us": intra.step_latency_s * 1e6 if intra else None,
        "intra_from": lk.intra_how,
        "inter_busbw_GBps": inter.busbw_GBps if inter else None,
        "inter_latency_us": inter.step_latency_s * 1e6 if inter else None,
        "inter_from": lk.inter_how,
        "topology": t.topology,
        "algorithm": t.inter_algorithm,
    }


def model_rows(w, lk, settings, overlap):
    """sm.predict's rows on the target system (every GPU count), with the measured figure beside
    them judged against the system as timed; all-reduce only where there is no 1-GPU step."""
    measured = dict(w.images_per_s)
    if w.t1:
        rows = [
            {RENAME.get(k, k): v for k, v in r.items()}
            for r in sm.predict(lk.target, w.model, settings.max_gpus, measured, overlap)
        ]
        as_timed = {r["gpus"]: r for r in sm.predict(lk.measured, w.model, settings.max_gpus, measured, overlap)}
        for r in rows:
            if r["measured_images_per_s"] is not None and r["gpus"] > 1:
                for k in ("measured_within_interval", "measured_position", "note"):
                    r[k] = as_timed[r["gpus"]][k]
        return rows
    rows = []
    for n in sorted(set(sm.powers_of_two(settings.max_gpus)) | set(measured)):
        g, m = lk.target.layout(n)
        rows.append(
            {
                "gpus": n,
                "nodes": m,
                "gpus_per_node": g,
                "allreduce_s": sm.allreduce_at(lk.target, w.model, n),
                "measured_images_per_s": measured.get(n),
                "note": "",
            }
        )
    return rows


def unvouched(w):
    """(the GPU counts the overlap is neither fitted to nor tested on, the sentence that says why):
    the unstable points, and every point above 1 GPU where the 1-GPU run, whose step every
    efficiency divides, is one. Such a figure can still show the model poor (a miss beyond the
    tolerance that its variation does not explain); it never shows the model good."""
    bad = w.unstable()
    if not bad:
        return set(), ""
    cvs = ", ".join(f"{n} GPU{'s' if n > 1 else ''} {cv:.1%}" for n, cv in bad.items())
    if 1 in bad:
        return set(w.images_per_s), (
            f"; the overlap is not fitted or tested: the 1-GPU run, every efficiency's baseline, is unstable (images/s "
            f"CV {cvs}, above 2%: docs/results.md#verdict-guards)"
        )
    return set(bad), (
        f"; the overlap is not fitted to or tested on the points whose images/s vary beyond 2% "
        f"(CV over 10-step windows {cvs}): figures the tool does not vouch for (docs/results.md#verdict-guards)"
    )


def workload_rows(w, lk, groups, settings):
    """Every row of one workload, and (label, why) of the model on it."""
    skip, skipped = unvouched(w)
    every = measured_points(w, lk.measured)
    points = [p for p in every if p.gpus not in skip]
    fit = sm.fit_overlap_points(w.t1, [(p.allreduce_s, p.hideable_s, p.efficiency) for p in points]) if w.t1 else None
    loo = {r["gpus"]: r for r in sm.leave_one_out(w.t1, points)} if w.t1 else {}
    held = held_out_link_errors(lk) + [
        (r["rel_error"], f"the efficiency at {n} GPUs from the overlap fitted at the others")
        for n, r in loo.items()
        if r["rel_error"] is not None
    ]
    missed = misses(w.t1, every, skip)
    label, why = quality(held, link_errors(w, lk, groups), settings.tolerance, list(missed.values()), lk.flags())
    why += skipped + extrapolated(groups, w.model.messages)
    if not w.t1:
        why = f"no 1-GPU run, so no efficiency to predict (training.gpus with 1); the all-reduce: {label}, {why}"
    rows = []
    for r in model_rows(w, lk, settings, fit.fraction if fit else None):
        n = r["gpus"]
        row = dict.fromkeys(COLUMNS)
        row.update(r)
        row.update(
            system=w.system,
            framework=w.framework,
            precision=w.precision,
            input=w.input,
            device=w.device,
            measured=n in w.images_per_s,
            gradient_bytes=w.gradient_bytes,
            gradient_bytes_from=w.gradient_bytes_from,
            bucket_bytes=w.bucket_bytes,
            bucket_from=w.bucket_from,
            one_gpu_images_per_s=w.one_gpu_images_per_s,
            overlap_position=fit.position if fit else None,
            model=label,
            model_why=why,
            **link_columns(lk),
        )
        if n in loo:
            row.update(loo_efficiency=loo[n]["predicted_efficiency"], loo_rel_error=loo[n]["rel_error"])
        if n in missed:
            row["note"] = f"a miss: {missed[n]}; {row['note']}"
        if row["allreduce_s"] is None and n > 1:
            row["note"] = no_prediction_note(w, lk, row["nodes"])
        row["note"] = "; ".join(filter(None, [row["note"], cm.uncosted(lk.target, row["nodes"])]))
        if label == "poor":  # bounds, not a figure
            row.update(efficiency_predicted=None, images_per_s_predicted=None)
        rows.append(row)
    return rows, (label, why)


def unpredicted(rows):
    """One note per system and reason for the GPU counts without an all-reduce."""
    spans = {}
    for r in rows:
        if r["allreduce_s"] is None and r["gpus"] > 1:
            spans.setdefault((r["system"], r["note"]), set()).add(r["gpus"])
    return [
        f"{system}, {min(n)}{f' to {max(n)}' if len(n) > 1 else ''} GPUs: no prediction: {note}"
        for (system, note), n in sorted(spans.items())
    ]


def build(table, points, systems, settings):
    """(the table, one sentence per workload, notes)."""
    records = [r for r in (run_record(p) for p in points) if r]
    rows, sentences, topologies = [], [], set()
    for w in workloads(records, settings):
        topologies.add(w.topology)
        groups = allreduces(table, w.system)
        lk = links(groups, systems.get(w.system, 1), settings, w.model.messages, w.topology)
        got, (label, why) = workload_rows(w, lk, groups, settings)
        rows += got
        sentences.append(f"- **{w.name}** ({w.input} input): model {label}: {why}.")
    notes = unpredicted(rows)
    if not records:
        notes.append("no completed run in the sweep: nothing to predict from")
    if any(r["device"] == "cpu" for r in records):
        notes.append(
            "CPU processes stand in for GPUs: these predict a CPU's Gloo over the host, not a GPU link "
            "(docs/glossary.md#cpu-stand-in)"
        )
    if "hierarchical" in topologies:
        notes += cm.hierarchical_notes(cm.Link(settings.host_copy_GBps) if settings.host_copy_GBps else None)
    if settings.overrides():
        notes.append(
            "prediction.* sets hardware that was not timed: the rows are that cluster's; the measured figures beside "
            "them, and whether they lie within their interval, are the system's as it ran"
        )
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df, sentences, notes


HOW = (
    "The all-reduce model of docs/interconnect.md (workflow_scripts/predict/collective_model.py, step_messages.py, "
    "step_model.py): the link within a node and the network between nodes fitted by least squares to the "
    "interconnect stage's all-reduces (interconnect.csv, its own rows, at five timed sizes at least around the "
    "messages a step sends; the residuals in intra_from, inter_from), or set under prediction.*; across nodes as "
    "the topology column says (nccl: NCCL's ring or tree, the faster). Each step's gradients go out as the library "
    "sends them (bucket_from: DDP's buckets, Horovod's fusion cycles; bucket_bytes the largest message). "
    "allreduce_s: one step's all-reduce at N GPUs. With t1 the 1-GPU step and h what can hide (only during the "
    "backward pass, prediction.backward_share x t1, never the last message, nothing after one compiled graph), "
    "efficiency_no_overlap = t1 / (t1 + allreduce_s), efficiency_full_overlap = t1 / (t1 + allreduce_s - h), and "
    "efficiency_predicted at the share of h fitted to the sweep's runs above 1 GPU (overlap_fraction); images/s = N "
    "x the 1-GPU images/s x efficiency. Where the sweep ran a point, its figure is beside the prediction "
    "(measured_*), with whether it lies within the interval (outside: a miss, named in note with its size) and "
    "loo_rel_error: the error of the prediction made without that point (leave-one-out). model says what the "
    "model's own errors allow: within tolerance, untested (nothing held out to test it on), or poor (a miss, a "
    "fitted latency no link can have, or off by more than prediction.tolerance where it could be checked): then "
    "the row gives the bounds and no predicted figure. One workload per input path; a run whose steps vary beyond "
    "2% is shown but neither fitted nor judged on (model_why names it), unless it misses."
)


# ---------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interconnect", required=True, help="the interconnect stage's table (interconnect.csv)")
    ap.add_argument("--points", required=True, help="JSON list of the sweep's runs {system, framework, ..., run_dir}")
    ap.add_argument("--systems", required=True, help="JSON {system: its GPUs per node}")
    ap.add_argument("--out", required=True, help="the CSV; the markdown copy goes beside it")
    ap.add_argument("--figure", required=True, help="the PNG")
    add_arguments(ap)
    waiting.add_argument(ap)
    a = ap.parse_args()
    set_footer(waiting.figure_line(a.waiting))
    try:
        points, systems = json.loads(a.points), json.loads(a.systems)
    except ValueError as exc:
        raise StageError(f"--points or --systems is not JSON: {exc}")
    df, sentences, notes = build(read_table(a.interconnect), points, systems, Settings.from_args(a))
    notes = waiting.notes(a.waiting) + notes
    write_table(df, a.out, TITLE, HOW, notes, columns=SHOWN, after=["## The model on each workload", "", *sentences])
    draw(df, a.figure, TITLE)
    print("\n".join(sentences))


if __name__ == "__main__":
    run_main(main)
