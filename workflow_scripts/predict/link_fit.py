"""The links of the scaling prediction (scaling_prediction.py): the interconnect stage's own
all-reduces read by system and GPU count, the node's link and the network fitted to them
(link_least_squares.py), a value the user set in their place, each link's errors at the GPU counts
left out of its fit, and the model's verdict on itself from its worst error."""

import csv
from dataclasses import dataclass

from ..common.errors import StageError
from ..interconnect import prediction as ic
from . import collective_model as cm
from . import link_least_squares as lls

SOURCE = "torch.distributed"  # the interconnect stage's own rows (nccl-tests' sit beside them)


def read_table(path):
    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    except OSError as exc:
        raise StageError(f"{path}: the interconnect table cannot be read ({exc})")


def allreduces(table, system):
    """{(gpus, nodes): [(bytes, median s)]} of the interconnect stage's own all-reduces on a system."""
    out = {}
    for r in table:
        if r["system"] == system and r["collective"] == "all_reduce" and r["source"] == SOURCE:
            key = (int(r["gpus"]), int(r["nodes"]))
            out.setdefault(key, []).append((int(r["bytes"]), float(r["median_s"] or r["time_s"])))
    return {k: sorted(v) for k, v in out.items()}


def fit_window(groups, messages):
    """(smallest, largest) size a fit uses: the timed sizes that bracket the messages a step sends,
    the largest timed at or below the smallest message to the smallest timed at or above the
    largest. A line through bandwidth and latency holds only locally: NCCL changes protocol and
    channels with size, so one line over every size misses the step's own (docs/interconnect.md,
    "Predicting past the largest machine measured"). At least two sizes, so a line has two to go through."""
    sizes = sorted({b for points in groups.values() for b, _ in points})
    if len(sizes) < 2:
        return (sizes[0], sizes[0]) if sizes else (0, 0)
    below = [b for b in sizes if b <= min(messages)]
    above = [b for b in sizes if b >= max(messages)]
    floor = min(below[-1] if below else sizes[0], sizes[-2])
    ceiling = max(above[0] if above else sizes[-1], sizes[sizes.index(floor) + 1])
    return floor, ceiling


def extrapolated(groups, messages):
    """A sentence where a step's largest message lies beyond the largest size timed: the link's line
    is then extrapolated, and the model's all-reduce of the step cannot be checked against the table."""
    largest = max((b for points in groups.values() for b, _ in points), default=None)
    if largest is None or max(messages) <= largest:
        return ""
    return (
        f"; a step's messages (up to {max(messages)} B) lie beyond the largest size timed ({largest} B): the link "
        f"is extrapolated to them (interconnect.max_bytes)"
    )


@dataclass(frozen=True)
class Fitted:
    """A link fitted to the table (None: none, and why in how), and its errors at the GPU counts
    left out of the fit in turn (lls.PointError)."""

    link: cm.Link | None
    how: str
    held_out: tuple = ()


def fit_intra(groups, window):
    """The node's link: all-reduces within one node at the window's sizes, every GPU count pooled."""
    lo, hi = window
    points = [(n, b, t) for (n, m), pts in sorted(groups.items()) if m == 1 for b, t in pts if lo <= b <= hi]
    counts = sorted({n for n, _, _ in points})
    if not counts:
        return Fitted(None, "no all-reduce within one node was timed")
    try:
        fit = lls.fit_link_pooled(points)
    except StageError as exc:
        return Fitted(None, f"not fitted: {exc}")
    sizes = sorted({b for _, b, _ in points})
    how = f"fitted to {'/'.join(map(str, counts))} GPUs in one node, {len(sizes)} sizes {sizes[0]}-{sizes[-1]} B"
    return Fitted(fit.link, how, tuple(lls.leave_one_out_links(points)))


