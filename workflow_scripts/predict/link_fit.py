"""The links of the scaling prediction (scaling_prediction.py): the interconnect stage's own
all-reduces read by system and GPU count, the node's link and the network fitted to them by least
squares over the timed sizes around a step's messages (link_least_squares.py), a latency that no
link can have flagged, a value the user set in their place, each link's errors at the GPU counts
left out of its fit, and the model's verdict on itself."""

import csv
from dataclasses import dataclass

from ..common.errors import StageError
from ..interconnect import efficiency_bounds as ic
from . import collective_model as cm
from . import link_least_squares as lls
from . import step_model as sm

SOURCE = "torch.distributed"  # the interconnect stage's own rows (nccl-tests' sit beside them)
BOUNDS = ": read its figures as bounds, not forecasts"
# The fewest timed sizes a link is fitted to: a line through two sizes puts all their curvature
# into its intercept, the latency (docs/interconnect.md, "What is fitted from what").
MIN_FIT_SIZES = 5


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
    """(smallest, largest) size a fit uses: the timed sizes that bracket the messages a step sends
    (the largest timed at or below its smallest message to the smallest timed at or above its
    largest), widened to MIN_FIT_SIZES sizes, downward first: the smaller sizes are the ones that
    measure the latency. NCCL changes protocol and channels with size, so one line over every size
    misses the step's own (docs/interconnect.md, "Predicting past the largest machine measured")."""
    sizes = sorted({b for points in groups.values() for b, _ in points})
    if len(sizes) < 2:
        return (sizes[0], sizes[0]) if sizes else (0, 0)
    below = [i for i, b in enumerate(sizes) if b <= min(messages)]
    above = [i for i, b in enumerate(sizes) if b >= max(messages)]
    lo = min(below[-1] if below else 0, len(sizes) - 2)
    hi = max(above[0] if above else len(sizes) - 1, lo + 1)
    want = min(MIN_FIT_SIZES, len(sizes))
    lo = max(0, min(lo, hi + 1 - want))
    hi = max(hi, lo + want - 1)
    return sizes[lo], sizes[hi]


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
    """A link fitted to the table (None: none, and why in how), its errors at the GPU counts left
    out of the fit in turn (lls.PointError), and what is wrong with its latency (flags)."""

    link: cm.Link | None
    how: str
    held_out: tuple = ()
    flags: tuple = ()


def latency_flags(fit, groups, system_at, keys):
    """What makes a fitted latency one not to extrapolate from: negative (taken as 0), or more than
    a whole all-reduce takes: the model's all-reduce of 0 bytes at a layout above the smallest time
    the stage measured there, at any size. system_at(key) gives the system of a layout (gpus, nodes)."""
    flags = []
    if fit.raw_latency_s < 0:
        flags.append(f"its latency fitted negative ({fit.raw_latency_s * 1e6:.3g} us a step, taken as 0)")
    for key in keys:
        smallest = min(t for _, t in groups[key])
        latency = system_at(key).allreduce_s(0, key[0])
        if latency > smallest:
            flags.append(
                f"its latency ({fit.link.step_latency_s * 1e6:.3g} us a step) alone gives {latency * 1e6:.3g} us at "
                f"{key[0]} GPUs on {key[1]} node(s), more than the stage's smallest all-reduce there "
                f"({smallest * 1e6:.3g} us): implausible"
            )
    return tuple(flags)


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
    how = (
        f"fitted to {'/'.join(map(str, counts))} GPUs in one node, {len(sizes)} sizes {sizes[0]}-{sizes[-1]} B, "
        f"{fit.residuals()}"
    )
    flags = latency_flags(fit, groups, lambda key: cm.System(key[0], fit.link), [(n, 1) for n in counts])
    return Fitted(fit.link, how, tuple(lls.leave_one_out_links(points)), flags)


