"""The scale-out whitepaper's Fig. 35 for the long test: top-1 (and top-5) against elapsed training
time, one line per run, the target drawn across and each run's arrival at it marked:

    python -m workflow_scripts.results.accuracy_figure --table results/time_to_accuracy.csv \
        --out results/figures/fig35_time_to_accuracy.png

The points are the runs' own per-epoch records (epochs.jsonl), at the end of each evaluation.
"""

import argparse
import json
from pathlib import Path

import pandas as pd

from ..common import written_without as waiting
from ..common.plotting import empty_figure, plt, save_png, set_footer

TITLE = "Fig. 35: accuracy vs elapsed training time (long test)"


def _unit(seconds):
    """The study plots hours; a CPU run of minutes reads better in minutes."""
    return (3600, "hours") if seconds >= 3 * 3600 else (60, "minutes") if seconds >= 180 else (1, "seconds")


def figure(table, path):
    ok = table[table.status == "ok"]
    if ok.empty:
        return empty_figure(
            path,
            TITLE,
            "no long test in this config:\nset training.long_test.gpus"
            if table.empty
            else "no long-test run completed",
        )
    curves = {}
    for r in ok.itertuples():
        recs = [json.loads(x) for x in (Path(r.run_dir) / "epochs.jsonl").read_text().splitlines() if x.strip()]
        curves[r.Index] = pd.DataFrame([x for x in recs if x["top1"] is not None])
    longest = max(c.elapsed_s.max() for c in curves.values())
    scale, unit = _unit(longest)
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.set_xlim(0, longest / scale * 1.05)
    for r in ok.itertuples():
        c = curves[r.Index]
        label = f"{r.system} {r.framework} {r.precision} {r.gpus} GPU"
        (line,) = ax.plot(c.elapsed_s / scale, c.top1, "o-", label=f"{label}: top-1")
        ax.plot(c.elapsed_s / scale, c.top5, "^--", color=line.get_color(), alpha=0.6, label=f"{label}: top-5")
        if str(r.reached) == "True":
            hit = c[c.epoch == r.epoch_reached].iloc[0]
            ax.plot(hit.elapsed_s / scale, hit.top1, "*", ms=16, color=line.get_color(), markeredgecolor="black")
    for target in sorted(ok.target_top1.dropna().unique()):
        ax.axhline(target, color="grey", ls=":", lw=1)
        ax.text(0, target, f" target top-1 {target:g}%", va="bottom", fontsize=8, color="grey")
    ax.set(
        title=TITLE,
        xlabel=f"elapsed time, training + evaluation ({unit})",
        ylabel="accuracy on the val split (%)",
        ylim=(0, 100),
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    save_png(fig, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", required=True, help="time_to_accuracy.csv")
    ap.add_argument("--out", required=True)
    waiting.add_argument(ap)
    a = ap.parse_args()
    set_footer(waiting.figure_line(a.waiting))
    figure(pd.read_csv(a.table), Path(a.out))


if __name__ == "__main__":
    main()
