"""The training half of the study as tables (seed 000 Fig. 2, 4-8; seed 002's scaling efficiency):

    python -m workflow_scripts.results.training_tables --points JSON [--interconnect JSON] --out-dir results

writes training_throughput, scaling, fp16_vs_fp32, system_comparison, input_paths,
storage_throughput and network_throughput (.csv and .md) from the sweep's run directories; with
the interconnect stage's all-reduces, scaling also holds what communication alone predicts
(interconnect/prediction.py).
"""

import argparse
import itertools
import json
from pathlib import Path

import pandas as pd

from ..common.errors import StageError, run_main
from ..interconnect import prediction
from . import runs as run_records
from .output import write_table
from .telemetry_tables import TELEMETRY_SHOWN, telemetry

KEY = ["system", "framework", "precision", "input"]
PREDICTION = (
    "Beside the measured efficiency (= t1 / t_N, step times at the same batch per GPU), what the "
    "interconnect alone predicts: allreduce_s = one all-reduce of the run's gradient_bytes at N GPUs on "
    "its system (the interconnect stage's medians, interpolated in log-log between the measured sizes "
    "around it; gradient_bytes from the run's summary, else ResNet-50's 25,557,032 parameters x 4 B, 2 B "
    "for MXNet fp16 and PyTorch's bf16 gradient compression); efficiency_no_overlap = t1 / (t1 + "
    "allreduce_s), the all-reduce after the backward pass; efficiency_full_overlap = t1 / max(t1, "
    "allreduce_s), the all-reduce hidden behind it; t1 = baseline_step_s (1 GPU). A run between the bounds "
    "loses what its communication costs; one below the no-overlap bound loses time elsewhere too."
)
RUN_COLUMNS = [
    "system",
    "framework",
    "precision",
    "input",
    "nodes",
    "gpus",
    "batch_per_gpu",
    "global_batch",
    "images_per_s",
    "step_cv",
    "stable",
    "mode",
    "warmup_steps",
    "timed_steps",
    "epochs",
    "data_source",
    "image_size",
    "status",
    "why",
    *run_records.PROVENANCE,
    "run_dir",
]


# What each table's markdown copy shows; the CSV has every column (output.write_table).
THROUGHPUT_SHOWN = KEY + ["gpus", "images_per_s", "step_cv", "stable", "status"]


def throughput(runs):
    return runs.reindex(columns=RUN_COLUMNS).sort_values(KEY + ["gpus"], kind="stable")


SCALING_COLUMNS = KEY + [
    "gpus",
    "nodes",
    "scope",
    "images_per_s",
    "baseline_gpus",
    "baseline_images_per_s",
    "ideal_images_per_s",
    "speedup",
    "efficiency",
    "step_s",
    "baseline_step_s",
    "gradient_bytes",
    "gradient_bytes_from",
    "allreduce_s",
    "efficiency_no_overlap",
    "efficiency_full_overlap",
    "communication_bound",
]
SCALING_SHOWN = KEY + [
    "gpus",
    "scope",
    "images_per_s",
    "speedup",
    "efficiency",
    "efficiency_no_overlap",
    "efficiency_full_overlap",
]


def _prediction(r, base, allreduce):
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
    cols = {
        "allreduce_s": t_ar,
        "efficiency_no_overlap": no,
        "efficiency_full_overlap": full,
        "communication_bound": label,
    }
    return cols, (
        f"{name}: one all-reduce of {r.gradient_bytes / 1e6:.1f} MB takes {t_ar * 1e3:.1f} ms against a "
        f"1-GPU step of {t1 * 1e3:.1f} ms; {sentence}."
    )


