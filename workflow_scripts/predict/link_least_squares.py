"""A link's bus bandwidth and per-step latency, fitted by least squares to the all-reduce times the
interconnect stage measured (collective_model.py's cost, read backwards): within a node at one GPU
count or several pooled, or across nodes once the node's own link is known; and, for every GPU
count, the link fitted on the other counts predicting its times (leave-one-out).

Plain Python (no numpy), as collective_model.py.
"""

import math
from dataclasses import dataclass

from ..common.errors import StageError
from .collective_model import (
    STEPS,
    TREE_BUSBW_SHARE,
    Link,
    System,
    bandwidth_term_s,
    nccl_tree_latency_steps,
    ring_allreduce_s,
    ring_steps,
)


@dataclass(frozen=True)
class PointError:
    """One measured size against the fitted model: rel_error = model / measured - 1."""

    gpus: int
    bytes: int
    measured_s: float
    model_s: float

    @property
    def rel_error(self):
        return self.model_s / self.measured_s - 1


@dataclass(frozen=True)
class LinkFit:
    """A fitted link and, for every measured point it was fitted to, the model against it (its
    residuals): where the line misses (NCCL's protocol changes, a CPU's Gloo), the errors say so.
    raw_latency_s: the least-squares latency before a negative one is taken as 0; algorithm: the
    one fitted across nodes where NCCL's choice was (ring or tree)."""

    link: Link
    points: tuple
    raw_latency_s: float = 0.0
    algorithm: str = ""

    @property
    def max_rel_error(self):
        return max(abs(p.rel_error) for p in self.points)

    @property
    def rms_rel_error(self):
        return math.sqrt(sum(p.rel_error**2 for p in self.points) / len(self.points))

    def residuals(self):
        """'residuals -3.1% to +2.0% (rms 1.4%) over 12 points'."""
        errors = [p.rel_error for p in self.points]
        return (
            f"residuals {min(errors):+.1%} to {max(errors):+.1%} (rms {self.rms_rel_error:.1%}) over "
            f"{len(errors)} points"
        )


def points_from_table(table, system, gpus, source="torch.distributed"):
    """(bytes, median seconds) of the all-reduces the interconnect table (results/interconnect.csv,
    as csv.DictReader gives its rows, or rows.rows() itself) holds for one system and GPU count."""
    out = []
    for r in table:
        if (
            r["system"] == system
            and int(r["gpus"]) == gpus
            and r["collective"] == "all_reduce"
            and r["source"] == source
        ):
            out.append((int(r["bytes"]), float(r["median_s"] or r["time_s"])))
    return sorted(out)


def _least_squares(rows):
    """(p, q, raw p) minimising sum(((target - p x_lat - q x_bw) / scale)^2) over rows of
    (x_lat, x_bw, target, scale), with p >= 0 (a negative latency is refitted as 0, and the raw
    one returned for the caller to flag) and q > 0.

    Why relative residuals: the sizes span six decades; on absolute ones the largest messages
    alone would decide, and the latency the small ones measure would be lost."""
    a = [(x / s, y / s, t / s) for x, y, t, s in rows]
    saa = sum(u * u for u, _, _ in a)
    sab = sum(u * v for u, v, _ in a)
    sbb = sum(v * v for _, v, _ in a)
    say = sum(u * w for u, _, w in a)
    sby = sum(v * w for _, v, w in a)
    det = saa * sbb - sab * sab
    if len(rows) < 2 or det <= 1e-12 * saa * sbb:
        raise StageError(
            "fitting a link needs at least two message sizes (and, pooled, not one size at every GPU count)"
        )
    p = (say * sbb - sab * sby) / det
    q = (saa * sby - sab * say) / det
    raw = p
    if p < 0:  # no link has a negative latency: the line misses the small sizes, which the caller says
        p, q = 0.0, sby / sbb
    if q <= 0:
        raise StageError("the all-reduce times do not grow with message size: no bandwidth to fit")
    return p, q, raw


def fit_link_pooled(points):
    """The Link (busbw, step latency) that best fits all-reduces measured at several GPU counts on
    the same kind of link: points are (n, bytes, median seconds); each obeys
    t = 2(n-1) x latency + 2(n-1)/n x bytes / busbw, linear in (latency, 1 / busbw)."""
    # x_bw is the bandwidth term at 1 GB/s, so that its coefficient is 1 / busbw in GB/s
    rows = [(ring_steps(n), bandwidth_term_s(b, n, 1.0), t, t) for n, b, t in points]
    latency, inverse_bw, raw = _least_squares(rows)
    link = Link(busbw_GBps=1 / inverse_bw, step_latency_s=latency)
    errors = tuple(PointError(n, b, t, ring_allreduce_s(b, n, link.busbw_GBps, latency)) for n, b, t in points)
    return LinkFit(link, errors, raw)


