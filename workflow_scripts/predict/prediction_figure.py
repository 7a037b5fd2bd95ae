"""The scaling prediction's figure: per system, images/s, scaling efficiency and a step's all-reduce
against the GPU count, for each workload (framework, precision, input path): the band between no
and full overlap, the fitted line where the model is not poor, and the runs as dots."""

from matplotlib.ticker import FuncFormatter

from ..common.plotting import empty_figure, plt, save_png


def draw(df, path, title):
    if df.empty:
        return empty_figure(path, title, "no completed run in the sweep: nothing to predict from")
    systems = sorted(set(df.system))
    fig, axes = plt.subplots(len(systems), 3, figsize=(18, 4.8 * len(systems)), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for row_axes, system in zip(axes, systems):
        s = df[df.system == system]
        for i, ((framework, precision, source), g) in enumerate(s.groupby(["framework", "precision", "input"])):
            g = g.sort_values("gpus")
            colour = colours[i % len(colours)]
            label = f"{framework} {precision}, {source} input (model {g.model.iloc[0]})"
            _panel(row_axes[0], g, "images_per_s", colour, label)
            _panel(row_axes[1], g, "efficiency", colour, label)
            a = g[g.allreduce_s.notna() & (g.gpus > 1)]
            row_axes[2].plot(a.gpus, a.allreduce_s * 1e3, "o-", ms=3, color=colour, label=label)
        for ax, what in zip(row_axes, ("images/s", "scaling efficiency", "all-reduce of a step's gradients (ms)")):
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:g}"))
            ax.set(xlabel="GPUs", ylabel=what, title=f"{system}: {what}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        row_axes[0].set_yscale("log")
    fig.suptitle(
        title + "\n(band: no to full overlap; line: the overlap fitted to the runs, none where the model is poor; "
        "dots: the runs)",
        y=1.0 + 0.06 / len(systems),
    )
    save_png(fig, path)


def _panel(ax, g, what, colour, label):
    no, full, predicted = (f"{what}_no_overlap", f"{what}_full_overlap", f"{what}_predicted")
    if what == "efficiency":
        measured = g.measured_efficiency
    else:
        measured = g.measured_images_per_s
    b = g[g[no].notna()]
    if len(b):
        ax.fill_between(b.gpus, b[no].astype(float), b[full].astype(float), color=colour, alpha=0.2)
        p = b[b[predicted].notna()]
        ax.plot(p.gpus, p[predicted].astype(float), "-", color=colour, label=label)
    m = g[measured.notna()]
    ax.plot(
        m.gpus,
        measured[measured.notna()].astype(float),
        "o",
        color=colour,
        label=f"{label}: runs" if len(b) == 0 else None,
    )