def scaling(runs, allreduce=None):
    """Speedup and efficiency against the smallest GPU count of each (system, framework,
    precision), as seed 002 computes it: efficiency = measured / (baseline images/s x N / baseline N);
    intra-node while the run fits one node, inter-node beyond. With the interconnect stage's
    all-reduces (allreduce: {(system, gpus): [(bytes, median s)]}) also the efficiency communication
    alone predicts, with no and with full overlap; returns (table, one sentence per run of N > 1)."""
    allreduce = allreduce or {}
    rows, sentences = [], []
    for key, g in runs[runs.status == "ok"].groupby(KEY):
        g = g.sort_values("gpus")
        base = g.iloc[0]
        for r in g.itertuples():
            ideal = base.images_per_s * r.gpus / base.gpus
            row = {
                **dict(zip(KEY, key)),
                "gpus": r.gpus,
                "nodes": r.nodes,
                "scope": "intra-node" if r.nodes == 1 else "inter-node",
                "images_per_s": r.images_per_s,
                "baseline_gpus": base.gpus,
                "baseline_images_per_s": base.images_per_s,
                "ideal_images_per_s": ideal,
                "speedup": r.images_per_s / base.images_per_s,
                "efficiency": r.images_per_s / ideal,
                "step_s": r.global_batch / r.images_per_s,
                "baseline_step_s": base.global_batch / base.images_per_s,
                "gradient_bytes": r.gradient_bytes,
                "gradient_bytes_from": r.gradient_bytes_from,
            }
            if r.gpus > 1:
                cols, sentence = _prediction(r, base, allreduce)
                row.update(cols)
                sentences.append(sentence)
            rows.append(row)
    return pd.DataFrame(rows, columns=SCALING_COLUMNS), sentences


def load_allreduce(points):
    """points: [{system, gpus, raw}] -> {(system, gpus): [(bytes, median s)]} from the stage's raw JSON."""
    out = {}
    for p in points:
        try:
            raw = json.loads(Path(p["raw"]).read_text())
        except (OSError, ValueError) as exc:
            raise StageError(f"{p['raw']}: the interconnect stage's output cannot be read ({exc})")
        out[(p["system"], int(p["gpus"]))] = prediction.allreduce_points(raw)
    return out


def fp16_vs_fp32(runs):
    ok = runs[runs.status == "ok"]
    wide = ok.pivot_table(index=["system", "framework", "input", "gpus"], columns="precision", values="images_per_s")
    if not {"fp32", "fp16"} <= set(wide.columns):
        return pd.DataFrame(
            columns=[
                "system",
                "framework",
                "input",
                "gpus",
                "fp32_images_per_s",
                "fp16_images_per_s",
                "fp16_gain_percent",
            ]
        )
    wide = wide.dropna(subset=["fp32", "fp16"]).reset_index()
    return pd.DataFrame(
        {
            "system": wide.system,
            "framework": wide.framework,
            "input": wide.input,
            "gpus": wide.gpus,
            "fp32_images_per_s": wide.fp32,
            "fp16_images_per_s": wide.fp16,
            "fp16_gain_percent": (wide.fp16 / wide.fp32 - 1) * 100,
        }
    )


def system_comparison(runs):
    """Every pair of systems, point by point (the study's SXM2 vs PCIe, V100 vs P100)."""
    point_key = ["framework", "precision", "input", "gpus"]
    ok = runs[runs.status == "ok"].set_index(["system", *point_key]).images_per_s
    rows = []
    for a, b in itertools.combinations(sorted(ok.index.get_level_values("system").unique()), 2):
        left, right = ok.xs(a, level="system"), ok.xs(b, level="system")
        for point in sorted(set(left.index) & set(right.index)):
            rows.append(
                {
                    "system_a": a,
                    "system_b": b,
                    **dict(zip(point_key, point)),
                    "a_images_per_s": left[point],
                    "b_images_per_s": right[point],
                    "a_over_b_percent": (left[point] / right[point] - 1) * 100,
                }
            )
    return pd.DataFrame(
        rows, columns=["system_a", "system_b", *point_key, "a_images_per_s", "b_images_per_s", "a_over_b_percent"]
    )


INPUT_PATHS_SHOWN = [
    "system",
    "framework",
    "precision",
    "gpus",
    "input",
    "images_per_s",
    "step_cv",
    "stable",
    "of_synthetic_percent",
]


