"""The training half of the study as tables (its Fig. 2, 4-8; the scale-out whitepaper's scaling
efficiency):

    python -m workflow_scripts.results.training_tables --points JSON [--interconnect JSON] --out-dir results

writes training_throughput, scaling, fp16_vs_fp32, system_comparison, input_paths,
storage_throughput and network_throughput (.csv and .md) from the sweep's run directories; with
the interconnect stage's all-reduces, scaling also holds what communication alone predicts
(interconnect/efficiency_bounds.py).

training_throughput has one row per run (each repeat of a point its own); the comparisons have
one row per point: the mean over its completed repeats with the lowest and highest beside it
(`_low`, `_high`: the interval a verdict uses), what each precision ran as, and the caveats of
results/guards.py with `vouched` (none of them), so that no figure the tool cannot vouch for
looks like one it can.
"""

import argparse
import json
from pathlib import Path

import pandas as pd

from ..common import input_bound
from ..common import written_without as waiting
from ..common.errors import StageError, run_main
from ..common.output import write_table
from ..interconnect import efficiency_bounds as prediction
from . import guards, input_marks
from . import runs as run_records
from . import training_outputs as names
from .point_tables import (
    FP16_SHOWN,
    GUARDS,
    INPUT_PATHS_SHOWN,
    KEY,
    SYSTEMS_SHOWN,
    fp16_vs_fp32,
    input_paths,
    labelled,
    point_label,
    points,
    ran_as_note,
    system_comparison,
    unvouched,
)
from .telemetry_tables import TELEMETRY_SHOWN, network_notes, storage_notes, telemetry

PREDICTION = (
    "Beside the measured efficiency (= t1 / t_N, step times at the same batch per GPU), what the "
    "interconnect alone predicts: allreduce_s = one all-reduce of the run's gradient_bytes at N GPUs on "
    "its system (the interconnect stage's medians, interpolated in log-log between the measured sizes "
    "around it; gradient_bytes from the run's summary, else ResNet-50's 25,557,032 parameters x 4 B, 2 B "
    "for MXNet fp16 and PyTorch's bf16 gradient compression); efficiency_no_overlap = t1 / (t1 + "
    "allreduce_s), the all-reduce after the backward pass; efficiency_full_overlap = t1 / (t1 + "
    "allreduce_s - min(b x t1, allreduce_s)), as much hidden as the backward pass (b = "
    "prediction.backward_share) can; t1 = baseline_step_s (1 GPU). A run between the bounds "
    "loses what its communication costs; one below the no-overlap bound loses time elsewhere too."
)
RUN_COLUMNS = [
    "system",
    "framework",
    "precision",
    "input",
    "nodes",
    "gpus",
    "repeat",
    *run_records.FIGURES,
    "mode",
    "warmup_steps",
    "timed_steps",
    "epochs",
    "data_source",
    "image_size",
    "status",
    "why",
    *run_records.EVIDENCE,
    *run_records.PROVENANCE,
    "run_dir",
]


# What each table's markdown copy shows; the CSV has every column (output.write_table).
THROUGHPUT_SHOWN = KEY + [
    "gpus",
    "repeat",
    "images_per_s",
    "step_cv",
    "window_cv",
    "stable",
    "isolated",
    "ran_as",
    "status",
]


def throughput(runs):
    columns = RUN_COLUMNS + run_records.figure_columns(runs)
    return runs.reindex(columns=columns).sort_values(KEY + ["gpus", "repeat"], kind="stable")


SCALING_COLUMNS = KEY + [
    "gpus",
    "nodes",
    "scope",
    "repeats",
    "images_per_s",
    "images_per_s_low",
    "images_per_s_high",
    "baseline_gpus",
    "baseline_images_per_s",
    "ideal_images_per_s",
    "speedup",
    "efficiency",
    "efficiency_low",
    "efficiency_high",
    "isolated",
    "ran_as",
    "execution_mode",
    "device",
    "vouched",
    "caveats",
    "step_s",
    "baseline_step_s",
    "gradient_bytes",
    "gradient_bytes_from",
    "allreduce_s",
    "efficiency_no_overlap",
    "efficiency_full_overlap",
    "communication_bound",
    "allreduce_library",
    "transport",
]
SCALING_SHOWN = KEY + [
    "gpus",
    "scope",
    "images_per_s",
    "speedup",
    "efficiency",
    "efficiency_no_overlap",
    "efficiency_full_overlap",
    "vouched",
]


