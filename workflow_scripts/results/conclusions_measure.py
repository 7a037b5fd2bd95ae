"""How each kind of the study's findings is measured from this run's tables (conclusions.py
assembles the rows): one function per quantity of study_findings.yaml, given the tables, the
finding and its tolerance; a finding this sweep has no point for raises Unmeasured, naming the
config keys that would add one.

Each result carries the caveats of the figures it rests on (results/guards.py: unstable, not
isolated, impossible; and CPU processes standing in for GPUs, which only accuracy findings may rest
on): a result with caveats gets no verdict. Where the sweep ran a point several times, a figure is
an interval over the runs, and holds is True or False only when the whole interval is on one side
of the study's figure (less its tolerance): None, inconclusive, where it straddles it.
"""

import math

import pandas as pd

from . import guards

# The input path a training-derived row is read from when the sweep ran several: the framework's
# own real-data path first (auto resolves to dali on a GPU, cpu on a CPU); synthetic data only
# where nothing else ran, since the study trained on real data.
INPUT_ORDER = ["dali", "gpu", "cpu", "auto", "synthetic"]
MULTI_NODE_KEYS = "systems.<system>.max_nodes and training.gpus (a GPU count above systems.<system>.gpus_per_node)"


class Unmeasured(Exception):
    """This sweep has no point for the finding; the message names the config keys that would add one."""


def _is_cpu(device):
    return str(device).startswith("CPU")


def _units(device):
    return "CPU processes" if _is_cpu(device) else "GPUs"


def _nearest(values, target):
    """The value nearest target on a log scale (GPU counts, batch sizes); ties go to the larger."""
    return min(values, key=lambda v: (abs(math.log2(v / target)), -v))


def _preferred_input(df):
    present = [i for i in INPUT_ORDER if i in set(df["input"])]
    return df[df["input"] == present[0]] if present else df


def _devices(t):
    """system -> device, from the runs that completed."""
    ok = t["training_throughput"][t["training_throughput"].status == "ok"]
    return ok.groupby("system").device.first().to_dict()


def _sweep_keys(t, framework=None, precision=None):
    """The config keys to change so the sweep has runs of this framework and precision."""
    runs = t["training_throughput"]
    keys = []
    if framework and framework not in set(runs.framework):
        keys.append(f"training.frameworks (add {framework})")
    if precision and precision not in set(runs.precision):
        keys.append(f"training.precisions (add {precision})")
    return keys


def _failed_points(t, framework, precision):
    runs = t["training_throughput"]
    bad = runs[(runs.framework == framework) & (runs.precision == precision) & (runs.status != "ok")]
    return "; ".join(f"{r.system} {r.gpus} GPUs {r.status}: {r.why}" for r in bad.itertuples())


# --- one function per quantity: a dict of the measured text and value, the point it was measured
# at (same: whether that is the study's), the device, whether the finding holds, and a note ---


def _result(text, value, point, same, device, holds, note="", caveats=(), cpu=False, ran_as=""):
    """holds: True, False, or None (the interval straddles the study's figure); caveats: why the
    figures cannot be vouched for; cpu: CPU processes stood in for GPUs; ran_as: what fp32 ran as."""
    notes = [note] if note else []
    if "tf32" in str(ran_as):
        notes.append(
            "ours ran fp32 as TF32 where the study ran IEEE float32 on V100s (training.fp32_math: strict compares "
            "like with like)"
        )
    return {
        "measured": text,
        "measured_value": value,
        "point": point,
        "same_point": bool(same),
        "device": device,
        "holds": holds if holds is None else bool(holds),
        "note": "; ".join(notes),
        "caveats": list(dict.fromkeys(caveats)),
        "cpu": bool(cpu),
    }


def _col(r, name, default=None):
    """A column of a table row that tables made before it existed lack."""
    value = getattr(r, name, default)
    return default if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _interval(r, column):
    """(value, low, high) of a figure with its interval over the repeats (a point without one: the
    value three times)."""
    v = getattr(r, column)
    return v, _col(r, f"{column}_low", v), _col(r, f"{column}_high", v)


def at_least(low, high, threshold):
    """True / False / None: the interval wholly at or above threshold, wholly below, or across it."""
    return True if low >= threshold else False if high < threshold else None


def _all(decisions):
    """One verdict of several: any False is False, all True is True, else None (inconclusive)."""
    decisions = list(decisions)
    return False if False in decisions else True if all(d is True for d in decisions) else None


