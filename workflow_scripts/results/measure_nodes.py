"""The verdict table's measures read from the runs' telemetry (Fig. 7, 8): storage reads and the
gradient exchange as the nodes double, and what FP16 sends against FP32."""

import pandas as pd

from ..common import input_bound
from . import guards
from .verdict_rules import MULTI_NODE_KEYS, Unmeasured, compare, result, sweep_keys


def _run_nodes(t, cold=False):
    """The runs' nodes, device and caveats; cold: with the cache caveat of a cold-read figure."""
    runs = t["training_throughput"]
    runs = runs[runs.status == "ok"]
    if cold and "cache_not_emptied" in runs:
        runs = runs.assign(
            caveats=[
                guards.join([*guards.split(r.get("caveats", "")), *filter(None, [guards.cache_caveat(r)])])
                for _, r in runs.iterrows()
            ]
        )
    cols = ["nodes", "device"] + (["caveats"] if "caveats" in runs else [])
    return runs.set_index(RUN_KEY)[cols]


RUN_KEY = ["system", "framework", "precision", "gpus", "input", "repeat"]


def _per_run(table, t, metric, agg, cold=False):
    """One value per point of a telemetry table: agg over its nodes of the per-node sum over devices,
    run by run, then the mean over the point's repeats (their caveats together)."""
    df = table[(table.metric == metric) & (table.device != "lo")]
    per_node = df.groupby(RUN_KEY + ["node"]).agg(value=(agg[0], "sum")).reset_index()
    per_run = per_node.groupby(RUN_KEY).value.agg(agg[1]).reset_index()
    joined = per_run.join(_run_nodes(t, cold), on=RUN_KEY, how="inner")
    if "caveats" not in joined:
        joined["caveats"] = ""
    point = RUN_KEY[:-1]
    if joined.empty:  # no run with this telemetry (none recorded, or no counters to read): no point
        return pd.DataFrame(columns=[*point, "value", "nodes", "device", "caveats"])
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
    not matter to it, nor whether its input kept up with its GPUs: it is the input's figure)."""
    return [
        c
        for cell in runs.caveats
        for c in guards.split(cell)
        if not c.startswith(("unstable", input_bound.INPUT_BOUND))
    ]


def storage_doubling(t, f, tol):
    runs = _per_run(t["storage_throughput"], t, "read_MBps", ("peak_MBps", "sum"), cold=True)
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
    return result(
        what + "; ".join(f"{o[0]} {o[1]:.2f}x" for o in out),
        value(ratios),
        "; ".join(o[2] for o in out),
        True,
        out[0][3],
        compare(f, ratios, tol),
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
            + ", ".join(sweep_keys(t, f["framework"], "fp16") + sweep_keys(t, None, "fp32") + [MULTI_NODE_KEYS])
        )
    wide = wide[["fp16", "fp32"]].dropna()
    ratios = list(wide.fp16 / wide.fp32)
    text = "mean send per node FP16 / FP32: " + "; ".join(
        f"{s} {g} GPUs {r:.2f}x" for (s, g, _), r in zip(wide.index, ratios)
    )
    return result(
        text,
        ratios[0],
        f"{f['framework']} across nodes",
        True,
        "; ".join(sorted(set(runs.device))),
        compare(f, ratios, tol),
        caveats=_telemetry_caveats(runs),
        cpu=any(guards.cpu_stand_in(d) for d in runs.device),
    )
