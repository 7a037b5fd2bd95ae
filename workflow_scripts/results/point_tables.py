"""The training tables that compare points (one row per point, training_tables.py writes them):
each point's runs as their mean with the slowest and fastest beside it (the interval a verdict
uses), what the precision ran as, and the caveats of results/guards.py with `vouched`; FP16 against
FP32, system against system, each input path against synthetic data.
"""

import itertools

import pandas as pd

from . import guards

KEY = ["system", "framework", "precision", "input"]


POINT = KEY + ["gpus"]


def at(table, r, keys=POINT, **given):
    """The rows of `table` at r's point (r: a row of another table, as itertuples gives it): its
    values of `keys`, and of `given`'s columns those values."""
    wanted = pd.Series({**{k: getattr(r, k) for k in keys}, **given})
    return table[(table[list(wanted.index)] == wanted).all(axis=1)]


def points(runs):
    """One row per sweep point over its completed runs: images/s as their mean, lowest and highest,
    the largest step CV, isolation over all of them, what the precision ran as, and every run's
    caveats."""
    rows = []
    planned = runs.groupby(POINT, sort=True).size() if len(runs) else {}
    for key, g in runs[runs.status == "ok"].groupby(POINT, sort=True):
        ips = g.images_per_s
        short = guards.fewer_repeats(dict(zip(POINT, key)), len(g), planned[key], runs)
        rows.append(
            {
                **dict(zip(POINT, key)),
                "nodes": g.nodes.iloc[0],
                "global_batch": g.global_batch.iloc[0],
                "repeats": len(g),
                "images_per_s": ips.mean(),
                "images_per_s_low": ips.min(),
                "images_per_s_high": ips.max(),
                "step_cv": g.step_cv.max(),
                "window_cv": g.get("window_cv", pd.Series(dtype=float)).max(),
                "stable": bool(g.stable.all()),
                "isolated": guards.combine_isolated(g.isolated),
                "ran_as": ", ".join(sorted(set(g.ran_as.astype(str)))),
                "execution_mode": ", ".join(
                    sorted(set(g.get("execution_mode", pd.Series(dtype=str)).fillna("").astype(str)) - {""})
                ),
                "device": g.device.iloc[0],
                "gradient_bytes": g.gradient_bytes.iloc[0],
                "gradient_bytes_from": g.gradient_bytes_from.iloc[0],
                "caveats": guards.join([*(c for cell in g.caveats for c in guards.split(cell)), *short]),
                "transport": ", ".join(sorted(set(g.transport.fillna("").astype(str)) - {""})),
                "nccl_version": ", ".join(sorted(set(g.nccl_version.fillna("").astype(str)) - {""})),
                "runs": " ".join(guards.run_name(r) for _, r in g.iterrows()),
            }
        )
    return pd.DataFrame(rows)


def unvouched(table, what):
    """Markdown lines after a table: each row that has caveats, with them."""
    bad = table[table.caveats.astype(str).str.len() > 0] if len(table) else table
    if bad.empty:
        return []
    lines = [f"## Not vouched for: {len(bad)} of {len(table)} {what}", ""]
    for r in bad.itertuples():
        lines.append(f"- {r.row_label}: " + "; ".join(guards.split(r.caveats)))
    return lines


FP16_COLUMNS = [
    "system",
    "framework",
    "input",
    "gpus",
    "fp32_images_per_s",
    "fp16_images_per_s",
    "fp16_gain_percent",
    "fp16_over_fp32",
    "fp16_over_fp32_low",
    "fp16_over_fp32_high",
    "fp32_ran_as",
    "fp16_ran_as",
    "repeats",
    "device",
    "vouched",
    "caveats",
]


FP16_SHOWN = FP16_COLUMNS[:7] + ["fp32_ran_as", "fp16_ran_as", "vouched"]


def over(a, b):
    """a over b for two point rows: the ratio of their means and its interval (a's lowest over b's
    highest, a's highest over b's lowest)."""
    low, high = a.images_per_s_low / b.images_per_s_high, a.images_per_s_high / b.images_per_s_low
    return a.images_per_s / b.images_per_s, low, high


def fp16_vs_fp32(runs):
    pts = points(runs)
    rows = []
    for key, g in pts.groupby(["system", "framework", "input", "gpus"]) if len(pts) else ():
        by = {r.precision: r for r in g.itertuples()}
        if not {"fp32", "fp16"} <= set(by):
            continue
        a, b = by["fp16"], by["fp32"]
        ratio, low, high = over(a, b)
        caveats = guards.split(a.caveats) + guards.split(b.caveats)
        rows.append(
            {
                **dict(zip(["system", "framework", "input", "gpus"], key)),
                "fp32_images_per_s": b.images_per_s,
                "fp16_images_per_s": a.images_per_s,
                "fp16_gain_percent": (ratio - 1) * 100,
                "fp16_over_fp32": ratio,
                "fp16_over_fp32_low": low,
                "fp16_over_fp32_high": high,
                "fp32_ran_as": b.ran_as,
                "fp16_ran_as": a.ran_as,
                "repeats": min(a.repeats, b.repeats),
                "device": b.device,
                "vouched": not caveats,
                "caveats": guards.join(caveats),
            }
        )
    return pd.DataFrame(rows, columns=FP16_COLUMNS)