def _prediction(r, base, allreduce, raws=None):
    """The interconnect's prediction for run r (a row of runs) against its baseline: (columns,
    sentence); no columns, and the sentence says why, where there is none."""
    name = f"{r.system}/{r.framework}_{r.precision}_{r.gpus}gpu"
    if base.gpus != 1:
        return {}, f"{name}: no prediction: the baseline is {base.gpus} GPUs, whose step already holds an all-reduce"
    points = allreduce.get((r.system, r.gpus))
    if points is None:
        return {}, (
            f"{name}: no prediction: the interconnect stage has no all-reduce at {r.gpus} GPUs on {r.system} "
            f"(interconnect.collectives)"
        )
    t_ar = prediction.interpolate(points, r.gradient_bytes)
    if t_ar is None:
        return {}, (
            f"{name}: no prediction: its {r.gradient_bytes:.0f} B of gradients lie outside the measured "
            f"{points[0][0]}-{points[-1][0]} B (interconnect.max_bytes)"
        )
    t1, tn = base.global_batch / base.images_per_s, r.global_batch / r.images_per_s
    no, full = prediction.bounds(t1, t_ar)
    label, sentence = prediction.verdict(t1 / tn, no, full)
    # The all-reduce was measured with torch.distributed: say so where the run used another library.
    library = prediction.library_note(r.nccl_version or None, r.framework, (raws or {}).get((r.system, r.gpus)))
    cols = {
        "allreduce_s": t_ar,
        "efficiency_no_overlap": no,
        "efficiency_full_overlap": full,
        "communication_bound": label,
        "allreduce_library": library or "the run's own",
    }
    return cols, (
        f"{name}: one all-reduce of {r.gradient_bytes / 1e6:.1f} MB takes {t_ar * 1e3:.1f} ms against a "
        f"1-GPU step of {t1 * 1e3:.1f} ms; {sentence}." + (f" Beware: {library}." if library else "")
    )


def scaling(runs, allreduce=None, raws=None):
    """Speedup and efficiency against the smallest GPU count of each (system, framework, precision),
    as the scale-out whitepaper computes it: efficiency = measured / (baseline images/s x N /
    baseline N); intra-node while the run fits one node, inter-node beyond. With the interconnect
    stage's all-reduces (allreduce: {(system, gpus): [(bytes, median s)]}) also the efficiency
    communication alone predicts, with no and with full overlap; returns (table, one sentence per
    run of N > 1)."""
    allreduce = allreduce or {}
    rows, sentences = [], []
    pts = points(runs)
    for key, g in pts.groupby(KEY) if len(pts) else ():
        g = g.sort_values("gpus")
        base = g.iloc[0]
        sweep = runs[(runs[KEY] == pd.Series(key, index=KEY)).all(axis=1)]
        moved = guards.baseline_moved(dict(zip(KEY, key)), base.gpus, int(sweep.gpus.min()))
        for r in g.itertuples():
            ideal = base.images_per_s * r.gpus / base.gpus
            per = r.gpus / base.gpus
            efficiency = r.images_per_s / ideal
            name = f"{r.system}/{r.framework}_{r.precision}_{r.gpus}gpu ({r.input})"
            caveats = guards.split(r.caveats) + (guards.split(base.caveats) if r.gpus != base.gpus else []) + moved
            mode, base_mode = getattr(r, "execution_mode", ""), getattr(base, "execution_mode", "")
            caveats += [
                c
                for c in [
                    guards.impossible(efficiency, name),
                    guards.mode_changed(base_mode, mode, name, base.gpus),
                    guards.device_changed(base.device, r.device, name, base.gpus),
                ]
                if c
            ]
            row = {
                **dict(zip(KEY, key)),
                "gpus": r.gpus,
                "nodes": r.nodes,
                "scope": "intra-node" if r.nodes == 1 else "inter-node",
                "repeats": r.repeats,
                "images_per_s": r.images_per_s,
                "images_per_s_low": r.images_per_s_low,
                "images_per_s_high": r.images_per_s_high,
                "baseline_gpus": base.gpus,
                "baseline_images_per_s": base.images_per_s,
                "ideal_images_per_s": ideal,
                "speedup": r.images_per_s / base.images_per_s,
                "efficiency": efficiency,
                # the interval over the repeats: the point's slowest run against the baseline's fastest, and back
                "efficiency_low": r.images_per_s_low / (base.images_per_s_high * per),
                "efficiency_high": r.images_per_s_high / (base.images_per_s_low * per),
                "isolated": guards.combine_isolated([r.isolated, base.isolated]),
                "ran_as": r.ran_as,
                "execution_mode": mode,
                "device": r.device,
                "vouched": not caveats,
                "caveats": guards.join(caveats),
                "transport": r.transport,
                "step_s": r.global_batch / r.images_per_s,
                "baseline_step_s": base.global_batch / base.images_per_s,
                "gradient_bytes": r.gradient_bytes,
                "gradient_bytes_from": r.gradient_bytes_from,
            }
            if r.gpus > 1:
                cols, sentence = _prediction(r, base, allreduce, raws)
                row.update(cols)
                sentences.append(sentence)
            rows.append(row)
    return pd.DataFrame(rows, columns=SCALING_COLUMNS), sentences


