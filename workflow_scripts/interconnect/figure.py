"""Bus bandwidth by message size, as the Brookhaven paper's Fig. 2 draws it: one panel per
collective, one line per system, GPU count and source, log-scale sizes, and each system's nominal
link bandwidth (systems.<name>.link_gbps) as a horizontal line where it is set.

    python -m workflow_scripts.interconnect.figure --table results/interconnect.csv \\
        --links '{"sxm2": 25}' --out results/figures/interconnect_busbw.png
"""

import argparse
import json

import pandas as pd
from matplotlib.ticker import FuncFormatter

from ..common import written_without as waiting
from ..common.plotting import empty_figure, plt, save_png, set_footer
from .efficiency_bounds import RESNET50_PARAMETERS

TITLE = "Interconnect: bus bandwidth by message size"
PANEL = {"all_reduce": "all-reduce", "broadcast": "broadcast"}


def _bytes(x, _pos=None):
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if x >= size:
            return f"{x / size:g} {unit}"
    return f"{x:g} B"


def draw(table, links, path):
    if table.empty:
        return empty_figure(path, TITLE, "nothing measured: training.gpus has no GPU count above 1")
    collectives = [c for c in PANEL if c in set(table.collective)]
    fig, axes = plt.subplots(1, len(collectives), figsize=(7 * len(collectives), 4.8), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    series = list(table.groupby(["system", "gpus", "nodes"]).groups)
    for ax, collective in zip(axes[0], collectives):
        t = table[table.collective == collective]
        for i, (system, gpus, nodes) in enumerate(series):
            for source, g in t[(t.system == system) & (t.gpus == gpus)].groupby("source"):
                g = g.sort_values("bytes")
                style = "o-" if source != "nccl-tests" else "s--"
                ax.plot(
                    g.bytes,
                    g.busbw_GBps,
                    style,
                    ms=3,
                    color=colours[i % len(colours)],
                    label=f"{system}, {gpus} GPUs on {nodes} node(s), {source} ({g.backend.iloc[0]})",
                )
        for j, (system, gbps) in enumerate(sorted(links.items())):
            if system in set(t.system):
                ax.axhline(gbps, color="k", lw=1, ls=(0, (1 + j, 2)), label=f"{system}: nominal link {gbps:g} GB/s")
        ax.axvline(RESNET50_PARAMETERS * 4, color="0.6", lw=1, ls=":", label="ResNet-50's fp32 gradients")
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(_bytes))
        ax.set(title=PANEL[collective], xlabel="message size", ylabel="bus bandwidth (GB/s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(TITLE + " (busbw = algbw x 2(n-1)/n for all-reduce, = algbw for broadcast)")
    save_png(fig, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", required=True)
    ap.add_argument("--links", default="{}", help="JSON {system: nominal link GB/s}")
    ap.add_argument("--out", required=True)
    waiting.add_argument(ap)
    a = ap.parse_args()
    set_footer(waiting.figure_line(a.waiting))
    draw(pd.read_csv(a.table), json.loads(a.links), a.out)


if __name__ == "__main__":
    main()
