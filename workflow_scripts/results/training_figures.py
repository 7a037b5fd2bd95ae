"""The training half of the study as figures (PNG), from the tables and the runs' telemetry:

    python -m workflow_scripts.results.training_figures --tables results --out-dir results/figures

fig2_scaling, fig4_6_system_comparison, fig5_fp16_vs_fp32, fig_input_paths, fig7_storage,
fig8_network. A figure
with nothing to show in this sweep says so, and what to add to the config.
"""

import argparse
import textwrap
from pathlib import Path

import pandas as pd

from ..common import written_without as waiting
from ..common.plotting import empty_figure, plt, save_png, set_footer
from . import training_outputs as names
from .point_tables import at
from .study_figures import STUDY_FIGURES
from .telemetry_tables import network_panel_note, storage_panel_note


def scaling(table, path):
    title = "Fig. 2: ResNet-50 training speedup"
    if table.empty:
        return empty_figure(path, title, "no completed runs")
    systems = sorted(table.system.unique())
    # A point the tool cannot vouch for (results/guards.py: its caveats in scaling.csv) is drawn hollow
    # and named: never hidden, never mistaken for a vouched one.
    vouched = table.vouched.astype(str) == "True" if "vouched" in table else pd.Series(True, index=table.index)
    fig, axes = plt.subplots(1, len(systems), figsize=(6 * len(systems), 4.5), squeeze=False)
    for ax, system in zip(axes[0], systems):
        t = table[table.system == system]
        for (fw, prec, inp), g in t.groupby(["framework", "precision", "input"]):
            (line,) = ax.plot(
                g.gpus, g.speedup, "-", label=f"{fw} {prec} {inp} (baseline {g.baseline_gpus.iloc[0]} GPU)"
            )
            ok = vouched[g.index]
            ax.plot(g.gpus[ok], g.speedup[ok], "o", color=line.get_color())
            ax.plot(g.gpus[~ok], g.speedup[~ok], "o", mfc="none", color=line.get_color())
            if "efficiency_low" in g:  # the interval over the repeats
                ax.vlines(
                    g.gpus,
                    g.efficiency_low * g.gpus / g.baseline_gpus,
                    g.efficiency_high * g.gpus / g.baseline_gpus,
                    color=line.get_color(),
                    lw=1,
                )
        if (~vouched[t.index]).any():
            ax.plot([], [], "o", mfc="none", color="grey", label="not vouched for (scaling.md lists why)")
        top = t.gpus.max()
        base = t.baseline_gpus.min()
        ax.plot([base, top], [1, top / base], "k--", lw=1, label="ideal")
        for p in STUDY_FIGURES["speedup"]:
            ax.plot(p["gpus"], p["speedup"], "x", ms=8, label=f"study V100-PCIe: {p['framework']} {p['precision']}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        cpu = "device" in t and t.device.astype(str).str.startswith("CPU").all()
        where = f"{system}: CPU processes stand in for GPUs" if cpu else system
        ax.set(title=f"{title} - {where}", xlabel="CPU processes" if cpu else "GPUs", ylabel="speedup over baseline")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    save_png(fig, path)


def _bars(ax, labels, series):
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(series.items()):
        ax.bar([x + i * width for x in range(len(labels))], values, width, label=name)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(labels))], labels, rotation=30, ha="right", fontsize=8)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)


def system_comparison(table, path):
    title = "Fig. 4 / Fig. 6: system vs system"
    if table.empty:
        return empty_figure(path, title, "this sweep runs on one system:\nlist two in training.systems to compare them")
    pairs = table.groupby(["system_a", "system_b"])
    fig, axes = plt.subplots(1, pairs.ngroups, figsize=(7 * pairs.ngroups, 4.5), squeeze=False)
    for ax, ((a, b), g) in zip(axes[0], pairs):
        labels = [f"{r.framework} {r.precision} {r.gpus}GPU" for r in g.itertuples()]
        _bars(ax, labels, {a: g.a_images_per_s.tolist(), b: g.b_images_per_s.tolist()})
        ax.set(title=f"{title}: {a} vs {b}", ylabel="images/s")
    save_png(fig, path)


def fp16_vs_fp32(table, path):
    title = "Fig. 5: FP16 vs FP32"
    if table.empty:
        return empty_figure(path, title, "this sweep has no FP16/FP32 pair:\nadd both to training.precisions")
    fig, ax = plt.subplots(figsize=(max(6, len(table) * 0.9), 4.5))
    labels = [f"{r.system} {r.framework} {r.gpus}GPU" for r in table.itertuples()]
    _bars(ax, labels, {"FP32": table.fp32_images_per_s.tolist(), "FP16": table.fp16_images_per_s.tolist()})
    gain = STUDY_FIGURES["fp16_gain_percent"]
    ax.set(title=f"{title} (study, V100: FP16 {gain['low']}-{gain['high']}% faster)", ylabel="images/s")
    for x, r in enumerate(table.itertuples()):
        ax.annotate(f"{r.fp16_gain_percent:+.0f}%", (x + 0.2, r.fp16_images_per_s), ha="center", fontsize=8)
    save_png(fig, path)


