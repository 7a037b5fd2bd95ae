"""The points a table was written without, because they still wait in SLURM's queue for nodes
that were down when the workflow was parsed (plan/waiting.py decides which): every table, figure
and the verdict table name them where a reader looks, so a table without its largest point never
reads as the whole sweep."""

import json

from .errors import StageError


def add_argument(ap):
    ap.add_argument(
        "--waiting",
        type=parse,
        default=[],
        help="JSON list of {system, gpus, why}: points still waiting for their nodes, not in this output yet",
    )


def parse(text):
    try:
        points = json.loads(text)
        return [{"system": str(p["system"]), "gpus": int(p["gpus"]), "why": str(p["why"])} for p in points]
    except (ValueError, TypeError, KeyError) as exc:
        raise StageError(f"--waiting {text!r}: not a JSON list of {{system, gpus, why}} ({exc})") from None


def names(waiting):
    return ", ".join(f"{p['system']} at {p['gpus']} GPUs" for p in waiting)


def notes(waiting, what="this table"):
    """The note of a table (or the verdict) written without the waiting points; none if none wait."""
    if not waiting:
        return []
    why = "; ".join(f"{p['system']} at {p['gpus']} GPUs: {p['why']}" for p in waiting)
    return [
        f"not yet in {what}: {names(waiting)}, waiting in SLURM's queue for nodes that are down "
        f"(systems.<name>.nodes_down: wait; {why}). {what[0].upper() + what[1:]} is written from the points "
        f"that finished; the same snakemake command, run again once they have, writes it again with them."
    ]


def figure_line(waiting):
    """One line under a figure drawn without the waiting points; empty if none wait."""
    return f"Not in this figure yet, still waiting for their nodes: {names(waiting)}" if waiting else ""