def fit_inter(groups, intra, topology, algorithm, window):
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
        return lls.fit_inter_link_pooled([(*layout[k], across[k]) for k in keys], intra, topology, algorithm)

    held = []
    try:
        fitted = fit(list(across))
        for key in across if len(across) > 1 else ():
            others = fit([k for k in across if k != key]).link
            system = cm.System(layout[key][0], intra, others, topology, algorithm)
            held += [lls.PointError(key[0], b, t, system.allreduce_s(b, key[0])) for b, t in across[key]]
    except StageError as exc:
        return Fitted(None, f"not fitted: {exc}")
    chose = f", NCCL's choice fitted as a {fitted.algorithm}" if topology == "nccl" else ""
    how = "fitted to " + ", ".join(f"{n} GPUs on {m} nodes" for n, m in across)
    how += f" ({topology}{chose}), {fitted.residuals()}"
    flags = latency_flags(
        fitted, groups, lambda key: cm.System(layout[key][0], intra, fitted.link, topology, algorithm), list(across)
    )
    return Fitted(fitted.link, how, tuple(held), flags)


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

    def flags(self):
        """The fitted latencies' flags that reach the prediction (a latency set replaces its own)."""
        out = []
        if self.intra_how == self.intra.how:
            out += [f"the node's link: {f}" for f in self.intra.flags]
        if self.inter_how == self.inter.how:
            out += [f"the network: {f}" for f in self.inter.flags]
        return out


def widened(fit, window, groups):
    """fit(window), or where the window's sizes give no line (times that do not grow with size: a
    CPU's small messages), fit up to the largest size timed, the how saying so."""
    got = fit(window)
    largest = max((b for points in groups.values() for b, _ in points), default=window[1])
    if got.link is not None or not got.how.startswith("not fitted") or largest <= window[1]:
        return got
    wider = fit((window[0], largest))
    if wider.link is None:
        return got
    return Fitted(
        wider.link,
        f"{wider.how} (widened to the largest size: at {window[0]}-{window[1]} B {got.how})",
        wider.held_out,
        wider.flags,
    )


def links(groups, own_gpus_per_node, settings, messages, topology):
    window = fit_window(groups, messages)
    intra = widened(lambda w: fit_intra(groups, w), window, groups)
    inter = widened(lambda w: fit_inter(groups, intra.link, topology, settings.algorithm, w), window, groups)
    # Horovod's copies to host memory and back, where their link is given (their cost: cm.host_copy_s)
    host = cm.Link(settings.host_copy_GBps) if settings.host_copy_GBps else None
    measured = cm.System(own_gpus_per_node, intra.link, inter.link, topology, settings.algorithm, host)
    intra_link, intra_how = chosen_link(intra, settings.intra_busbw, settings.intra_latency_us, "intra_node")
    inter_link, inter_how = chosen_link(inter, settings.inter_busbw, settings.inter_latency_us, "inter_node")
    g = settings.gpus_per_node or own_gpus_per_node
    target = cm.System(g, intra_link, inter_link, topology, settings.algorithm, host)
    return Links(measured, target, intra, inter, intra_how, inter_how)


# ---------------------------------------------------------------------------------------------
# The model's own errors


def link_errors(w, lk, groups):
    """(error, what) of the model's all-reduce of a step's messages against the stage's own times,
    interpolated at those sizes, at every GPU count timed: the figure each prediction rests on."""
    out = []
    for (n, m), points in sorted(groups.items()):
        messages = sm.messages_at(lk.measured, w.model, n) if lk.measured.reaches(n) else w.model.messages
        timed = [ic.interpolate(points, b) for b in messages]
        model = sm.allreduce_at(lk.measured, w.model, n)
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


def quality(held_out, in_sample, tolerance, misses=(), flags=()):
    """(label, why): poor where a measured point lies outside the interval it was predicted with (a
    miss, named with its size), where a fitted latency is flagged, or where the model misses a
    measurement it was fitted to by more than the tolerance (no prediction can do better there),
    every such reason said; else sm.judge on the held-out errors."""
    reasons = [sm.judge([], tolerance, misses)[1].removesuffix(BOUNDS)] if misses else []
    if flags:
        reasons.append(f"{'; '.join(flags)}: a latency the model would multiply by the steps of a larger machine")
    worst = max(in_sample, key=lambda e: abs(e[0]), default=None)
    if worst and abs(worst[0]) > tolerance:
        reasons.append(
            f"{worst[1]}: the model is off by {worst[0]:+.0%} where it was fitted, above the {tolerance:.0%} tolerance"
        )
    if reasons:
        return "poor", "; ".join(reasons) + BOUNDS
    label, why = sm.judge([e for e, _ in held_out], tolerance)
    if held_out:
        worst_held = max(held_out, key=lambda e: abs(e[0]))
        why = f"{why} (worst: {worst_held[1]}, {worst_held[0]:+.1%})"
    elif worst:
        why = f"{why}; where it was fitted it is off by at most {abs(worst[0]):.1%}"
    return label, why
