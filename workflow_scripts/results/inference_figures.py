"""The inference half of the study beside its published figures:

    python -m workflow_scripts.results.inference_figures --accuracy results/int8_accuracy.csv \
        --throughput results/int8_throughput.csv --out-dir results

fig9_int8_throughput.png (images/s by batch size, FP32 vs INT8, and the ratio) and
int8_vs_study.csv/.md (Table III: this run's top-1/top-5 beside the study's V100 TensorRT ones).
"""

import argparse
from pathlib import Path

import pandas as pd

from ..common.output import write_table
from ..common.plotting import empty_figure, plt, save_png
from . import stage_outputs as names
from .guards import int8_caveats
from .study_figures import STUDY_FIGURES


def fig9(throughput, path):
    title = "Fig. 9: ResNet-50 inference, INT8 vs FP32"
    if throughput.empty:
        return empty_figure(path, title, "no throughput measured")
    models = list(dict.fromkeys(throughput.model))
    fig, axes = plt.subplots(1, len(models), figsize=(7 * len(models), 4.5), squeeze=False)
    for ax, model in zip(axes[0], models):
        t = throughput[throughput.model == model].sort_values("batch_size")
        for p, style in (("fp32", "o-"), ("int8", "s-")):
            err = [t[f"{p}_images_per_s"] - t[f"{p}_worst"], t[f"{p}_best"] - t[f"{p}_images_per_s"]]
            ax.errorbar(t.batch_size, t[f"{p}_images_per_s"], yerr=err, fmt=style, capsize=3, label=p.upper())
        ax.set_xscale("log", base=2)
        ax.set(
            xlabel="batch size",
            ylabel="images/s (median; bars: fastest..slowest run)",
            title=f"{title}\n{model}, {t.engine.iloc[0]} on {t.device.iloc[0]}",
        )
        ratio = ax.twinx()
        ratio.plot(t.batch_size, t.int8_over_fp32, "k:", label="INT8/FP32")
        # A ratio the tool cannot vouch for (results/guards.py int8_caveats) is drawn hollow and named.
        doubts = {r.batch_size: int8_caveats(r) for r in t.itertuples()}
        ok = t.batch_size.map(lambda b: not doubts[b])
        ratio.plot(t.batch_size[ok], t.int8_over_fp32[ok], "ko", ms=4)
        ratio.plot(t.batch_size[~ok], t.int8_over_fp32[~ok], "ko", ms=4, mfc="none")
        named = [f"batch {b}: {c[0]}" + (f" (+{len(c) - 1} more)" if len(c) > 1 else "") for b, c in doubts.items()]
        named = [n for n, c in zip(named, doubts.values()) if c]
        if named:
            ax.set_xlabel("batch size\nhollow ratio, not vouched for: " + "; ".join(named)[:300], fontsize=7)
        ratio.axhline(3.7, color="grey", lw=0.8, ls="--")
        ratio.text(t.batch_size.iloc[-1], 3.75, "study, TensorRT on V100: ~3.7x at batch >= 64", fontsize=7, ha="right")
        ratio.set_ylabel("INT8 / FP32")
        ratio.set_ylim(0, max(4.0, t.int8_over_fp32.max() * 1.1))
        lines = ax.get_legend_handles_labels()
        extra = ratio.get_legend_handles_labels()
        ax.legend(lines[0] + extra[0], lines[1] + extra[1], fontsize=8, loc="lower right")
        ax.grid(alpha=0.3)
    save_png(fig, path)


# The markdown copy's columns (the differences first, the study's question); the CSV has them all.
BESIDE_STUDY_SHOWN = [
    "model",
    "engine",
    "diff_top1",
    "diff_top1_study",
    "diff_top5",
    "diff_top5_study",
    "fp32_top1",
    "fp32_top1_study",
    "int8_top1",
    "int8_top1_study",
]


def beside_study(accuracy):
    study = pd.DataFrame(STUDY_FIGURES["int8_accuracy"])
    study["diff_top1"] = study.fp32_top1 - study.int8_top1
    study["diff_top5"] = study.fp32_top5 - study.int8_top5
    cols = ["fp32_top1", "fp32_top5", "int8_top1", "int8_top5", "diff_top1", "diff_top5"]
    ours = accuracy[["model", "engine", "scored_images", *cols]]
    both = ours.merge(study[["model", *cols]], on="model", how="outer", suffixes=("", "_study"))
    return both[["model", "engine", "scored_images", *cols, *(f"{c}_study" for c in cols)]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accuracy", required=True)
    ap.add_argument("--throughput", required=True)
    ap.add_argument("--out-dir", required=True)
    a = ap.parse_args()
    out = Path(a.out_dir)
    fig9(pd.read_csv(a.throughput), out / "figures" / f"{names.FIG9}.png")
    write_table(
        beside_study(pd.read_csv(a.accuracy)),
        out / f"{names.INT8_VS_STUDY}.csv",
        "Table III: FP32 vs INT8 accuracy, this run beside the study",
        "Top-1 / top-5 in percent over the scored validation images (those not used for calibration); "
        "diff = FP32 - INT8 in percentage points. *_study: the study's published V100 TensorRT figures "
        "(ImageNet, pre-trained models; the paper prints ResNet-50's top-1 difference as 0.07). Rows "
        "with no figures of one side were not run here or not in the study.",
        floatfmt=".2f",
        columns=BESIDE_STUDY_SHOWN,
    )


if __name__ == "__main__":
    main()