def _scaling_point(t, f, framework, precision, gpus, scope=None):
    rows = t["scaling"]
    rows = rows[(rows.framework == framework) & (rows.precision == precision) & (rows.gpus > rows.baseline_gpus)]
    if scope:
        rows = rows[rows.scope == scope]
    if rows.empty:
        keys = _sweep_keys(t, framework, precision) or (
            [MULTI_NODE_KEYS]
            if scope == "inter-node"
            else [f"training.gpus (a count up to {f['gpus']} within one node, with 1)"]
        )
        failed = _failed_points(t, framework, precision)
        raise Unmeasured(
            f"no {framework} {precision} run{' ' + scope if scope else ''} above the baseline in "
            f"scaling.csv{' (' + failed + ')' if failed else ''}; set " + ", ".join(keys)
        )
    g = _nearest(sorted(set(rows.gpus)), gpus)
    return _preferred_input(rows[rows.gpus == g]).iloc[0]


def _run_device(t, r):
    runs = t["training_throughput"]
    match = runs[
        (runs.system == r.system)
        & (runs.framework == r.framework)
        & (runs.precision == r.precision)
        & (runs.gpus == r.gpus)
        & (runs.input == r.input)
    ]
    return match.device.iloc[0] if len(match) else ""


def scaling(t, f, tol):
    r = _scaling_point(t, f, f["framework"], f["precision"], f["gpus"], f.get("scope"))
    study = f["efficiency"] if "efficiency" in f else f["speedup"] / f["gpus"]
    device = _col(r, "device") or _run_device(t, r)
    point = (
        f"{r.system} {r.framework} {r.precision}, {r.gpus} {_units(device)} on {r.nodes} node(s) ({r.scope}), "
        f"{r.input} input, against {r.baseline_gpus}"
    )
    eff, low, high = _interval(r, "efficiency")
    text = f"{r.speedup:.2f}x on {r.gpus} (efficiency {eff:.1%}" + (
        f", {low:.1%}-{high:.1%} over {int(_col(r, 'repeats', 1))} runs)" if high > low else ")"
    )
    # The scaling table names an impossible efficiency among its caveats; checked here too, so that no
    # table, however written, gets a verdict on one.
    impossible = guards.impossible(eff, f"{r.system}/{r.framework}_{r.precision}_{r.gpus}gpu ({r.input})")
    return _result(
        text,
        eff,
        point,
        int(r.gpus) == f["gpus"],
        device,
        at_least(low, high, study * (1 - tol["relative"])),
        caveats=guards.split(_col(r, "caveats", "")) + ([impossible] if impossible else []),
        cpu=guards.cpu_stand_in(device),
        ran_as=_col(r, "ran_as", ""),
    )


def best_scaling(t, f, tol):
    rows = t["scaling"]
    rows = rows[rows.gpus > rows.baseline_gpus]
    parts, verdicts, points, same, caveats, ran_as = [], [], [], True, [], []
    for precision in f["precisions"]:
        p = rows[rows.precision == precision]
        frameworks = sorted(set(p.framework))
        if f["framework"] not in frameworks or len(frameworks) < 2:
            continue
        common = set.intersection(*(set(p[p.framework == x].gpus) for x in frameworks))
        if not common:
            continue
        g = _nearest(sorted(common), f["gpus"])
        chosen = {x: next(_preferred_input(p[(p.framework == x) & (p.gpus == g)]).itertuples()) for x in frameworks}
        eff = {x: _interval(r, "efficiency") for x, r in chosen.items()}
        others = [v for x, v in eff.items() if x != f["framework"]]
        mine, rel = eff[f["framework"]], 1 - tol["relative"]
        # the named framework at least the best of the others: wholly, not at all, or across it
        best_low, best_high = max(o[1] for o in others), max(o[2] for o in others)
        verdicts.append(True if mine[1] >= best_high * rel else False if mine[2] < best_low * rel else None)
        caveats += [c for r in chosen.values() for c in guards.split(_col(r, "caveats", ""))]
        ran_as += [str(_col(r, "ran_as", "")) for r in chosen.values()]
        parts.append(
            f"{precision}: " + ", ".join(f"{x} {v[0]:.1%}" for x, v in sorted(eff.items(), key=lambda kv: -kv[1][0]))
        )
        points.append(f"{precision} at {g}")
        same = same and g == f["gpus"]
    if not parts:
        raise Unmeasured(
            f"no point where {f['framework']} and another framework both ran above the baseline in "
            f"{' or '.join(f['precisions'])}; set training.frameworks (two or more, with "
            f"{f['framework']}) and training.gpus (two counts or more)"
        )
    devices = sorted(set(_devices(t).values()))
    return _result(
        "efficiency " + "; ".join(parts),
        None,
        ", ".join(points) + f" (the largest common point nearest {f['gpus']})",
        same,
        "; ".join(devices),
        _all(verdicts),
        caveats=caveats,
        cpu=any(guards.cpu_stand_in(d) for d in devices),
        ran_as=" ".join(ran_as),
    )