def load_raws(points):
    """points: [{system, gpus, raw}] -> {(system, gpus): the stage's raw JSON}."""
    out = {}
    for p in points:
        try:
            out[(p["system"], int(p["gpus"]))] = json.loads(Path(p["raw"]).read_text())
        except (OSError, ValueError) as exc:
            raise StageError(f"{p['raw']}: the interconnect stage's output cannot be read ({exc})")
    return out


def load_allreduce(points):
    """points: [{system, gpus, raw}] -> {(system, gpus): [(bytes, median s)]} from the stage's raw JSON."""
    return {k: prediction.allreduce_points(raw) for k, raw in load_raws(points).items()}


TIMING = (
    "images/s = images processed in the timed steps / their wall time, warm-up steps excluded; "
    "step_cv = coefficient of variation of the per-step images/s; window_cv = that of images/s over windows of "
    "10 timed steps, as the study's frameworks reported it (stable: window_cv <= 2%, the study's criterion; "
    "step_cv where a run has fewer than two windows). "
    "ran_as: what the precision ran as on the run's device (training.fp32_math)."
)
POINTS_HOW = (
    " One row per point: images/s is the mean over its completed runs (training.repeats), _low and _high "
    "in the CSV their slowest and fastest. " + GUARDS
)


def arg_parser():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", required=True, help="JSON list of {system, framework, precision, gpus, nodes, run_dir}")
    ap.add_argument(
        "--interconnect",
        default="[]",
        help="JSON list of {system, gpus, raw}: the interconnect stage's all-reduces (scaling's prediction)",
    )
    ap.add_argument(
        "--preflight",
        nargs="*",
        default=[],
        help="the preflight input checks' results (<N>gpu.input.json): their prediction marks the input-bound runs "
        "whose point has no completed synthetic run",
    )
    input_bound.add_judge_arguments(ap)
    waiting.add_argument(ap)
    ap.add_argument("--out-dir", required=True)
    return ap


def marked_runs(a):
    """The sweep's runs, the input-bound ones marked (results/input_marks.py)."""
    runs = run_records.load(json.loads(a.points))
    return input_marks.mark(runs, input_marks.load(a.preflight), a.input_tolerance, a.input_bound_expected)


def run_notes(runs):
    """Every table's notes: settings that differ between runs, and each run that failed, with why."""
    bad = runs[runs.status != "ok"]
    return run_records.mixed_settings(runs) + [
        f"{r.system}/{Path(r.run_dir).name} {r.status}: {r.why}" for r in bad.itertuples()
    ]


def write_throughput(runs, out, notes):
    table = throughput(runs)
    write_table(
        table,
        out / f"{names.THROUGHPUT}.csv",
        "Training throughput, one row per run",
        TIMING + " isolated: whether anything else used the run's nodes in its timed window (docs/training.md"
        "#isolation). input_bound: whether the run's input fell short of its GPUs (input_capacity: its images/s a "
        "node on real data, input_demand: on synthetic data), judged by its own images/s against the sweep's "
        "synthetic runs of its point where it has them, else as preflight's input check predicted "
        "(input_judged_by: measured or predicted); input_wait_share: the share of its timed steps it waited for its "
        "input, shown, not judged. Failed or missing runs are listed with why.",
        notes + input_marks.note(runs),
        columns=THROUGHPUT_SHOWN,
        after=unvouched(labelled(table[table.status == "ok"], guards.run_name), "runs"),
    )


def write_scaling(runs, raws, out, notes):
    scaled, sentences = scaling(runs, {k: prediction.allreduce_points(r) for k, r in raws.items()}, raws)
    predicted = ["## What the interconnect predicts, run by run", "", *(f"- {x}" for x in sentences)]
    write_table(
        scaled,
        out / f"{names.SCALING}.csv",
        "Scaling: speedup and efficiency (Fig. 2)",
        "speedup = images/s at N GPUs / images/s at the baseline (the smallest GPU count run; the study's "
        "is 1 GPU); efficiency = measured / ideal, ideal = baseline images/s x N / baseline GPUs (the "
        "scale-out whitepaper); efficiency_low/_high: the point's slowest run against the baseline's "
        "fastest, and back. intra-node: the run fits one node; inter-node: it spans nodes. "
        + TIMING
        + POINTS_HOW
        + " "
        + PREDICTION,
        notes,
        after=unvouched(labelled(scaled, point_label), "points") + (predicted if sentences else []),
        columns=SCALING_SHOWN,
    )


