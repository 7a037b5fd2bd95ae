"""Which runs of the sweep were input-bound (docs/preflight.md#the-input-check). A completed run on
real data whose point (system, framework, precision, GPUs, nodes) has completed synthetic runs in
the sweep is judged by its own images/s against their mean (input_judged_by measured): it measures
the run itself, at its full length and geometry, against the same step without its input, so it
wins over preflight's prediction either way. Elsewhere preflight's input check (a job of each pair
after its data check, results/preflight/<system>/<framework>/<N>gpu.input.json) stands, at the run's
ranks a node, against the sweep's synthetic run at the nearest count or the check's own (predicted).
A run that is input-bound carries the caveat of results/guards.py, with the share of its timed steps
it waited for its input, so no verdict rests on it as the framework's figure; one whose input path
is listed in preflight.input_bound_expected carries it as asked for."""

import json
from pathlib import Path

from ..common import input_bound
from . import guards

POINT = ["system", "framework", "precision", "gpus", "nodes"]
COLUMNS = ("input_bound", "input_judged_by", "input_check", "caveats")  # text, where reindexed columns are floats


def load(paths):
    """{(system, framework): the input check's record} of the input checks' results that made one."""
    out = {}
    for path in paths:
        res = json.loads(Path(path).read_text())
        if res.get("input_check"):
            out[(res["system"], res["framework"])] = res["input_check"]
    return out


def done_synthetic(runs):
    return runs[(runs.status == "ok") & (runs.input == "synthetic")]


def synthetic(runs):
    """{(system, framework, precision): [{gpus, images_per_s, run}]} of the sweep's completed
    synthetic runs, one per GPU count (the mean over its repeats)."""
    out = {}
    for key, g in done_synthetic(runs).groupby(["system", "framework", "precision"]):
        out[key] = input_bound.by_count(
            [{"gpus": int(r.gpus), "images_per_s": r.images_per_s, "run": guards.run_name(r)} for r in g.itertuples()]
        )
    return out


def point_of(r):
    """A run's point: (system, framework, precision, gpus, nodes)."""
    return (r["system"], r["framework"], r["precision"], int(r["gpus"]), int(r["nodes"]))


def at_points(runs):
    """{point: mean images/s} of the sweep's completed synthetic runs of each point."""
    return {point_of(g.iloc[0]): g.images_per_s.mean() for _, g in done_synthetic(runs).groupby(POINT)}


def predict(r, record, rates, tolerance):
    """(judgement, its sentence) of preflight's input check at the run's ranks a node against the
    step rate of `rates` (the sweep's synthetic runs by count; [] for the check's own), or None."""
    runs = record["runs"].get(r["precision"]) or {}
    entry = (runs.get("real") or {}).get(r["input"]) or {}
    if not entry.get("images_per_s"):
        return None
    per_gpu, source = input_bound.per_gpu_demand(rates, runs.get("synthetic"), int(r["gpus"]))
    if per_gpu is None:
        return None
    ranks = int(r["gpus"]) // max(1, int(r["nodes"]))
    capacity, estimated = input_bound.capacity_per_rank(entry, ranks)
    j = input_bound.judge(capacity, per_gpu, ranks, tolerance)
    return j, f"{input_bound.sentence(j, ranks, tolerance, estimated)} (demand: {source})"


def measured(r, mean, tolerance, prediction):
    """(judgement, its sentence) of a run against the mean of its point's synthetic runs;
    prediction: preflight's own (predict with the check's synthetic run), or None."""
    gpus, nodes = int(r["gpus"]), max(1, int(r["nodes"]))
    j = input_bound.judge(r["images_per_s"] / gpus, mean / gpus, gpus // nodes, tolerance)
    short = f", {input_bound.verdict(j, tolerance)}" if j["bound"] else ""
    said = f"; preflight predicted {input_bound.share(prediction[0]['ratio'])}" if prediction else ""
    return j, (
        f"{input_bound.MEASURED}: {r['images_per_s']:,.0f} images/s, {input_bound.share(j['ratio'])} of the sweep's "
        f"synthetic runs at this point ({mean:,.0f}){short}{said}"
    )


def judge_run(r, record, rates, mean, tolerance, expected):
    """The input columns of one completed real-data run (a row of runs), or {} where it is not
    judged. record: its pair's input check or None; rates: the sweep's synthetic runs of its
    precision by count; mean: those of its own point's mean images/s, or None."""
    own = predict(r, record, [], tolerance) if record else None
    if mean:
        (j, said), by = measured(r, mean, tolerance, own), input_bound.MEASURED
    else:
        found = predict(r, record, rates, tolerance) if record else None
        if found is None:
            return {}
        (j, said), by = found, input_bound.PREDICTED
        said = f"{input_bound.PREDICTED} by preflight: {said}"
    word = input_bound.FITS
    if j["bound"]:
        word = input_bound.ASKED if r["input"] in expected else input_bound.BOUND
    return {
        "input_bound": word,
        "input_judged_by": by,
        "input_capacity": j["capacity"],
        "input_demand": j["demand"],
        "input_check": said,
    }


def mark(runs, records, tolerance, expected=()):
    """runs (results/runs.py's records) with the input columns filled where a run is judged, and
    each judged run's caveats made again (guards.run_caveats)."""
    runs = runs.copy()
    if runs.empty:
        return runs
    for c in COLUMNS:
        runs[c] = runs[c].astype(object)
    rates, means = synthetic(runs), at_points(runs)
    for i, r in runs.iterrows():
        if r["status"] != "ok" or r["input"] == "synthetic" or r.get("data_source") != "real":
            continue
        record, rate = records.get((r["system"], r["framework"])), rates.get(point_of(r)[:3], [])
        cols = judge_run(r, record, rate, means.get(point_of(r)), tolerance, expected)
        if not cols:
            continue
        for k, v in cols.items():
            runs.loc[i, k] = v
        runs.loc[i, "caveats"] = guards.join(guards.run_caveats(runs.loc[i].to_dict()))
    return runs


def note(runs):
    """A line for the throughput table: how many runs on real data were judged, how, and how many
    were input-bound."""
    if "input_bound" not in runs:
        return []
    judged = runs[runs.input_bound.notna() & (runs.input_bound.astype(str) != "")]
    if judged.empty:
        return []
    bound = judged[judged.input_bound.isin([input_bound.BOUND, input_bound.ASKED])]
    asked = int((bound.input_bound == input_bound.ASKED).sum())
    by = int((judged.input_judged_by == input_bound.MEASURED).sum())
    return [
        f"the input check judged {len(judged)} run(s) on real data ({by} against the sweep's synthetic runs of their "
        f"point, {len(judged) - by} by preflight's prediction): {len(bound)} input-bound"
        + (f" ({asked} as asked for: {input_bound.EXPECTED_KEY})" if asked else "")
        + " (docs/preflight.md#the-input-check)"
    ]