def stability(t, f, tol):
    runs = t["training_throughput"]
    runs = runs[(runs.framework == f["framework"]) & (runs.status == "ok") & (runs.nodes > 1)]
    runs = runs[runs.input != "synthetic"]
    if runs.empty:
        raise Unmeasured(
            f"no {f['framework']} run across nodes on real data; set {MULTI_NODE_KEYS}, with "
            f"{f['framework']} in training.frameworks"
        )
    worst = runs.loc[runs.step_cv.idxmax()]
    text = f"step CV up to {worst.step_cv:.1%} ({len(runs)} run(s) across nodes)"
    point = f"{worst.system} {worst.framework} {worst.precision}, {worst.gpus} GPUs on {worst.nodes} nodes"
    # Instability is this finding's figure, not a caveat of it; a neighbour's load would explain it away.
    caveats = [
        c
        for cell in runs.get("caveats", pd.Series(dtype=str))
        for c in guards.split(cell)
        if not c.startswith("unstable")
    ]
    return _result(
        text,
        worst.step_cv,
        point,
        True,
        worst.device,
        (runs.step_cv > tol["threshold"]).any(),
        caveats=caveats,
        cpu=guards.cpu_stand_in(worst.device),
    )


def system_gap(t, f, tol):
    faster, slower = f["devices"]
    devices = _devices(t)
    find = [s for s, d in devices.items() if faster.lower() in str(d).lower()]
    other = [s for s, d in devices.items() if slower.lower() in str(d).lower()]
    measured = ", ".join(f"{s}: {d}" for s, d in sorted(devices.items())) or "none"
    if not find or not other:
        raise Unmeasured(
            f"no {faster} and {slower} systems both ran (systems measured: {measured}); set "
            f"training.systems to one system of each (systems.<system>)"
        )
    comp = t["system_comparison"]
    rows = []
    for a, b in ((x, y) for x in find for y in other):
        for r in comp[
            ((comp.system_a == a) & (comp.system_b == b)) | ((comp.system_a == b) & (comp.system_b == a))
        ].itertuples():
            ratio = _col(r, "a_over_b", r.a_images_per_s / r.b_images_per_s)
            low, high = _col(r, "a_over_b_low", ratio), _col(r, "a_over_b_high", ratio)
            if r.system_a != a:  # the faster system over the slower, whichever of the pair came first
                ratio, low, high = 1 / ratio, 1 / high, 1 / low
            rows.append(
                {
                    "pair": f"{a} over {b}",
                    "framework": r.framework,
                    "precision": r.precision,
                    "gpus": r.gpus,
                    "ratio": ratio,
                    "low": low,
                    "high": high,
                    "caveats": _col(r, "caveats", ""),
                    "ran_as": _col(r, "ran_as", ""),
                }
            )
    rows = pd.DataFrame(
        rows, columns=["pair", "framework", "precision", "gpus", "ratio", "low", "high", "caveats", "ran_as"]
    )
    rows = rows[
        rows.framework.isin(f.get("frameworks", rows.framework))
        & rows.precision.isin(f.get("precisions", rows.precision))
    ]
    rows = rows[(rows.gpus == 1) == (f["gpus"] == 1)]
    if rows.empty:
        raise Unmeasured(
            f"no common point of a {faster} and a {slower} system in system_comparison.csv "
            f"{'at 1 GPU' if f['gpus'] == 1 else 'above 1 GPU'}; set training.gpus, training.frameworks "
            f"and training.precisions so both systems run it"
        )
    g = _nearest(sorted(set(rows.gpus)), f["gpus"])
    rows = rows[rows.gpus == g]
    text = "; ".join(f"{r.framework} {r.precision} {r.ratio:.3f}x" for r in rows.itertuples())
    return _result(
        text,
        rows.ratio.median(),
        f"{rows.pair.iloc[0]}, {g} GPUs",
        g == f["gpus"],
        measured,
        _compare(f, list(zip(rows.ratio, rows.low, rows.high)), tol),
        caveats=[c for cell in rows.caveats for c in guards.split(cell)],
        cpu=any(guards.cpu_stand_in(devices[s]) for s in find + other),
        ran_as=" ".join(map(str, rows.ran_as)),
    )


