"""The study's findings against this run's tables: one row per finding, with its figure, our
counterpart at the nearest sweep point that exists, and a verdict.

    python -m workflow_scripts.results.conclusions --tables results --out results/conclusions.csv

reads the tables named in TABLES from --tables and the findings from study_findings.yaml, and
writes conclusions.csv and a markdown copy beside it (.md). A finding this sweep cannot measure
stays, as "not measured by this sweep", naming the config keys that would measure it. With
--prediction (results/scaling_prediction.csv), a scaling finding at a GPU count the sweep did not
run gets, in its own column `predicted`, what the scaling prediction gives there: a prediction,
never a verdict (conclusions_predicted.py).
"""

import argparse
from pathlib import Path

import pandas as pd
import yaml

from ..common import written_without as waiting
from ..common.atomic import atomic_file
from ..common.errors import StageError, run_main
from . import conclusions_predicted
from . import stage_outputs as stage
from . import training_outputs as training
from .conclusions_measure import MEASURE, Unmeasured

FINDINGS = Path(__file__).with_name("study_findings.yaml")
TABLES = [
    training.SCALING,
    training.THROUGHPUT,
    training.FP16_VS_FP32,
    training.SYSTEMS,
    training.STORAGE,
    training.NETWORK,
    stage.INT8_ACCURACY,
    stage.INT8_THROUGHPUT,
    stage.TIME_TO_ACCURACY,
]
HOLDS, FAILS, UNMEASURED = "holds", "does not hold", "not measured by this sweep"
# No verdict on a figure this tool cannot vouch for (results/guards.py), nor on an interval over the
# repeats that lies across the study's figure.
NOT_DECIDED, INCONCLUSIVE = "not decided", "inconclusive"
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE, NOT_DECIDED, UNMEASURED)
# The one kind of finding a CPU's figure may decide: accuracy does not depend on the device.
DEVICE_INDEPENDENT = {stage.INT8_ACCURACY}
TITLE = "The study's conclusions on this cluster"
HOW = (
    "One row per finding of the study (the PMBS18 paper, sections IV-VI, and its slides) and of the scale-out "
    "whitepaper (its short and long tests), with our counterpart from this run's tables at the nearest sweep "
    "point that exists (point; same_point says whether it is the study's) and a verdict: holds, does not hold, "
    "or not measured by this sweep (why names the config keys that would measure it). Caffe2's findings are "
    "checked on PyTorch DDP. device says what the point ran on; a CPU point says so. No verdict rests on a "
    "figure the tool cannot vouch for: an unstable run (images/s CV over 10-step windows > 2%), one not known "
    "to have had its nodes to itself, an efficiency above 100% by more than 2%, or, for a performance finding, "
    "CPU processes standing in for GPUs: such a row says not decided and why, naming the runs. Where a point "
    "ran several times (training.repeats) its figure is the interval over the runs: inconclusive where that "
    "interval lies across the study's figure. predicted: for a scaling finding at a GPU count this sweep did "
    "not run, what the scaling prediction (scaling_prediction.md) gives at that count on this cluster; a "
    "prediction, never a verdict."
)
COLUMNS = [
    "id",
    "source",
    "figure",
    "finding",
    "study",
    "measured",
    "measured_value",
    "point",
    "same_point",
    "device",
    "verdict",
    "why",
    "tolerance_kind",
    "tolerance",
    "table",
    "predicted",
]


# The columns a per-run table has had since its runs were kept per input path and repeat: a table
# without them was written by an earlier version of the workflow and is refused, never read as if
# each point had run once (the verdict would average what it cannot tell apart).
RUN_COLUMNS = {name: ("input", "repeat") for name in (training.THROUGHPUT, training.STORAGE, training.NETWORK)}


def load_tables(directory, held=()):
    """held: tables not read, which wait for a point still waiting for its nodes."""
    out = {}
    for name in (t for t in TABLES if t not in held):
        path = Path(directory) / f"{name}.csv"
        try:
            out[name] = pd.read_csv(path)
        except (OSError, pd.errors.EmptyDataError) as exc:
            raise StageError(f"{path}: the table the conclusions read cannot be read ({exc})")
        missing = [c for c in RUN_COLUMNS.get(name, ()) if c not in out[name]]
        if missing:
            raise StageError(
                f"{path}: written by an earlier version of this workflow (no {', '.join(missing)} column); "
                "write it again from the runs, which stay as they are: snakemake --forcerun training_tables"
            )
    return out


def study_figure(f, tol):
    if f["kind"] == "scaling":
        eff = f.get("efficiency", f.get("speedup", 0) / f["gpus"])
        return (
            f"{f['speedup']:.2f}x on {f['gpus']} (efficiency {eff:.1%})"
            if "speedup" in f
            else f"efficiency {eff:.0%} at {f['gpus']} GPUs"
        )
    if f["kind"] == "range":
        return f"{f['low']:.3g}x-{f['high']:.3g}x"
    if f["kind"] == "approx":
        return ("below " if f.get("below") else "~") + f"{f['value']:.3g}x"
    if f["kind"] == "accuracy":
        return f"|FP32 - INT8| <= {f['bound']:.2f} points"
    if f["kind"] == "time":
        return f"{f['hours']:g} h at {f['gpus']} GPUs"
    if f["kind"] == "stability":
        return f"unstable: images/s CV over 10-step windows > {tol['threshold']:.0%}"
    return f"{f['framework']} highest"


