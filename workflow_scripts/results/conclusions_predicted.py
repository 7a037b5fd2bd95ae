"""The verdict table's predicted column: for a scaling finding at a GPU count this sweep did not
run, what the scaling prediction (results/scaling_prediction.csv; docs/interconnect.md) gives at
the finding's own point on each system of the sweep, marked as predicted and never a verdict. The
verdicts themselves do not read it."""

import pandas as pd

from ..common.errors import StageError
from .verdict_rules import preferred_input

QUANTITIES = {"scaling"}  # the findings a prediction can speak to: one efficiency at one GPU count
NOT_A_VERDICT = "a prediction, not a verdict"


def load(path):
    """The prediction table, or None without one (the column is then empty)."""
    if not path:
        return None
    try:
        return pd.read_csv(path)
    except (OSError, pd.errors.EmptyDataError) as exc:
        raise StageError(f"{path}: the scaling prediction the verdict table reads cannot be read ({exc})")


def _pct(v):
    return f"{v:.1%}"


def _one(r, finding):
    """(the sentence of one system's row at the finding's GPU count, whether it predicts anything)."""
    n = finding["gpus"]
    where = f"at {n} GPUs on {r.system} ({int(r.nodes)} node(s))"
    if finding.get("scope") == "intra-node" and r.nodes > 1:
        where += f", where the finding's point is one node: this cluster's nodes hold {int(r.gpus_per_node)} GPUs"
    if pd.isna(r.allreduce_s):
        return f"no prediction {where}: {r.note}", False
    if pd.isna(r.efficiency_no_overlap):
        return f"no efficiency predicted {where}: no 1-GPU run to predict from (training.gpus with 1)", False
    bounds = f"{_pct(r.efficiency_no_overlap)} with no overlap to {_pct(r.efficiency_full_overlap)} with full overlap"
    if pd.isna(r.efficiency_predicted):
        return (
            f"no figure predicted {where}: the model is {r.model} here (scaling_prediction.md); bounds only, {bounds}",
            True,
        )
    return f"predicted {_pct(r.efficiency_predicted)} efficiency {where}, within {bounds} (model: {r.model})", True


def predicted(prediction, finding, verdict_row, unmeasured):
    """The column's text for one finding: empty where the finding is not a scaling one, where the
    sweep ran its own point, or without a prediction table."""
    if prediction is None or finding["quantity"] not in QUANTITIES:
        return ""
    if verdict_row.get("verdict") != unmeasured and verdict_row.get("same_point"):
        return ""
    fw, precision, n = finding["framework"], finding["precision"], finding["gpus"]
    mine = prediction[(prediction.framework == fw) & (prediction.precision == precision)]
    if mine.empty:
        return f"no prediction: this sweep has no {fw} {precision} run to predict from"
    if "input" in mine:  # the workload the verdict reads: its input path (verdict_rules.INPUT_ORDER)
        mine = preferred_input(mine)
    at = mine[mine.gpus == n]
    if at.empty:
        return f"no prediction at {n} GPUs: above prediction.max_gpus"
    said = [_one(r, finding) for r in at.itertuples()]
    return "; ".join(s for s, _ in said) + (f" ({NOT_A_VERDICT})" if any(p for _, p in said) else "")
