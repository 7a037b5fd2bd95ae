"""What one step's all-reduce leaves of the 1-GPU step t1 at N GPUs, and how the model is checked
against the runs (docs/interconnect.md, "Predicting past the largest machine measured").

A step's messages (step_messages.py) cost c in all at N GPUs (collective_model.py), its last one
c_last. Only the backward pass, a share b of t1, can hide communication, and never the last
message, which goes out once the backward pass is over. So what can hide is

    h = min(b x t1, c - c_last)        (0 where every message goes out after the backward pass)
    step(f) = t1 + c - f x h,          efficiency(f) = t1 / step(f),   f in [0, 1]

f = 0 is the no-overlap bound t1 / (t1 + c), f = 1 the full-overlap bound t1 / (t1 + c - h). A
measured point outside [no overlap, full overlap] is a miss: no f reaches it. b is an assumption
(prediction.backward_share): a backward pass costs about twice the forward pass (a gradient for the
weights and one for the inputs, each about a forward pass's arithmetic), so about 2/3 of the
arithmetic of a step; the optimizer and the input take the rest of t1.

Plain Python, as collective_model.py.
"""

from dataclasses import dataclass

from ..interconnect.efficiency_bounds import verdict

# A measured efficiency within this of a bound counts as on it: the bounds are computed from
# medians and the efficiency from means, so exact equality means nothing.
BOUND_TOLERANCE = 1e-9

WITHIN = "within the bounds"
BELOW = "below no overlap"
ABOVE = "above full overlap"
NOTHING = "nothing of the all-reduce can hide"


@dataclass(frozen=True)
class Workload:
    """One framework x precision: the 1-GPU step (s; batch per GPU / its images/s; None without a
    1-GPU run), the batch per GPU, how a step's gradients go out (step_messages.Sending) and the
    share of t1 the backward pass takes."""

    step_s: float | None
    batch_per_gpu: int
    sending: object
    backward_share: float

    @property
    def gradient_bytes(self):
        return self.sending.gradient_bytes

    @property
    def messages(self):
        return self.sending.messages

    @property
    def one_gpu_images_per_s(self):
        return self.batch_per_gpu / self.step_s


def powers_of_two(max_gpus):
    """1, 2, 4, ... up to max_gpus."""
    out, n = [], 1
    while n <= max_gpus:
        out.append(n)
        n *= 2
    return out


def messages_at(system, workload, n):
    """The messages a step sends at n GPUs (the same at every count, but for Horovod's loop on the
    CPU, whose cycles last as long as their all-reduces)."""
    return workload.sending.messages_for(lambda b: system.allreduce_s(b, n))


def allreduce_at(system, workload, n):
    """Seconds one step's gradients take to all-reduce over n GPUs, message by message, one after
    another (each message waits for the one before it on the same stream); None where the system
    lacks a link the run would use (system.reaches)."""
    if n <= 1:
        return 0.0
    if not system.reaches(n):
        return None
    return sum(system.allreduce_s(b, n) for b in messages_at(system, workload, n))


def hideable_s(t1, c, last, backward_share, overlaps):
    """What of the all-reduce c can hide: at most the backward pass (backward_share x t1), never the
    last message (last seconds); nothing where every message goes out after the backward pass."""
    if not overlaps or not t1 or not c:
        return 0.0
    return max(0.0, min(backward_share * t1, c - last))


def hideable_at(system, workload, n, c):
    """hideable_s for n GPUs, c being allreduce_at's."""
    if c is None or n <= 1:
        return 0.0
    last = system.allreduce_s(messages_at(system, workload, n)[-1], n)
    return hideable_s(workload.step_s, c, last, workload.backward_share, workload.sending.overlaps)


def step_s(t1, c, f, hideable):
    """The N-GPU step: t1 + c - f x hideable."""
    return t1 + c - f * hideable


def efficiency(t1, c, f, hideable):
    """t1 / step_s: f = 0 gives t1 / (t1 + c), f = 1 t1 / (t1 + c - hideable)."""
    return t1 / step_s(t1, c, f, hideable)