def fp16_gain(t, f, tol):
    rows = t["fp16_vs_fp32"]
    rows = rows[rows.framework.isin(f["frameworks"])]
    if rows.empty:
        raise Unmeasured(
            "no FP16/FP32 pair of "
            + " or ".join(f["frameworks"])
            + " in fp16_vs_fp32.csv; set "
            + ", ".join(
                _sweep_keys(t, None, "fp16") + _sweep_keys(t, None, "fp32")
                or ["training.frameworks (tensorflow or mxnet)"]
            )
        )
    values = []
    for r in rows.itertuples():
        ratio = _col(r, "fp16_over_fp32") or r.fp16_images_per_s / r.fp32_images_per_s
        values.append((ratio, _col(r, "fp16_over_fp32_low", ratio), _col(r, "fp16_over_fp32_high", ratio)))
    text = "; ".join(f"{r.framework} {r.gpus}: {v[0]:.2f}x" for r, v in zip(rows.itertuples(), values))
    devices = sorted({_devices(t).get(s, "") for s in rows.system})
    return _result(
        text,
        min(v[0] for v in values),
        "every FP16/FP32 pair of the sweep",
        True,
        "; ".join(devices),
        _compare(f, values, tol),
        caveats=[c for cell in rows.get("caveats", []) for c in guards.split(cell)],
        cpu=any(guards.cpu_stand_in(d) for d in devices),
        ran_as=" ".join(map(str, rows.get("fp32_ran_as", []))),
    )


def _run_nodes(t):
    runs = _with_repeat(t["training_throughput"])
    runs = runs[runs.status == "ok"]
    cols = ["nodes", "device"] + (["caveats"] if "caveats" in runs else [])
    return runs.set_index(RUN_KEY)[cols]


RUN_KEY = ["system", "framework", "precision", "gpus", "input", "repeat"]


def _with_repeat(df):
    """Rows of a table made before the repeats were kept: each point ran once."""
    return df.assign(repeat=(df["repeat"].fillna(1) if "repeat" in df else 1)).astype({"repeat": int})


def _per_run(table, t, metric, agg):
    """One value per point of a telemetry table: agg over its nodes of the per-node sum over devices,
    run by run, then the mean over the point's repeats (their caveats together)."""
    table = _with_repeat(table)
    df = table[(table.metric == metric) & (table.device != "lo")]
    per_node = df.groupby(RUN_KEY + ["node"]).agg(value=(agg[0], "sum")).reset_index()
    per_run = per_node.groupby(RUN_KEY).value.agg(agg[1]).reset_index()
    joined = per_run.join(_run_nodes(t), on=RUN_KEY, how="inner")
    if "caveats" not in joined:
        joined["caveats"] = ""
    point = RUN_KEY[:-1]
    return (
        joined.groupby(point)
        .agg(
            value=("value", "mean"),
            nodes=("nodes", "first"),
            device=("device", "first"),
            caveats=("caveats", lambda c: guards.join(x for cell in c for x in guards.split(cell))),
        )
        .reset_index()
    )


def _telemetry_caveats(runs):
    """A telemetry figure counts everything on its nodes: it needs isolated runs (its step CV does
    not matter to it)."""
    return [c for cell in runs.caveats for c in guards.split(cell) if not c.startswith("unstable")]


def storage_doubling(t, f, tol):
    runs = _per_run(t["storage_throughput"], t, "read_MBps", ("peak_MBps", "sum"))
    out, used = [], []
    for key, g in runs.groupby(["system", "framework", "precision", "input"]):
        one, two = g[g.nodes == 1], g[g.nodes == 2]
        if len(one) and len(two):
            a, b = one.loc[one.gpus.idxmax()], two.loc[two.gpus.idxmin()]
            used += [a, b]
            out.append(
                (
                    f"{key[1]} {key[2]}",
                    b.value / a.value,
                    f"{key[0]} {a.gpus} GPUs on 1 node vs {b.gpus} on 2",
                    b.device,
                )
            )
    if not out:
        raise Unmeasured(f"no run pair on 1 and 2 nodes in storage_throughput.csv; set {MULTI_NODE_KEYS}")
    return _node_pairs(f, tol, out, used, "peak read, 2 nodes / 1 node: ", min)