def input_paths(table, path):
    title = "Input paths vs synthetic data"
    if table.input.nunique() < 2:
        return empty_figure(
            path,
            title,
            "this sweep has one input path:\nlist several in training.inputs, e.g. [auto, cpu, gpu, synthetic]",
        )
    groups = table.groupby(["system", "precision"])
    fig, axes = plt.subplots(1, groups.ngroups, figsize=(7 * groups.ngroups, 4.5), squeeze=False)
    for ax, ((system, prec), g) in zip(axes[0], groups):
        points = g[["framework", "gpus"]].drop_duplicates().sort_values(["framework", "gpus"])
        labels = [f"{r.framework} {r.gpus}GPU" for r in points.itertuples()]
        series = {}
        for inp in sorted(g.input.unique(), key=lambda i: (i == "synthetic", i)):
            mine = g[g.input == inp].set_index(["framework", "gpus"]).images_per_s
            series[inp] = [mine.get((r.framework, r.gpus), 0) for r in points.itertuples()]
        _bars(ax, labels, series)
        ax.set(title=f"{title} - {system} {prec}", ylabel="images/s")
    save_png(fig, path)


def _series(runs, table, metrics, path, title, ylabel, note=None):
    """One panel per run: its first node (all nodes behave alike, as the study notes) and that
    node's busiest device. note(run_dir, node) -> text or None: what the panel's series does or
    does not show (node None: the run has no rows of these metrics); a panel without rows shows
    its text in place of a plot, so that a series never recorded is not drawn as zeros. Returns
    the figure drawn (None where there was nothing to draw)."""
    runs = runs[runs.status == "ok"]
    chosen = table[table.metric.isin(metrics)]
    notes = {r.run_dir: note(r.run_dir, None) for r in runs.itertuples()} if note and chosen.empty else {}
    if runs.empty or (chosen.empty and not any(notes.values())):
        return empty_figure(path, title, "no telemetry in these runs (training.telemetry_interval: 0?)")
    cols = min(3, len(runs))
    rows = -(-len(runs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.2 * rows), squeeze=False, sharey=True)
    for ax, r in zip(axes.flat, runs.itertuples()):
        label = f"{r.system}/{Path(r.run_dir).name}"
        ax.set_title(label, fontsize=9)
        mine = at(chosen, r, **({"repeat": getattr(r, "repeat", 1)} if "repeat" in chosen else {}))
        if mine.empty:
            text = notes.get(r.run_dir) or (note(r.run_dir, None) if note else None)
            if text:
                # Axis off, not ticks off: the panels share their y axis.
                ax.set_axis_off()
                ax.text(0.5, 0.5, textwrap.fill(text, 50), ha="center", va="center", fontsize=7, transform=ax.transAxes)
            continue
        node = sorted(mine.node.unique())[0]
        device = mine[mine.node == node].sort_values("total_MB").device.iloc[-1]
        series = pd.read_csv(Path(r.run_dir) / f"telemetry.{node}.csv")
        for metric in metrics:
            s = series[(series.metric == metric) & (series.device == device)]
            ax.plot(s.time_s, s.value, label=f"{node} {device} {metric}", lw=1)
        text = note(r.run_dir, node) if note else None
        if text:  # under the title, clear of the series
            ax.set_title(f"{label}\n{textwrap.fill(text, 70)}", fontsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes.flat[len(runs) :]:
        ax.set_axis_off()
    fig.suptitle(title)
    fig.supxlabel("seconds since the run started")
    fig.supylabel(ylabel)
    save_png(fig, path)
    return fig


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", required=True, help="directory of the training tables")
    ap.add_argument("--out-dir", required=True)
    waiting.add_argument(ap)
    a = ap.parse_args()
    set_footer(waiting.figure_line(a.waiting))
    t, out = Path(a.tables), Path(a.out_dir)

    def table(name):
        return pd.read_csv(t / f"{name}.csv")

    def png(name):
        return out / f"{name}.png"

    scaling(table(names.SCALING), png(names.FIG2))
    system_comparison(table(names.SYSTEMS), png(names.FIG4_6))
    fp16_vs_fp32(table(names.FP16_VS_FP32), png(names.FIG5))
    input_paths(table(names.INPUT_PATHS), png(names.FIG_INPUT_PATHS))
    runs = table(names.THROUGHPUT)
    _series(
        runs,
        table(names.STORAGE),
        ["read_MBps"],
        png(names.FIG7),
        "Fig. 7: storage read throughput during training",
        "read MB/s",
        storage_panel_note,
    )
    _series(
        runs,
        table(names.NETWORK),
        ["send_MBps", "recv_MBps"],
        png(names.FIG8),
        "Fig. 8: network throughput during training (one node)",
        "MB/s",
        network_panel_note,
    )


if __name__ == "__main__":
    main()