def bounds(t1, c, hideable):
    """(no-overlap, full-overlap) efficiency."""
    return efficiency(t1, c, 0.0, hideable), efficiency(t1, c, 1.0, hideable)


def miss(measured, no_overlap, full_overlap):
    """None where the measured efficiency lies within its interval; else how far outside, as
    measured / the nearer bound - 1 (negative: below no overlap)."""
    if measured < no_overlap - BOUND_TOLERANCE:
        return measured / no_overlap - 1
    if measured > full_overlap + BOUND_TOLERANCE:
        return measured / full_overlap - 1
    return None


@dataclass(frozen=True)
class OverlapFit:
    """fraction: f clipped to [0, 1] (None where nothing can hide); unclipped: the least-squares f
    itself; position: whether the measurements lie within the bounds."""

    fraction: float | None
    unclipped: float | None
    position: str


def fit_overlap_points(t1, points):
    """The one f that best explains measured efficiencies at several GPU counts: points are
    (allreduce c, hideable h, measured efficiency e). From step_s, t1 + c - t1/e = f x h at every
    point, so f is a least-squares slope through the origin (on step seconds), over the points where
    something can hide. Clipped to [0, 1]; outside it the measurements lie outside the bounds, and
    position says which way."""
    usable = [(h, t1 + c - t1 / e) for c, h, e in points if c > 0 and e > 0 and h > 0]
    if not usable:
        return OverlapFit(None, None, NOTHING)
    raw = sum(h * y for h, y in usable) / sum(h * h for h, _ in usable)
    position = BELOW if raw < -BOUND_TOLERANCE else ABOVE if raw > 1 + BOUND_TOLERANCE else WITHIN
    return OverlapFit(min(1.0, max(0.0, raw)), raw, position)


def measured_efficiency(workload, n, images_per_s):
    """images/s at n GPUs over n x the 1-GPU images/s."""
    return images_per_s / (n * workload.one_gpu_images_per_s)


def fitted_overlap(system, workload, measured):
    """f fitted at the measured multi-GPU points ({n: images/s}) the system reaches."""
    points = []
    for n, ips in measured.items():
        c = allreduce_at(system, workload, n)
        if n > 1 and c is not None:
            points.append((c, hideable_at(system, workload, n, c), measured_efficiency(workload, n, ips)))
    return fit_overlap_points(workload.step_s, points)


def _row(system, workload, n, overlap, measured_ips):
    t1 = workload.step_s
    g, m = system.layout(n)
    row = {"gpus": n, "nodes": m, "gpus_per_node": g, "overlap_fraction": overlap}
    c = allreduce_at(system, workload, n)
    h = hideable_at(system, workload, n, c)
    row["allreduce_s"] = c
    ideal = n * workload.one_gpu_images_per_s
    for name, f in (("no_overlap", 0.0), ("fitted", overlap if h else 0.0), ("full_overlap", 1.0)):
        e = efficiency(t1, c, f, h) if c is not None and f is not None else None
        row[f"efficiency_{name}"] = e
        row[f"images_per_s_{name}"] = e * ideal if e is not None else None
    row["measured_images_per_s"] = measured_ips
    row["measured_efficiency"] = measured_efficiency(workload, n, measured_ips) if measured_ips is not None else None
    row["measured_within_interval"] = None
    row["measured_position"] = None
    row["note"] = ""
    if c is None:
        where = "between nodes" if m > 1 and system.inter is None else "within a node"
        row["note"] = f"{m} node(s), and no link {where} is known: measure one or set its bandwidth"
    elif row["measured_efficiency"] is not None and n > 1:
        no, full, e = row["efficiency_no_overlap"], row["efficiency_full_overlap"], row["measured_efficiency"]
        row["measured_within_interval"] = miss(e, no, full) is None
        row["measured_position"], row["note"] = verdict(e, no, full)
    return row