def write_comparison(table, path, title, how, notes, missing, columns, label, what):
    """One of the point comparisons: `missing`, where this sweep lacks what it compares, one more note."""
    notes = notes + ([missing] if missing else [])
    after = unvouched(labelled(table, label), what)
    write_table(table, path, title, how + TIMING + POINTS_HOW, notes, columns=columns, after=after)


def write_comparisons(runs, out, notes):
    """FP16 against FP32, system against system, each input path against synthetic data."""
    write_comparison(
        fp16_vs_fp32(runs),
        out / f"{names.FP16_VS_FP32}.csv",
        "FP16 vs FP32 (Fig. 5)",
        "fp16_gain_percent = (FP16 images/s / FP32 images/s - 1) x 100, same system, framework and GPUs. "
        "As they ran: " + (ran_as_note(runs) or "no completed run.") + " ",
        notes,
        ""
        if {"fp16", "fp32"} <= set(runs.precision)
        else "this sweep has no FP16/FP32 pair: add both to training.precisions",
        FP16_SHOWN,
        lambda r: f"{r.system}/{r.framework} {r.gpus} GPUs ({r.input})",
        "pairs",
    )
    write_comparison(
        system_comparison(runs),
        out / f"{names.SYSTEMS}.csv",
        "System vs system (Fig. 4, Fig. 6)",
        "a_over_b_percent = (images/s on system a / images/s on system b - 1) x 100, same framework, "
        "precision and GPUs. ",
        notes,
        "" if runs.system.nunique() > 1 else "this sweep has one system: list two in training.systems to compare them",
        SYSTEMS_SHOWN,
        lambda r: f"{r.system_a} vs {r.system_b}: {r.framework} {r.precision} {r.gpus} GPUs",
        "pairs",
    )
    write_comparison(
        input_paths(runs),
        out / f"{names.INPUT_PATHS}.csv",
        "Input paths vs synthetic data",
        "Per point, images/s of each input path (training.inputs) and as a share of the same point's "
        "synthetic run (random tensors on the device: the step without I/O). cpu: decoding on the CPU "
        "(TensorFlow tf.data, MXNet ImageRecordIter, PyTorch Pillow workers); gpu: PyTorch nvJPEG in a "
        "thread; dali: PyTorch NVIDIA DALI, decoding where training.pytorch.dali_decoder says (its CPU "
        "threads, or the hardware JPEG engine and nvJPEG). ",
        notes,
        ""
        if runs.input.nunique() > 1
        else "this sweep has one input path: list several in training.inputs, e.g. [auto, cpu, gpu, synthetic]",
        INPUT_PATHS_SHOWN,
        point_label,
        "points",
    )


def write_telemetry(runs, out, notes):
    """Storage and network throughput over each run, from its nodes' telemetry."""
    write_table(
        telemetry(runs, ["read_MBps"]),
        out / f"{names.STORAGE}.csv",
        "Storage read throughput (Fig. 7)",
        "Per run and node: read MB/s of the file system the dataset was read from, from its own counters "
        "(docs/training.md, telemetry.<node>.csv), sampled every training.telemetry_interval s over the whole run "
        "(warm-up included); total_MB integrates it.",
        notes + storage_notes(runs),
        columns=TELEMETRY_SHOWN,
    )
    write_table(
        telemetry(runs, ["send_MBps", "recv_MBps"]),
        out / f"{names.NETWORK}.csv",
        "Network send/receive throughput (Fig. 8)",
        "Per run, node and interface (InfiniBand ports as ib:<hca>/<port>): MB/s sent and received, "
        "sampled every training.telemetry_interval s over the whole run; total_MB integrates it.",
        notes + network_notes(runs),
        columns=TELEMETRY_SHOWN,
    )


def main():
    a = arg_parser().parse_args()
    runs = marked_runs(a)
    raws = load_raws(json.loads(a.interconnect))
    out, notes = Path(a.out_dir), run_notes(runs) + waiting.notes(a.waiting)
    write_throughput(runs, out, notes)
    write_scaling(runs, raws, out, notes)
    write_comparisons(runs, out, notes)
    write_telemetry(runs, out, notes)


if __name__ == "__main__":
    run_main(main)