def ran_as_note(runs):
    """What fp32 and fp16 ran as in this sweep, device by device: a header, not a guess."""
    ok = runs[runs.status == "ok"]
    said = []
    for (precision, device), g in ok.groupby(["precision", "device"]):
        said.append(f"{precision} ran as {', '.join(sorted(set(g.ran_as.astype(str))))} on {device}")
    return "; ".join(said) + "." if said else ""


SYSTEMS_COLUMNS = [
    "system_a",
    "system_b",
    "framework",
    "precision",
    "input",
    "gpus",
    "a_images_per_s",
    "b_images_per_s",
    "a_over_b_percent",
    "a_over_b",
    "a_over_b_low",
    "a_over_b_high",
    "a_device",
    "b_device",
    "ran_as",
    "vouched",
    "caveats",
]


SYSTEMS_SHOWN = SYSTEMS_COLUMNS[:9] + ["vouched"]


def system_comparison(runs):
    """Every pair of systems, point by point (the study's SXM2 vs PCIe, V100 vs P100)."""
    point_key = ["framework", "precision", "input", "gpus"]
    pts = points(runs)
    rows = []
    if len(pts):
        by = {tuple(getattr(r, k) for k in ["system", *point_key]): r for r in pts.itertuples()}
        systems = sorted(set(pts.system))
        for a, b in itertools.combinations(systems, 2):
            for point in sorted({k[1:] for k in by if k[0] == a} & {k[1:] for k in by if k[0] == b}):
                ra, rb = by[(a, *point)], by[(b, *point)]
                ratio, low, high = over(ra, rb)
                caveats = guards.split(ra.caveats) + guards.split(rb.caveats)
                rows.append(
                    {
                        "system_a": a,
                        "system_b": b,
                        **dict(zip(point_key, point)),
                        "a_images_per_s": ra.images_per_s,
                        "b_images_per_s": rb.images_per_s,
                        "a_over_b_percent": (ratio - 1) * 100,
                        "a_over_b": ratio,
                        "a_over_b_low": low,
                        "a_over_b_high": high,
                        "a_device": ra.device,
                        "b_device": rb.device,
                        "ran_as": ", ".join(sorted({ra.ran_as, rb.ran_as})),
                        "vouched": not caveats,
                        "caveats": guards.join(caveats),
                    }
                )
    return pd.DataFrame(rows, columns=SYSTEMS_COLUMNS)


INPUT_PATHS_SHOWN = [
    "system",
    "framework",
    "precision",
    "gpus",
    "input",
    "images_per_s",
    "step_cv",
    "window_cv",
    "stable",
    "of_synthetic_percent",
    "vouched",
]


def input_paths(runs):
    """Each input path against synthetic data (compute without I/O), point by point: the study's
    finding that the data path decides throughput as much as the GPU."""
    pts = points(runs)
    point = ["system", "framework", "precision", "gpus"]
    columns = point + [
        "input",
        "images_per_s",
        "step_cv",
        "window_cv",
        "stable",
        "synthetic_images_per_s",
        "of_synthetic_percent",
        "repeats",
        "vouched",
        "caveats",
    ]
    if pts.empty:
        return pd.DataFrame(columns=columns)
    synthetic = {tuple(getattr(r, k) for k in point): r for r in pts[pts.input == "synthetic"].itertuples()}
    rows = []
    for r in pts.sort_values(point + ["input"]).itertuples():
        ref = synthetic.get(tuple(getattr(r, k) for k in point))
        caveats = guards.split(r.caveats) + (guards.split(ref.caveats) if ref is not None and ref is not r else [])
        rows.append(
            {
                **{k: getattr(r, k) for k in point},
                "input": r.input,
                "images_per_s": r.images_per_s,
                "step_cv": r.step_cv,
                "window_cv": getattr(r, "window_cv", None),
                "stable": r.stable,
                "synthetic_images_per_s": ref.images_per_s if ref is not None else None,
                "of_synthetic_percent": r.images_per_s / ref.images_per_s * 100 if ref is not None else None,
                "repeats": r.repeats,
                "vouched": not caveats,
                "caveats": guards.join(caveats),
            }
        )
    return pd.DataFrame(rows, columns=columns)


GUARDS = (
    "vouched: none of the verdict guards applies (docs/results.md#verdict-guards): no run behind the figure is "
    "unstable (images/s CV over 10-step windows > 2%) or not known to be isolated, and no efficiency is above "
    "100% by more than 2%; the figures that are not are listed under the table with why, and no verdict rests on them."
)


def point_label(r):
    return f"{r.system}/{r.framework}_{r.precision}_{r.gpus}gpu ({r.input})"


def labelled(table, label):
    """table with a row_label column (each row's name in the lists of caveats)."""
    out = table.copy()
    out["row_label"] = [label(r) for r in table.itertuples()] if len(table) else []
    return out
