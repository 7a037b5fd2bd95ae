"""Which runs of the sweep were input-bound: preflight's input check (a job of each pair after its data check,
results/preflight/<system>/<framework>/<N>gpu.input.json) judged again run by run, now with the
sweep's own synthetic runs as the step rate where it has them (common/input_bound.py). A run that
is input-bound carries the caveat of results/guards.py, with the share of its timed steps it waited
for its input, so no verdict rests on it as the framework's figure; one whose input path is listed
in preflight.input_bound_expected carries it as asked for."""

import json
from pathlib import Path

from ..common import input_bound
from . import guards


def load(paths):
    """{(system, framework): the input check's record} of the data checks' results that made one."""
    out = {}
    for path in paths:
        res = json.loads(Path(path).read_text())
        if res.get("input_capacity"):
            out[(res["system"], res["framework"])] = res["input_capacity"]
    return out


def synthetic(runs):
    """{(system, framework, precision): [{gpus, images_per_s, run}]} of the sweep's completed
    synthetic runs, one per GPU count (the mean over its repeats)."""
    done = runs[(runs.status == "ok") & (runs.input == "synthetic")]
    out = {}
    for key, g in done.groupby(["system", "framework", "precision"]):
        out[key] = input_bound.by_count(
            [{"gpus": int(r.gpus), "images_per_s": r.images_per_s, "run": guards.run_name(r)} for r in g.itertuples()]
        )
    return out


def judge_run(r, record, rates, margin, expected):
    """The input columns of one completed real-data run (a row of runs), or {} where it is not judged."""
    entry = record["inputs"].get(r["input"]) or {}
    if not entry.get("images_per_s"):
        return {}
    demand = record["demand"].get(r["precision"], {})
    timed = demand.get("timed")
    per_gpu, source = input_bound.per_gpu_demand(rates, timed, int(r["gpus"]))
    if per_gpu is None:
        return {}
    ranks = int(r["gpus"]) // max(1, int(r["nodes"]))
    capacity, estimated = input_bound.capacity_per_rank(entry, ranks)
    j = input_bound.judge(capacity, per_gpu, ranks, margin)
    word = input_bound.FITS
    if j["bound"]:
        word = input_bound.ASKED if r["input"] in expected else input_bound.BOUND
    return {
        "input_bound": word,
        "input_capacity": j["capacity"],
        "input_demand": j["demand"],
        "input_check": f"{input_bound.sentence(j, ranks, margin, estimated)} (demand: {source})",
    }


def mark(runs, records, margin, expected=()):
    """runs (results/runs.py's records) with the input columns filled where preflight's input check
    judges a run, and each judged run's caveats made again (guards.run_caveats)."""
    runs = runs.copy()
    if not records or runs.empty:
        return runs
    for c in ("input_bound", "input_check", "caveats"):  # text, where the reindexed columns are empty floats
        runs[c] = runs[c].astype(object)
    rates = synthetic(runs)
    for i, r in runs.iterrows():
        record = records.get((r["system"], r["framework"]))
        if record is None or r["status"] != "ok" or r["input"] == "synthetic" or r.get("data_source") != "real":
            continue
        cols = judge_run(r, record, rates.get((r["system"], r["framework"], r["precision"]), []), margin, expected)
        if not cols:
            continue
        for k, v in cols.items():
            runs.loc[i, k] = v
        runs.loc[i, "caveats"] = guards.join(guards.run_caveats(runs.loc[i].to_dict()))
    return runs


def note(runs):
    """A line for the throughput table: how many runs preflight's input check judged input-bound."""
    if "input_bound" not in runs:
        return []
    bound = runs[runs.input_bound.isin([input_bound.BOUND, input_bound.ASKED])]
    judged = runs[runs.input_bound.notna() & (runs.input_bound.astype(str) != "")]
    if judged.empty:
        return []
    asked = int((bound.input_bound == input_bound.ASKED).sum())
    return [
        f"preflight's input check judged {len(judged)} run(s) on real data: {len(bound)} input-bound"
        + (f" ({asked} as asked for: {input_bound.EXPECTED_KEY})" if asked else "")
        + " (docs/preflight.md#the-input-check)"
    ]