def _node_pairs(f, tol, out, used, what, value):
    """The result of a telemetry figure compared between node counts: out holds (label, ratio, point,
    device) per pair, used the point rows behind them; value picks the figure shown (min, max)."""
    ratios = [o[1] for o in out]
    return _result(
        what + "; ".join(f"{o[0]} {o[1]:.2f}x" for o in out),
        value(ratios),
        "; ".join(o[2] for o in out),
        True,
        out[0][3],
        _compare(f, ratios, tol),
        caveats=_telemetry_caveats(pd.DataFrame(used)),
        cpu=guards.cpu_stand_in(out[0][3]),
    )


def send_doubling(t, f, tol):
    runs = _per_run(t["network_throughput"], t, "send_MBps", ("mean_MBps", "mean"))
    runs = runs[runs.nodes >= 2]
    out, used = [], []
    for key, g in runs.groupby(["system", "framework", "precision", "input"]):
        if g.nodes.nunique() >= 2:
            a, b = g.loc[g.nodes.idxmin()], g.loc[g.nodes.idxmax()]
            used += [a, b]
            out.append((f"{key[1]} {key[2]}", b.value / a.value, f"{key[0]} {a.nodes} vs {b.nodes} nodes", b.device))
    if not out:
        raise Unmeasured(
            "no runs on two different multi-node counts (e.g. 2 and 4 nodes) in network_throughput.csv; "
            f"set {MULTI_NODE_KEYS}"
        )
    return _node_pairs(f, tol, out, used, "mean send per node, more nodes / fewer: ", max)


def send_fp16(t, f, tol):
    runs = _per_run(t["network_throughput"], t, "send_MBps", ("mean_MBps", "mean"))
    runs = runs[(runs.nodes >= 2) & (runs.framework == f["framework"])]
    wide = runs.pivot_table(index=["system", "gpus", "input"], columns="precision", values="value")
    if not {"fp16", "fp32"} <= set(wide.columns) or wide[["fp16", "fp32"]].dropna().empty:
        raise Unmeasured(
            f"no {f['framework']} FP16/FP32 pair across nodes in network_throughput.csv; set "
            + ", ".join(_sweep_keys(t, f["framework"], "fp16") + _sweep_keys(t, None, "fp32") + [MULTI_NODE_KEYS])
        )
    wide = wide[["fp16", "fp32"]].dropna()
    ratios = list(wide.fp16 / wide.fp32)
    text = "mean send per node FP16 / FP32: " + "; ".join(
        f"{s} {g} GPUs {r:.2f}x" for (s, g, _), r in zip(wide.index, ratios)
    )
    return _result(
        text,
        ratios[0],
        f"{f['framework']} across nodes",
        True,
        "; ".join(sorted(set(runs.device))),
        _compare(f, ratios, tol),
        caveats=_telemetry_caveats(runs),
        cpu=any(guards.cpu_stand_in(d) for d in runs.device),
    )


def int8_speedup(t, f, tol):
    rows = t["int8_throughput"]
    rows = rows[rows.model == "resnet50"]
    small = f["batches"] == "below_64"
    rows = rows[rows.batch_size < 64] if small else rows[rows.batch_size >= 64]
    if rows.empty:
        raise Unmeasured(
            f"no ResNet-50 batch size {'below' if small else 'of'} 64{'' if small else ' or more'} in "
            f"int8_throughput.csv; set inference.throughput.batch_sizes (and resnet50 in "
            f"inference.throughput.models)"
        )
    cpu = rows.engine.iloc[0] != "tensorrt"
    device = f"{rows.device.iloc[0]} ({rows.engine.iloc[0]}{', CPU' if cpu else ''})"
    text = "; ".join(f"batch {r.batch_size}: {r.int8_over_fp32:.2f}x" for r in rows.itertuples())
    # Each batch size's ratio with its interval: its slowest INT8 run over the fastest FP32 one, and back.
    values = [_int8_interval(r) for r in rows.itertuples()]
    return _result(
        text,
        rows.int8_over_fp32.median(),
        "batch sizes " + ", ".join(str(b) for b in rows.batch_size),
        True,
        device,
        _compare(f, values, tol),
        cpu=cpu,
    )