def predict(system, workload, max_gpus=1024, measured=None, overlap=None):
    """One row per GPU count (powers of two up to max_gpus, and every measured count): the
    all-reduce time and the efficiency and images/s with no overlap, with the overlap fitted at
    the measured points (or the one given) and with full overlap; the measured figure beside
    them where there is one, and whether it lies within the interval. measured: {n: images/s}."""
    measured = measured or {}
    if overlap is None:
        overlap = fitted_overlap(system, workload, measured).fraction
    counts = sorted(set(powers_of_two(max_gpus)) | set(measured))
    return [_row(system, workload, n, overlap, measured.get(n)) for n in counts]


# ---------------------------------------------------------------------------------------------
# The model's own errors


@dataclass(frozen=True)
class MeasuredPoint:
    """A training run at `gpus` GPUs: the all-reduce of its gradients (s), what of it can hide (s),
    its efficiency, and the messages it sent (bytes), for the sentence that names a miss."""

    gpus: int
    allreduce_s: float
    hideable_s: float
    efficiency: float
    messages: tuple = ()


def describe_miss(p, no, full, by):
    """'2 GPUs (102228128 B of gradients in 4 messages of up to 26214400 B): measured 98.4%, 0.9%
    below its interval 99.3% to 99.3%'."""
    size = (
        f" ({sum(p.messages)} B of gradients in {len(p.messages)} message(s) of up to {max(p.messages)} B)"
        if p.messages
        else ""
    )
    side = "below" if by < 0 else "above"
    return f"{p.gpus} GPUs{size}: measured {p.efficiency:.1%}, {abs(by):.1%} {side} its interval {no:.1%} to {full:.1%}"


def leave_one_out(t1, points):
    """For every measured multi-GPU point, the interval its all-reduce gives and f fitted on the
    others predict its efficiency: one row each with the prediction, its relative error (predicted
    / measured - 1), the interval and, where the point lies outside it, the miss (measured / the
    nearer bound - 1) and its sentence. A point where nothing can hide is predicted by its
    no-overlap bound, whatever f; one that could hide something, with no other such point to fit f
    on, gets its interval only. The interval never depends on the point itself: a point outside it
    is a miss whatever f would be fitted."""
    multi = [p for p in points if p.gpus > 1]
    rows = []
    for held in multi:
        others = [(p.allreduce_s, p.hideable_s, p.efficiency) for p in multi if p is not held]
        fit = fit_overlap_points(t1, others)
        no, full = bounds(t1, held.allreduce_s, held.hideable_s)
        f = 0.0 if held.hideable_s <= 0 else fit.fraction
        predicted = efficiency(t1, held.allreduce_s, f, held.hideable_s) if f is not None else None
        by = miss(held.efficiency, no, full)
        rows.append(
            {
                "gpus": held.gpus,
                "measured_efficiency": held.efficiency,
                "overlap_fraction": fit.fraction,
                "predicted_efficiency": predicted,
                "rel_error": predicted / held.efficiency - 1 if predicted is not None else None,
                "efficiency_no_overlap": no,
                "efficiency_full_overlap": full,
                "within_interval": by is None,
                "miss": by,
                "miss_said": describe_miss(held, no, full, by) if by is not None else "",
                "note": ""
                if predicted is not None
                else "no other point where the all-reduce can hide to fit the overlap from: interval only",
            }
        )
    return rows


def judge(rel_errors, tolerance, misses=()):
    """(label, sentence) on a prediction's own errors. 'poor' where a held-out point lies outside the
    interval it was predicted with (misses: their sentences), or the worst error exceeds tolerance:
    then its figures are bounds, not forecasts. 'untested' without a miss or an error to judge;
    else 'within tolerance'."""
    if misses:
        return "poor", (
            f"{len(misses)} held-out point(s) outside the interval they were predicted with, a miss each: "
            f"{'; '.join(misses)}: read its figures as bounds, not forecasts"
        )
    known = [abs(e) for e in rel_errors if e is not None]
    if not known:
        return "untested", "no held-out point to test it on"
    worst = max(known)
    if worst <= tolerance:
        return (
            "within tolerance",
            f"worst error {worst:.1%} of {len(known)} held-out point(s), tolerance {tolerance:.0%}",
        )
    return "poor", (
        f"worst error {worst:.1%} of {len(known)} held-out point(s), above the {tolerance:.0%} tolerance: "
        f"read its figures as bounds, not forecasts"
    )