def conclusions(tables, spec, prediction=None, held=""):
    """One row per finding; prediction: the scaling prediction's table (None: no predicted column).
    held: why the tables missing from `tables` are not there yet (their findings wait with them)."""
    rows = []
    for f in spec["findings"]:
        tol = spec["tolerances"][f["kind"]]
        row = {
            "id": f["id"],
            "source": f["source"],
            "figure": f["figure"],
            "finding": f["statement"],
            "study": study_figure(f, tol),
            "tolerance_kind": f["kind"],
            "tolerance": " ".join(tol["text"].split()),
            "table": MEASURE[f["quantity"]][1] + ".csv",
        }
        if MEASURE[f["quantity"]][1] not in tables:
            why = f"not yet: {row['table']} {held}"
            row.update(verdict=UNMEASURED, why=why, measured="", point="", same_point=False, device="")
            row["predicted"] = ""
            rows.append(row)
            continue
        try:
            m = MEASURE[f["quantity"]][0](tables, f, tol)
        except Unmeasured as why:
            row.update(verdict=UNMEASURED, why=str(why), measured="", point="", same_point=False, device="")
        else:
            row.update(decide(m, f["quantity"]))
        row["predicted"] = conclusions_predicted.predicted(prediction, f, row, UNMEASURED)
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def decide(m, quantity):
    """The row's verdict and why from a measure's result: not decided on caveats (a CPU's figure is
    one for a performance finding), inconclusive on an interval across the study's figure."""
    m = dict(m)
    caveats, holds, cpu = m.pop("caveats"), m.pop("holds"), m.pop("cpu")
    if cpu and quantity not in DEVICE_INDEPENDENT:
        caveats = [
            f"CPU processes stand in for GPUs ({m['device']}): a performance finding is decided only on GPUs",
            *caveats,
        ]
    notes = [m.pop("note") or ("" if m["same_point"] else "at the nearest point this sweep has, not the study's")]
    if caveats:
        return {**m, "verdict": NOT_DECIDED, "why": "; ".join([*caveats, *filter(None, notes)])}
    if holds is None:
        notes.insert(0, "the interval over the runs lies across the study's figure")
        return {**m, "verdict": INCONCLUSIVE, "why": "; ".join(filter(None, notes))}
    return {**m, "verdict": HOLDS if holds else FAILS, "why": "; ".join(filter(None, notes))}


def _cell(x):
    return "" if pd.isna(x) else str(x).replace("|", "\\|").replace("\n", " ")


def markdown(df, spec, waiting_points=()):
    """waiting_points: those the tables were written without (common/written_without.py), named first: a
    finding decided at the nearest point that exists may be decided again once they have run."""
    kinds = list(dict.fromkeys(df.tolerance_kind))
    lines = [f"# {TITLE}", "", HOW, ""]
    for note in waiting.notes(list(waiting_points), "the verdict table"):
        lines += [f"> **Waiting.** {note}", ""]
    for k in kinds:
        lines += [f"> **Tolerance ({k}).** {' '.join(spec['tolerances'][k]['text'].split())}", ""]
    lines += [
        "| finding | figure | study | ours | at | verdict | predicted (not a verdict) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in df.itertuples():
        at = r.point + (f" [{r.device}]" if r.device else "")
        ours = r.measured if r.verdict != UNMEASURED else ""
        verdict = f"**{r.verdict}**" + (f": {r.why}" if r.why else "")
        lines.append(
            "| "
            + " | ".join(
                _cell(x) for x in (r.finding, f"{r.figure} ({r.source})", r.study, ours, at, verdict, r.predicted)
            )
            + " |"
        )
    counts = df.verdict.value_counts()
    lines += ["", ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS) + "."]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", required=True, help="the directory of the tables (results/)")
    ap.add_argument("--findings", default=str(FINDINGS), help="the study's findings (YAML)")
    ap.add_argument("--prediction", help="the scaling prediction (scaling_prediction.csv): the predicted column")
    ap.add_argument("--out", required=True, help="the CSV; the markdown copy goes beside it (.md)")
    waiting.add_argument(ap)
    ap.add_argument(
        "--held",
        nargs="*",
        default=[],
        choices=TABLES,
        help="tables not read: they wait for a point --waiting names (the INT8 stage's, whose weights it trains)",
    )
    a = ap.parse_args()
    spec = yaml.safe_load(Path(a.findings).read_text())
    held = f"waits for the run its weights come from, still waiting for its nodes: {waiting.names(a.waiting)}"
    df = conclusions(load_tables(a.tables, a.held), spec, conclusions_predicted.load(a.prediction), held)
    out = Path(a.out)
    with atomic_file(out) as tmp:
        df.to_csv(tmp, index=False)
    # The reader's copy joins cells (a figure with its source, a verdict with its reason): its own
    # layout rather than write_table's columns.
    with atomic_file(out.with_suffix(".md")) as tmp:
        Path(tmp).write_text(markdown(df, spec, a.waiting))
    print(out.with_suffix(".md").read_text())


if __name__ == "__main__":
    run_main(main)
