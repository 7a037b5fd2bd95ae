"""How each kind of the study's findings is measured from this run's tables (conclusions.py
assembles the rows): one function per quantity of study_findings.yaml, given the tables, the
finding and its tolerance; a finding this sweep has no point for raises Unmeasured, naming the
config keys that would add one."""

import math

import pandas as pd

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


def _result(text, value, point, same, device, holds, note=""):
    return {
        "measured": text,
        "measured_value": value,
        "point": point,
        "same_point": bool(same),
        "device": device,
        "holds": bool(holds),
        "note": note,
    }


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
    device = _run_device(t, r)
    point = (
        f"{r.system} {r.framework} {r.precision}, {r.gpus} {_units(device)} on {r.nodes} node(s) ({r.scope}), "
        f"{r.input} input, against {r.baseline_gpus}"
    )
    text = f"{r.speedup:.2f}x on {r.gpus} (efficiency {r.efficiency:.1%})"
    return _result(
        text, r.efficiency, point, int(r.gpus) == f["gpus"], device, r.efficiency >= study * (1 - tol["relative"])
    )


def best_scaling(t, f, tol):
    rows = t["scaling"]
    rows = rows[rows.gpus > rows.baseline_gpus]
    parts, verdicts, points, same = [], [], [], True
    for precision in f["precisions"]:
        p = rows[rows.precision == precision]
        frameworks = sorted(set(p.framework))
        if f["framework"] not in frameworks or len(frameworks) < 2:
            continue
        common = set.intersection(*(set(p[p.framework == x].gpus) for x in frameworks))
        if not common:
            continue
        g = _nearest(sorted(common), f["gpus"])
        eff = {x: _preferred_input(p[(p.framework == x) & (p.gpus == g)]).efficiency.iloc[0] for x in frameworks}
        best_other = max(v for x, v in eff.items() if x != f["framework"])
        verdicts.append(eff[f["framework"]] >= best_other * (1 - tol["relative"]))
        parts.append(
            f"{precision}: " + ", ".join(f"{x} {v:.1%}" for x, v in sorted(eff.items(), key=lambda kv: -kv[1]))
        )
        points.append(f"{precision} at {g}")
        same = same and g == f["gpus"]
    if not parts:
        raise Unmeasured(
            f"no point where {f['framework']} and another framework both ran above the baseline in "
            f"{' or '.join(f['precisions'])}; set training.frameworks (two or more, with "
            f"{f['framework']}) and training.gpus (two counts or more)"
        )
    device = "; ".join(sorted(set(_devices(t).values())))
    return _result(
        "efficiency " + "; ".join(parts),
        None,
        ", ".join(points) + f" (the largest common point nearest {f['gpus']})",
        same,
        device,
        all(verdicts),
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
    return _result(text, worst.step_cv, point, True, worst.device, (runs.step_cv > tol["threshold"]).any())


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
            ratio = (r.a_images_per_s / r.b_images_per_s) if r.system_a == a else (r.b_images_per_s / r.a_images_per_s)
            rows.append(
                {
                    "pair": f"{a} over {b}",
                    "framework": r.framework,
                    "precision": r.precision,
                    "gpus": r.gpus,
                    "ratio": ratio,
                }
            )
    rows = pd.DataFrame(rows, columns=["pair", "framework", "precision", "gpus", "ratio"])
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
        _compare(f, list(rows.ratio), tol),
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
    ratios = list(rows.fp16_images_per_s / rows.fp32_images_per_s)
    text = "; ".join(
        f"{r.framework} {r.gpus}: {r.fp16_images_per_s / r.fp32_images_per_s:.2f}x" for r in rows.itertuples()
    )
    device = "; ".join(sorted({_devices(t).get(s, "") for s in rows.system}))
    return _result(text, min(ratios), "every FP16/FP32 pair of the sweep", True, device, _compare(f, ratios, tol))


def _run_nodes(t):
    runs = t["training_throughput"]
    runs = runs[runs.status == "ok"]
    return runs.set_index(["system", "framework", "precision", "gpus", "input"])[["nodes", "device"]]


def _per_run(table, t, metric, agg):
    """One value per run of a telemetry table (agg over its nodes of the per-node sum over devices)."""
    df = table[(table.metric == metric) & (table.device != "lo")]
    key = ["system", "framework", "precision", "gpus", "input"]
    per_node = df.groupby(key + ["node"]).agg(value=(agg[0], "sum")).reset_index()
    per_run = per_node.groupby(key).value.agg(agg[1]).reset_index()
    return per_run.join(_run_nodes(t), on=key, how="inner")


def storage_doubling(t, f, tol):
    runs = _per_run(t["storage_throughput"], t, "read_MBps", ("peak_MBps", "sum"))
    out = []
    for key, g in runs.groupby(["system", "framework", "precision", "input"]):
        one, two = g[g.nodes == 1], g[g.nodes == 2]
        if len(one) and len(two):
            a, b = one.loc[one.gpus.idxmax()], two.loc[two.gpus.idxmin()]
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
    ratios = [o[1] for o in out]
    text = "peak read, 2 nodes / 1 node: " + "; ".join(f"{o[0]} {o[1]:.2f}x" for o in out)
    return _result(text, min(ratios), "; ".join(o[2] for o in out), True, out[0][3], _compare(f, ratios, tol))


def send_doubling(t, f, tol):
    runs = _per_run(t["network_throughput"], t, "send_MBps", ("mean_MBps", "mean"))
    runs = runs[runs.nodes >= 2]
    out = []
    for key, g in runs.groupby(["system", "framework", "precision", "input"]):
        if g.nodes.nunique() >= 2:
            a, b = g.loc[g.nodes.idxmin()], g.loc[g.nodes.idxmax()]
            out.append((f"{key[1]} {key[2]}", b.value / a.value, f"{key[0]} {a.nodes} vs {b.nodes} nodes", b.device))
    if not out:
        raise Unmeasured(
            "no runs on two different multi-node counts (e.g. 2 and 4 nodes) in network_throughput.csv; "
            f"set {MULTI_NODE_KEYS}"
        )
    ratios = [o[1] for o in out]
    text = "mean send per node, more nodes / fewer: " + "; ".join(f"{o[0]} {o[1]:.2f}x" for o in out)
    return _result(text, max(ratios), "; ".join(o[2] for o in out), True, out[0][3], _compare(f, ratios, tol))


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
    return _result(text, ratios[0], f"{f['framework']} across nodes", True, "", _compare(f, ratios, tol))


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
    return _result(
        text,
        rows.int8_over_fp32.median(),
        "batch sizes " + ", ".join(str(b) for b in rows.batch_size),
        True,
        device,
        _compare(f, list(rows.int8_over_fp32), tol),
    )


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
    return _result(text, hours, point, g == f["gpus"], r.device, holds)


def _compare(f, values, tol):
    rel = tol["relative"]
    if f["kind"] == "range":
        return all(f["low"] * (1 - rel) <= v <= f["high"] * (1 + rel) for v in values)
    if f.get("below"):
        return all(v < f["value"] * (1 - rel) for v in values)
    return all(abs(v / f["value"] - 1) <= rel for v in values)


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
