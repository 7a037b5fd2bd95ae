"""What the figure modules share: a headless matplotlib, whole-file PNG output, and a figure that
says why it has nothing to show. (The study's published figures, which only results/ draws, are
results/study_figures.py's.)"""

import textwrap

import matplotlib

matplotlib.use("Agg")  # no display on cluster nodes or CI
import matplotlib.pyplot as plt  # noqa: E402

from .atomic import atomic_file  # noqa: E402

# A line every figure this process saves carries under it: set once by a figure module's main, so
# that no figure drawn without some of the sweep's points passes for one of the whole sweep.
_footer = {"text": ""}


def set_footer(text):
    _footer["text"] = text


def save_png(fig, path):
    if _footer["text"]:
        fig.text(0.5, 0, textwrap.fill(_footer["text"], 100), ha="center", va="top", fontsize=8, color="firebrick")
    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def empty_figure(path, title, why):
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.set_axis_off()
    ax.set_title(title)
    ax.text(0.5, 0.5, why, ha="center", va="center", wrap=True)
    save_png(fig, path)