def input_paths(runs):
    """Each input path against synthetic data (compute without I/O), point by point: the study's
    finding that the data path decides throughput as much as the GPU."""
    ok = runs[runs.status == "ok"]
    point = ["system", "framework", "precision", "gpus"]
    synthetic = ok[ok.input == "synthetic"].set_index(point).images_per_s
    rows = []
    for r in ok.sort_values(point + ["input"]).itertuples():
        ref = synthetic.get(tuple(getattr(r, k) for k in point))
        rows.append(
            {
                **{k: getattr(r, k) for k in point},
                "input": r.input,
                "images_per_s": r.images_per_s,
                "step_cv": r.step_cv,
                "stable": r.stable,
                "synthetic_images_per_s": ref,
                "of_synthetic_percent": r.images_per_s / ref * 100 if ref else None,
            }
        )
    return pd.DataFrame(
        rows,
        columns=point
        + ["input", "images_per_s", "step_cv", "stable", "synthetic_images_per_s", "of_synthetic_percent"],
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", required=True, help="JSON list of {system, framework, precision, gpus, nodes, run_dir}")
    ap.add_argument(
        "--interconnect",
        default="[]",
        help="JSON list of {system, gpus, raw}: the interconnect stage's all-reduces (scaling's prediction)",
    )
    ap.add_argument("--out-dir", required=True)
    a = ap.parse_args()
    runs = run_records.load(json.loads(a.points))
    scaled, sentences = scaling(runs, load_allreduce(json.loads(a.interconnect)))
    out = Path(a.out_dir)
    notes = run_records.mixed_settings(runs)
    bad = runs[runs.status != "ok"]
    notes += [f"{r.system}/{Path(r.run_dir).name} {r.status}: {r.why}" for r in bad.itertuples()]
    timing = (
        "images/s = images processed in the timed steps / their wall time, warm-up steps excluded; "
        "step_cv = coefficient of variation of the per-step images/s (stable: <= 2%, the study's criterion)."
    )
    write_table(
        throughput(runs),
        out / "training_throughput.csv",
        "Training throughput, one row per run",
        timing + " Failed or missing runs are listed with why.",
        notes,
        columns=THROUGHPUT_SHOWN,
    )
    write_table(
        scaled,
        out / "scaling.csv",
        "Scaling: speedup and efficiency (Fig. 2)",
        "speedup = images/s at N GPUs / images/s at the baseline (the smallest GPU count run; the study's "
        "is 1 GPU); efficiency = measured / ideal, ideal = baseline images/s x N / baseline GPUs (seed 002). "
        "intra-node: the run fits one node; inter-node: it spans nodes. " + timing + " " + PREDICTION,
        notes,
        after=["## What the interconnect predicts, run by run", "", *(f"- {x}" for x in sentences)]
        if sentences
        else (),
        columns=SCALING_SHOWN,
    )
    write_table(
        fp16_vs_fp32(runs),
        out / "fp16_vs_fp32.csv",
        "FP16 vs FP32 (Fig. 5)",
        "fp16_gain_percent = (FP16 images/s / FP32 images/s - 1) x 100, same system, framework and GPUs. "
        "FP16 = mixed precision (bfloat16 on a CPU). " + timing,
        notes
        + (
            []
            if {"fp16", "fp32"} <= set(runs.precision)
            else ["this sweep has no FP16/FP32 pair: add both to training.precisions"]
        ),
    )
    write_table(
        system_comparison(runs),
        out / "system_comparison.csv",
        "System vs system (Fig. 4, Fig. 6)",
        "a_over_b_percent = (images/s on system a / images/s on system b - 1) x 100, same framework, "
        "precision and GPUs. " + timing,
        notes
        + (
            []
            if runs.system.nunique() > 1
            else ["this sweep has one system: list two in training.systems to compare them"]
        ),
    )
    write_table(
        input_paths(runs),
        out / "input_paths.csv",
        "Input paths vs synthetic data",
        "Per point, images/s of each input path (training.inputs) and as a share of the same point's "
        "synthetic run (random tensors on the device: the step without I/O). cpu: decoding on the CPU "
        "(TensorFlow tf.data, MXNet ImageRecordIter, PyTorch Pillow workers); gpu: PyTorch nvJPEG in a "
        "thread; dali: PyTorch NVIDIA DALI (hardware JPEG engine). " + timing,
        notes
        + (
            []
            if runs.input.nunique() > 1
            else ["this sweep has one input path: list several in training.inputs, e.g. [auto, cpu, gpu, synthetic]"]
        ),
        columns=INPUT_PATHS_SHOWN,
    )
    write_table(
        telemetry(runs, ["read_MBps"]),
        out / "storage_throughput.csv",
        "Storage read throughput (Fig. 7)",
        "Per run and node: read MB/s of the dataset's block device or NFS mount, sampled every "
        "training.telemetry_interval s over the whole run (warm-up included); total_MB integrates it.",
        notes,
        columns=TELEMETRY_SHOWN,
    )
    write_table(
        telemetry(runs, ["send_MBps", "recv_MBps"]),
        out / "network_throughput.csv",
        "Network send/receive throughput (Fig. 8)",
        "Per run, node and interface (InfiniBand ports as ib:<hca>/<port>): MB/s sent and received, "
        "sampled every training.telemetry_interval s over the whole run; total_MB integrates it.",
        notes,
        columns=TELEMETRY_SHOWN,
    )


if __name__ == "__main__":
    run_main(main)