def fit_inter(groups, intra, settings, window):
    """The network's link: what the all-reduces across nodes leave once the node's link is known,
    every layout pooled; with several, each is also predicted from the others. A count that does not
    fill its nodes is spread evenly over them, as cm.System.layout does."""
    lo, hi = window
    across = {(n, m): [(b, t) for b, t in pts if lo <= b <= hi] for (n, m), pts in sorted(groups.items()) if m > 1}
    if not across:
        return Fitted(None, "no all-reduce across nodes was timed")
    layout = {key: (key[0] // key[1] if key[0] % key[1] == 0 else key[0] / key[1], key[1]) for key in across}
    if intra is None and any(g > 1 for g, _ in layout.values()):
        return Fitted(None, "across nodes timed, but the link within a node is not known")

    def fit(keys):
        return lls.fit_inter_link_pooled(
            [(*layout[k], across[k]) for k in keys], intra, settings.topology, settings.algorithm
        )

    held = []
    try:
        link = fit(list(across)).link
        for key in across if len(across) > 1 else ():
            others = fit([k for k in across if k != key]).link
            system = cm.System(layout[key][0], intra, others, settings.topology, settings.algorithm)
            held += [lls.PointError(key[0], b, t, system.allreduce_s(b, key[0])) for b, t in across[key]]
    except StageError as exc:
        return Fitted(None, f"not fitted: {exc}")
    how = "fitted to " + ", ".join(f"{n} GPUs on {m} nodes" for n, m in across)
    return Fitted(link, f"{how} ({settings.topology}, {settings.algorithm} across nodes)", tuple(held))


def chosen_link(fitted, busbw, latency_us, key):
    """(link, where it comes from): what prediction.<key> sets, the rest fitted."""
    if not busbw and latency_us is None:
        return fitted.link, fitted.how
    bw = busbw or (fitted.link.busbw_GBps if fitted.link else None)
    if bw is None:
        return None, f"{fitted.how}; prediction.{key}.latency_us set without a bandwidth"
    if latency_us is not None:
        latency, said = latency_us * 1e-6, f"{latency_us:g} us set"
    elif fitted.link:
        latency, said = fitted.link.step_latency_s, "latency fitted"
    else:
        latency, said = 0.0, "latency 0: none set, none timed"
    bw_said = f"{bw:g} GB/s set" if busbw else "bandwidth fitted"
    return cm.Link(bw, latency), f"prediction.{key}: {bw_said}, {said}"


@dataclass(frozen=True)
class Links:
    """A system's links as timed (measured: the system the sweep ran on) and as the prediction
    uses them (target: what prediction.* sets, over the fitted ones)."""

    measured: cm.System
    target: cm.System
    intra: Fitted
    inter: Fitted
    intra_how: str
    inter_how: str


def links(groups, own_gpus_per_node, settings, messages):
    window = fit_window(groups, messages)
    intra = fit_intra(groups, window)
    inter = fit_inter(groups, intra.link, settings, window)
    measured = cm.System(own_gpus_per_node, intra.link, inter.link, settings.topology, settings.algorithm)
    intra_link, intra_how = chosen_link(intra, settings.intra_busbw, settings.intra_latency_us, "intra_node")
    inter_link, inter_how = chosen_link(inter, settings.inter_busbw, settings.inter_latency_us, "inter_node")
    target = cm.System(
        settings.gpus_per_node or own_gpus_per_node, intra_link, inter_link, settings.topology, settings.algorithm
    )
    return Links(measured, target, intra, inter, intra_how, inter_how)


# ---------------------------------------------------------------------------------------------
# The model's own errors


def link_errors(w, lk, groups):
    """(error, what) of the model's all-reduce of a step's messages against the stage's own times,
    interpolated at those sizes, at every GPU count timed: the figure each prediction rests on."""
    out = []
    messages = cm.bucket_sizes(w.gradient_bytes, w.bucket_bytes)
    for (n, m), points in sorted(groups.items()):
        timed = [ic.interpolate(points, b) for b in messages]
        model = cm.allreduce_at(lk.measured, w.model, n)
        if None in timed or model is None:
            continue
        out.append((model / sum(timed) - 1, f"the all-reduce of a step's {len(messages)} message(s) at {n} GPUs"))
    return out


def held_out_link_errors(lk):
    """(error, what) of every size timed at a GPU count the link was fitted without."""
    return [
        (p.rel_error, f"the all-reduce of {p.bytes} B at {p.gpus} GPUs, fitted without them")
        for p in lk.intra.held_out + lk.inter.held_out
    ]


def outside_errors(points, unstable=()):
    """(error, what) of every measured point outside the model's interval: the nearest bound
    against it, what no overlap fraction can reach. An unstable point (GPU count in `unstable`)
    is said to be one."""
    out = []
    for p in points:
        no, full = cm.efficiency(p["t1"], p["c"], 0.0), cm.efficiency(p["t1"], p["c"], 1.0)
        e, which = p["efficiency"], f"{p['gpus']} GPUs" + (" (an unstable run)" if p["gpus"] in unstable else "")
        if e < no:
            out.append((no / e - 1, f"{which} ran at {e:.1%}, below no overlap ({no:.1%})"))
        elif e > full:
            out.append((full / e - 1, f"{which} ran at {e:.1%}, above full overlap ({full:.1%})"))
    return out


def quality(held_out, in_sample, tolerance):
    """(label, why) of cm.judge on the held-out errors; poor wherever the model misses a point it
    was fitted to by more than the tolerance (no prediction can do better there)."""
    worst = max(in_sample, key=lambda e: abs(e[0]), default=None)
    if worst and abs(worst[0]) > tolerance:
        return "poor", (
            f"{worst[1]}: the model is off by {worst[0]:+.0%} where it was fitted, above the {tolerance:.0%} "
            f"tolerance: read its figures as bounds, not forecasts"
        )
    label, why = cm.judge([e for e, _ in held_out], tolerance)
    if held_out:
        worst_held = max(held_out, key=lambda e: abs(e[0]))
        why = f"{why} (worst: {worst_held[1]}, {worst_held[0]:+.1%})"
    elif worst:
        why = f"{why}; where it was fitted it is off by at most {abs(worst[0]):.1%}"
    return label, why


# ---------------------------------------------------------------------------------------------
# The rows