def fit_link(points, n, min_bytes=0):
    """The Link that fits the all-reduces measured at one GPU count n: a straight line
    t = a + b x bytes, with a = 2(n-1) x step latency and b = 2(n-1)/n / (busbw x 1e9).
    points: (bytes, median seconds), the interconnect stage's rows; min_bytes leaves out the
    smallest sizes (NCCL changes protocol with size, and one line fits one protocol best). The
    fit's error at every point comes back with it."""
    kept = [(n, b, t) for b, t in points if b >= min_bytes]
    return fit_link_pooled(kept)


def _inter_rows(points, gpus_per_node, nodes, intra, topology, inter_algorithm):
    """fit_inter_link's least-squares rows: what the network explains of each measured time, linear
    in (its step latency, 1 / its busbw) for every topology (for a flat ring and a tree, the network
    taken as the slowest link: the fitted bandwidth is the path's)."""
    g, m = gpus_per_node, nodes
    n = g * m
    rows = []
    for b, t in points:
        if topology == "ring":
            intra_steps = ring_steps(n) - ring_steps(m)
            rows.append((ring_steps(m), bandwidth_term_s(b, n, 1.0), t - intra_steps * intra.step_latency_s, t))
        elif topology == "tree":
            intra_steps, inter_steps = nccl_tree_latency_steps(g, m)
            x_bw = 2 * b / (TREE_BUSBW_SHARE * 1e9)
            rows.append((inter_steps, x_bw, t - intra_steps * intra.step_latency_s, t))
        else:
            within = ring_allreduce_s(b, g, intra.busbw_GBps, intra.step_latency_s) if g > 1 else 0.0
            rows.append((STEPS[inter_algorithm](m), bandwidth_term_s(b, m, 1.0), t - within, t))
    return rows


def _fit_inter(groups, intra, topology, inter_algorithm):
    rows = [r for g, m, points in groups for r in _inter_rows(points, g, m, intra, topology, inter_algorithm)]
    latency, inverse_bw, raw = _least_squares(rows)
    inter = Link(busbw_GBps=1 / inverse_bw, step_latency_s=latency)
    errors = []
    for g, m, points in groups:
        system = System(g, intra, inter, topology, inter_algorithm)
        errors += [PointError(g * m, b, t, system.allreduce_s(b, g * m)) for b, t in points]
    return LinkFit(inter, tuple(errors), raw, topology if topology in ("ring", "tree") else "")


def fit_inter_link_pooled(groups, intra, topology="nccl", inter_algorithm="ring"):
    """The link between nodes that best fits all-reduces measured at several layouts at once:
    groups are (gpus_per_node, nodes, points) with points (bytes, median seconds); the node's own
    link (intra) known. One PointError per measured point, each against its own layout. NCCL's
    choice (topology nccl) cannot be told from the times alone: the link is fitted as a ring and as
    a tree, and the one whose NCCL's choice (the faster of the two on it, per size) misses the times
    less is kept (LinkFit.algorithm names the fit); the errors are that choice's."""
    if intra is None:  # one GPU per node: nothing happens within a node
        intra = Link(math.inf)
    if topology != "nccl":
        return _fit_inter(groups, intra, topology, inter_algorithm)
    fits = []
    for algorithm in ("ring", "tree"):
        try:
            link = _fit_inter(groups, intra, algorithm, inter_algorithm)
        except StageError:
            continue
        errors = []
        for g, m, points in groups:
            system = System(g, intra, link.link, "nccl", inter_algorithm)
            errors += [PointError(g * m, b, t, system.allreduce_s(b, g * m)) for b, t in points]
        fits.append(LinkFit(link.link, tuple(errors), link.raw_latency_s, algorithm))
    if not fits:
        raise StageError("the all-reduce times across nodes fit neither a ring nor a tree")
    return min(fits, key=lambda f: f.rms_rel_error)


def fit_inter_link(points, gpus_per_node, nodes, intra, topology="nccl", inter_algorithm="ring"):
    """The link between nodes, from all-reduces measured across `nodes` nodes of gpus_per_node
    GPUs each, the node's own link (intra) known: what the within-node phases of the topology
    do not explain is the network's. For a flat ring the fitted bandwidth is the ring's slowest
    link, which is the network's wherever that is the slower. points: (bytes, median seconds)."""
    return fit_inter_link_pooled([(gpus_per_node, nodes, points)], intra, topology, inter_algorithm)


def leave_one_out_links(points):
    """For each GPU count measured, the link fitted on the other counts predicts its times:
    points (n, bytes, median seconds) on one kind of link. One PointError per held-out point;
    none with fewer than two counts."""
    counts = sorted({n for n, _, _ in points})
    if len(counts) < 2:
        return []
    out = []
    for held in counts:
        link = fit_link_pooled([p for p in points if p[0] != held]).link
        out += [
            PointError(n, b, t, ring_allreduce_s(b, n, link.busbw_GBps, link.step_latency_s))
            for n, b, t in points
            if n == held
        ]
    return out