def _int8_interval(r):
    """(ratio, low, high) of one batch size: the median ratio scaled by the runs' spread on either side."""
    ratio, spread = r.int8_over_fp32, []
    for a, b in (("int8_worst", "fp32_best"), ("int8_best", "fp32_worst")):
        if not (_col(r, a) and _col(r, b)):
            return (ratio,) * 3
        spread.append((getattr(r, a) / r.int8_images_per_s) / (getattr(r, b) / r.fp32_images_per_s))
    return ratio, ratio * spread[0], ratio * spread[1]


def int8_accuracy(t, f, tol):
    rows = t["int8_accuracy"]
    if rows.empty:
        raise Unmeasured("int8_accuracy.csv has no network; set inference.models")
    diff = rows[f"diff_{f['metric']}"].abs()
    worst = rows.loc[diff.idxmax()]
    allowed = f["bound"] + 100.0 / rows.scored_images.min()
    text = f"largest |FP32 - INT8| {diff.max():.2f} points ({worst.network}); allowed {allowed:.2f}"
    point = ", ".join(f"{r.network} ({r.scored_images} images)" for r in rows.itertuples())
    device = f"{rows.engine.iloc[0]}" + (", CPU" if rows.engine.iloc[0] != "tensorrt" else "")
    missing = f"on {len(rows)} of the study's 7 networks (inference.models adds the others)" if len(rows) < 7 else ""
    # An accuracy finding does not depend on the device: a CPU's figure decides it as a GPU's would.
    return _result(text, diff.max(), point, not missing, device, diff.max() <= allowed, missing)


def time_to_accuracy(t, f, tol):
    rows = t["time_to_accuracy"]
    rows = rows[rows.status == "ok"]
    if rows.empty:
        raise Unmeasured("no long-test run in time_to_accuracy.csv; set training.accuracy.gpus")
    g = _nearest(sorted(set(rows.gpus)), f["gpus"])
    r = rows[rows.gpus == g].sort_values("time_to_target_s").iloc[0]
    hours = r.time_to_target_s / 3600 if r.reached else None
    text = (
        f"top-1 >= {r.target_top1:g}% in {hours:.3g} h"
        if hours is not None
        else f"top-1 {r.best_top1:g}% < target {r.target_top1:g}% after {r.epochs_run} epochs"
    )
    point = f"{r.system} {r.framework} {r.precision}, {g} {_units(r.device)} on {r.nodes} node(s)"
    if r.val_images != 50000:
        raise Unmeasured(
            f"{text} at {point}, but on {r.val_images} val images, not ILSVRC2012's 50,000; set "
            f"dataset.root (ILSVRC2012) and training.accuracy (target_top1, epochs)"
        )
    holds = hours is not None and hours <= f["hours"] * (1 + tol["relative"])
    caveats = [c for c in guards.split(_col(r, "caveats", "")) if not c.startswith("unstable")]
    return _result(
        text,
        hours,
        point,
        g == f["gpus"],
        r.device,
        holds,
        caveats=caveats,
        cpu=guards.cpu_stand_in(r.device),
        ran_as=_col(r, "ran_as", ""),
    )


def _one(f, low, high, tol):
    """True / False / None of one figure's interval against a range or rounded finding."""
    rel = tol["relative"]
    if f["kind"] == "range":
        lo, hi = f["low"] * (1 - rel), f["high"] * (1 + rel)
        return True if lo <= low and high <= hi else False if high < lo or low > hi else None
    if f.get("below"):
        limit = f["value"] * (1 - rel)
        return True if high < limit else False if low >= limit else None
    lo, hi = f["value"] * (1 - rel), f["value"] * (1 + rel)
    return True if lo <= low and high <= hi else False if high < lo or low > hi else None


def _compare(f, values, tol):
    """values: figures, or (figure, low, high) with their intervals over the runs."""
    return _all(_one(f, *(v[1:] if isinstance(v, tuple) else (v, v)), tol) for v in values)


# quantity -> (its function, the table it reads)
MEASURE = {
    "scaling": (scaling, "scaling"),
    "best_scaling": (best_scaling, "scaling"),
    "stability": (stability, "training_throughput"),
    "system_gap": (system_gap, "system_comparison"),
    "fp16_gain": (fp16_gain, "fp16_vs_fp32"),
    "storage_doubling": (storage_doubling, "storage_throughput"),
    "send_doubling": (send_doubling, "network_throughput"),
    "send_fp16": (send_fp16, "network_throughput"),
    "int8_speedup": (int8_speedup, "int8_throughput"),
    "int8_accuracy": (int8_accuracy, "int8_accuracy"),
    "time_to_accuracy": (time_to_accuracy, "time_to_accuracy"),
}
