"""What every measure of the verdict table shares (conclusions_measure.py's MEASURE): the result
a measure returns, with the caveats of the figures it rests on (results/guards.py); a figure with
its interval over the repeats and how an interval is judged against the study's figure (True, False,
or None: across it, inconclusive); and the lookups into the tables that the measures share.
"""

import math

# The input path a training-derived row is read from when the sweep ran several: the framework's
# own real-data path first (auto resolves to dali on a GPU, cpu on a CPU); synthetic data only
# where nothing else ran, since the study trained on real data.
INPUT_ORDER = ["dali", "gpu", "cpu", "auto", "synthetic"]
MULTI_NODE_KEYS = "systems.<system>.max_nodes and training.gpus (a GPU count above systems.<system>.gpus_per_node)"


class Unmeasured(Exception):
    """This sweep has no point for the finding; the message names the config keys that would add one."""


def is_cpu(device):
    return str(device).startswith("CPU")


def units(device):
    return "CPU processes" if is_cpu(device) else "GPUs"


def nearest(values, target):
    """The value nearest target on a log scale (GPU counts, batch sizes); ties go to the larger."""
    return min(values, key=lambda v: (abs(math.log2(v / target)), -v))


def preferred_input(df):
    present = [i for i in INPUT_ORDER if i in set(df["input"])]
    return df[df["input"] == present[0]] if present else df


def devices_of(t):
    """system -> device, from the runs that completed."""
    ok = t["training_throughput"][t["training_throughput"].status == "ok"]
    return ok.groupby("system").device.first().to_dict()


def sweep_keys(t, framework=None, precision=None):
    """The config keys to change so the sweep has runs of this framework and precision."""
    runs = t["training_throughput"]
    keys = []
    if framework and framework not in set(runs.framework):
        keys.append(f"training.frameworks (add {framework})")
    if precision and precision not in set(runs.precision):
        keys.append(f"training.precisions (add {precision})")
    return keys


def failed_points(t, framework, precision):
    runs = t["training_throughput"]
    bad = runs[(runs.framework == framework) & (runs.precision == precision) & (runs.status != "ok")]
    return "; ".join(f"{r.system} {r.gpus} GPUs {r.status}: {r.why}" for r in bad.itertuples())


def result(text, value, point, same, device, holds, note="", caveats=(), cpu=False, ran_as=""):
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


def col(r, name, default=None):
    """A cell of a table row, or `default` where it is empty or the row's table has no such column
    (a column only some points or some tables carry: an interval's bounds, a ratio's own cell)."""
    value = getattr(r, name, default)
    return default if value is None or (isinstance(value, float) and math.isnan(value)) else value


def interval(r, column):
    """(value, low, high) of a figure with its interval over the repeats (a point without one: the
    value three times)."""
    v = getattr(r, column)
    return v, col(r, f"{column}_low", v), col(r, f"{column}_high", v)


def at_least(low, high, threshold):
    """True / False / None: the interval wholly at or above threshold, wholly below, or across it."""
    return True if low >= threshold else False if high < threshold else None


def all_of(decisions):
    """One verdict of several: any False is False, all True is True, else None (inconclusive)."""
    decisions = list(decisions)
    return False if False in decisions else True if all(d is True for d in decisions) else None


def one(f, low, high, tol):
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


def compare(f, values, tol):
    """values: figures, or (figure, low, high) with their intervals over the runs."""
    return all_of(one(f, *(v[1:] if isinstance(v, tuple) else (v, v)), tol) for v in values)
