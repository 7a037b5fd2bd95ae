"""What the figure modules share: a headless matplotlib, whole-file PNG output, and a figure that
says why it has nothing to show. (The study's published figures, which only results/ draws, are
results/published.py's.)"""

import matplotlib

matplotlib.use("Agg")  # no display on cluster nodes or CI
import matplotlib.pyplot as plt  # noqa: E402

from .atomic import atomic_file  # noqa: E402


def save_png(fig, path):
    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def empty_figure(path, title, why):
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.set_axis_off()
    ax.set_title(title)
    ax.text(0.5, 0.5, why, ha="center", va="center", wrap=True)
    save_png(fig, path)
