"""The cost of the gradient all-reduce at N GPUs, and what it leaves of the 1-GPU step: the model
behind the scaling prediction (docs/interconnect.md, "Predicting past the largest machine measured").

An all-reduce of S bytes over n ranks costs a bandwidth term and a latency term:

    t = 2(n-1)/n x S / (busbw x 1e9)  +  steps x step_latency

Sources, each for one part:

- The bandwidth term is nccl-tests' bus bandwidth read backwards. NVIDIA's nccl-tests,
  doc/PERFORMANCE.md (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md): each
  element needs n-1 additions and n assignments, 2(n-1) transfers that n links share, so an
  all-reduce takes at least S/B x 2(n-1)/n, whatever the algorithm; busbw = algbw x 2(n-1)/n is
  that B. The interconnect stage reports busbw by the same rule (interconnect/bandwidth.py).
- Ring: a reduce-scatter of n-1 steps then an all-gather of n-1 steps, every step moving S/n per
  rank: 2(n-1) steps.
- Tree: NCCL's double binary trees (NCCL 2.4 on; NVIDIA's "Massively Scale Your Deep Learning
  Training with NCCL 2.4", https://developer.nvidia.com/blog/massively-scale-deep-learning-training-nccl-2-4/):
  a reduce up a tree and a broadcast down it, so the steps grow with log2 n, not with n.
- How the steps are charged across nodes follows NCCL's own tuning model (src/graph/tuning.cc,
  https://github.com/NVIDIA/nccl/blob/master/src/graph/tuning.cc, ncclTopoTuneModel): a ring over
  n ranks on m nodes pays 2(m-1) of its 2(n-1) steps at the network's latency, the rest at the
  node's.

Overlap with the backward pass, for a 1-GPU step t1 and an all-reduce c:

    step(f) = t1 + c - f x min(t1, c),   efficiency(f) = t1 / step(f),   f in [0, 1]

f = 0 is interconnect/prediction.py's no-overlap bound t1 / (t1 + c), f = 1 its full-overlap bound
t1 / max(t1, c): f is the share of the overlappable time min(t1, c) that a run actually hides.

Units: bytes, seconds, GB/s with GB = 1e9 bytes, as nccl-tests and the interconnect stage use.
Plain Python (no numpy), so that it also runs on a bare GPU host. Fitting a link to the interconnect
stage's measured all-reduces is link_least_squares.py's.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ..common.errors import StageError
from ..interconnect.prediction import verdict

GB = 1e9
TOPOLOGIES = ("hierarchical", "ring")
# A measured efficiency within this of a bound counts as on it: the bounds are computed from
# medians and the efficiency from means, so exact equality means nothing.
BOUND_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Link:
    """A link as an all-reduce sees it: bus bandwidth (GB/s, nccl-tests' busbw) and the latency of
    one step of the algorithm (s)."""

    busbw_GBps: float
    step_latency_s: float = 0.0


# ---------------------------------------------------------------------------------------------
# The collective


def bandwidth_term_s(nbytes, n, busbw_GBps):
    """2(n-1)/n x nbytes / busbw: the time the data takes on links of bus bandwidth busbw
    (nccl-tests, doc/PERFORMANCE.md, "AllReduce")."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n * nbytes / (busbw_GBps * GB)


def ring_steps(n):
    """2(n-1): n-1 steps of reduce-scatter, n-1 of all-gather."""
    return 2 * (n - 1) if n > 1 else 0


def tree_steps(n):
    """2 ceil(log2 n): up a binary tree of n ranks and down again."""
    return 2 * math.ceil(math.log2(n)) if n > 1 else 0


def ring_allreduce_s(nbytes, n, busbw_GBps, step_latency_s=0.0):
    """Ring all-reduce: 2(n-1)/n x nbytes / (busbw x 1e9) + 2(n-1) x step_latency_s."""
    return bandwidth_term_s(nbytes, n, busbw_GBps) + ring_steps(n) * step_latency_s


def tree_allreduce_s(nbytes, n, busbw_GBps, step_latency_s=0.0):
    """Tree all-reduce: the ring's bandwidth term + 2 ceil(log2 n) x step_latency_s.

    Assumption: a double binary tree reaches the same bus bandwidth as a ring, its two trees each
    carrying half the data (the NCCL 2.4 post above); only the latency differs. NCCL's own tuning
    model charges trees 2 x nbytes / busbw (the ring's term as n grows) with busbw derated by 10%:
    for large n the two agree within that."""
    return bandwidth_term_s(nbytes, n, busbw_GBps) + tree_steps(n) * step_latency_s


ALGORITHMS = {"ring": ring_allreduce_s, "tree": tree_allreduce_s}
STEPS = {"ring": ring_steps, "tree": tree_steps}


def hierarchical_allreduce_s(nbytes, gpus_per_node, nodes, intra, inter, inter_algorithm="ring"):
    """Within the node, then across nodes, then within the node again:

        reduce-scatter in the node      (g-1)/g x S / intra.busbw + (g-1) x intra.latency
        all-reduce across the m nodes   of S/g per GPU, all g GPUs of a node at once
        all-gather in the node          (g-1)/g x S / intra.busbw + (g-1) x intra.latency

    The g cross-node all-reduces of S/g run together and share the node's network, so together
    they cost one all-reduce of S over m ranks at inter.busbw: inter is the node's link (its NICs
    together), not one GPU's. The two intra-node phases add up to a ring of g, so with one node
    this is ring_allreduce_s(S, g, intra) exactly. This is Horovod's hierarchical all-reduce, and
    the bandwidth NCCL's trees across nodes reach."""
    within = (
        ring_allreduce_s(nbytes, gpus_per_node, intra.busbw_GBps, intra.step_latency_s) if gpus_per_node > 1 else 0.0
    )
    if nodes <= 1:
        return within
    if inter is None:
        raise StageError(f"{nodes} nodes but no inter-node link: measure across nodes or set its bandwidth and latency")
    return within + ALGORITHMS[inter_algorithm](nbytes, nodes, inter.busbw_GBps, inter.step_latency_s)


def flat_ring_allreduce_s(nbytes, gpus_per_node, nodes, intra, inter):
    """One ring through all n = g x m GPUs (NCCL before 2.4, and NCCL_ALGO=Ring): every rank moves
    2(n-1)/n x S, at the speed of the slowest link on the ring; of its 2(n-1) steps, 2(m-1) cross
    the network (NCCL's tuning model, ncclTopoTuneModel)."""
    n = gpus_per_node * nodes
    if nodes <= 1:
        return ring_allreduce_s(nbytes, n, intra.busbw_GBps, intra.step_latency_s)
    if inter is None:
        raise StageError(f"{nodes} nodes but no inter-node link: measure across nodes or set its bandwidth and latency")
    busbw = min(intra.busbw_GBps, inter.busbw_GBps) if gpus_per_node > 1 else inter.busbw_GBps
    inter_steps = ring_steps(nodes)
    intra_steps = ring_steps(n) - inter_steps
    return bandwidth_term_s(nbytes, n, busbw) + intra_steps * intra.step_latency_s + inter_steps * inter.step_latency_s


def bucket_sizes(gradient_bytes, bucket_bytes):
    """The messages one step sends: whole buckets and the rest (one message without buckets)."""
    if not bucket_bytes or bucket_bytes >= gradient_bytes:
        return [gradient_bytes]
    full, rest = divmod(gradient_bytes, bucket_bytes)
    return [bucket_bytes] * full + ([rest] if rest else [])


def bucketed_allreduce_s(gradient_bytes, bucket_bytes, allreduce_s):
    """The gradients sent as ceil(gradient_bytes / bucket_bytes) all-reduces (PyTorch DDP's
    bucket_cap_mb, Horovod's Tensor Fusion threshold), each paying its own latency. allreduce_s:
    seconds for one message of so many bytes. The buckets are summed as if sent one after another;
    what of them hides behind the backward pass is the overlap's business, not this function's."""
    return sum(allreduce_s(b) for b in bucket_sizes(gradient_bytes, bucket_bytes))


@dataclass(frozen=True)
class System:
    """A cluster as the model sees it: GPUs per node, the link within a node (one Link, or one per
    GPU count in the node where measured: NVLink meshes and shared PCIe switches give each count
    its own), the link between nodes (None: not known), how the all-reduce crosses nodes
    (hierarchical or one flat ring) and, for hierarchical, the cross-node algorithm (ring, tree)."""

    gpus_per_node: int
    intra: Link | Mapping | None
    inter: Link | None = None
    topology: str = "hierarchical"
    inter_algorithm: str = "ring"

    def __post_init__(self):
        if self.topology not in TOPOLOGIES:
            raise StageError(f"topology {self.topology!r}: one of {', '.join(TOPOLOGIES)}")
        if self.inter_algorithm not in ALGORITHMS:
            raise StageError(f"inter-node algorithm {self.inter_algorithm!r}: one of {', '.join(ALGORITHMS)}")

    def layout(self, n):
        """(GPUs per node, nodes) of an n-GPU run: one node up to gpus_per_node, full nodes
        beyond. A count that does not fill its nodes evenly is spread evenly (a fraction of a GPU
        per node), an approximation the model states rather than hides."""
        if n <= self.gpus_per_node:
            return n, 1
        nodes = math.ceil(n / self.gpus_per_node)
        per_node = n // nodes if n % nodes == 0 else n / nodes
        return per_node, nodes

    def intra_link(self, g):
        """The link within a node at g GPUs: the one measured at g, else at the nearest count (the
        larger of two as near). None (nodes of one GPU) has no intra-node phase to cost."""
        if self.intra is None:
            if g > 1:
                raise StageError(f"{g} GPUs in a node but no intra-node link: measure within a node or set it")
            return Link(math.inf)
        if isinstance(self.intra, Link):
            return self.intra
        if g in self.intra:
            return self.intra[g]
        nearest = min(self.intra, key=lambda k: (abs(k - g), -k))
        return self.intra[nearest]

    def allreduce_s(self, nbytes, n):
        """One all-reduce of nbytes over n GPUs."""
        if n <= 1:
            return 0.0
        g, m = self.layout(n)
        intra = self.intra_link(g)
        if self.topology == "ring":
            return flat_ring_allreduce_s(nbytes, g, m, intra, self.inter)
        return hierarchical_allreduce_s(nbytes, g, m, intra, self.inter, self.inter_algorithm)

    def reaches(self, n):
        """Whether the model knows every link an n-GPU run uses: the node's where a node holds
        several of its GPUs, the network's where it spans several nodes."""
        g, m = self.layout(n)
        return (m == 1 or self.inter is not None) and (g <= 1 or self.intra is not None)


# ---------------------------------------------------------------------------------------------
# Overlap with the backward pass


def step_s(t1, c, f):
    """The N-GPU step: t1 + c - f x min(t1, c). The all-reduce can hide behind the computation
    only as long as both last, min(t1, c); f is the share of that which a run hides."""
    return t1 + c - f * min(t1, c)


def efficiency(t1, c, f):
    """t1 / step_s(t1, c, f): f = 0 gives t1 / (t1 + c), f = 1 gives t1 / max(t1, c), exactly
    interconnect/prediction.py's bounds()."""
    return t1 / step_s(t1, c, f)


WITHIN = "within the bounds"
BELOW = "below no overlap"
ABOVE = "above full overlap"
NOTHING = "no communication to overlap"


@dataclass(frozen=True)
class OverlapFit:
    """fraction: f clipped to [0, 1] (None where there is nothing to fit); unclipped: the
    least-squares f itself; position: whether the measurements lie within the bounds."""

    fraction: float | None
    unclipped: float | None
    position: str


def fit_overlap_points(t1, points):
    """The one f that best explains measured efficiencies at several GPU counts: points are
    (allreduce_s c, measured efficiency e). From step_s, t1 + c - t1/e = f x min(t1, c) at every
    point, so f is a least-squares slope through the origin (on step seconds). Clipped to [0, 1];
    outside it the measurements lie outside the bounds, and position says which way."""
    usable = [(c, e) for c, e in points if c > 0 and e > 0]
    if not usable:
        return OverlapFit(None, None, NOTHING)
    hidden = [(min(t1, c), t1 + c - t1 / e) for c, e in usable]
    raw = sum(m * h for m, h in hidden) / sum(m * m for m, _ in hidden)
    if raw < -BOUND_TOLERANCE:
        position = BELOW
    elif raw > 1 + BOUND_TOLERANCE:
        position = ABOVE
    else:
        position = WITHIN
    return OverlapFit(min(1.0, max(0.0, raw)), raw, position)


def fit_overlap(t1, c, measured_efficiency):
    """f for one measured point: (t1 + c - t1 / e) / min(t1, c), clipped to [0, 1]."""
    return fit_overlap_points(t1, [(c, measured_efficiency)])


def within_bounds(measured, no_overlap, full_overlap):
    return no_overlap - BOUND_TOLERANCE <= measured <= full_overlap + BOUND_TOLERANCE


# ---------------------------------------------------------------------------------------------
# Predictions


@dataclass(frozen=True)
class Workload:
    """One framework x precision: the 1-GPU step (s; batch per GPU / its images/s), the batch per
    GPU, the bytes one step all-reduces and the bucket they go out in (None: one message)."""

    step_s: float
    batch_per_gpu: int
    gradient_bytes: int
    bucket_bytes: int | None = None

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


def allreduce_at(system, workload, n):
    """Seconds one step's gradients take to all-reduce over n GPUs, bucket by bucket; None where
    the system lacks a link the run would use (system.reaches)."""
    if n <= 1:
        return 0.0
    if not system.reaches(n):
        return None
    return bucketed_allreduce_s(workload.gradient_bytes, workload.bucket_bytes, lambda b: system.allreduce_s(b, n))


def measured_efficiency(workload, n, images_per_s):
    """images/s at n GPUs over n x the 1-GPU images/s."""
    return images_per_s / (n * workload.one_gpu_images_per_s)


def fitted_overlap(system, workload, measured):
    """f fitted at the measured multi-GPU points ({n: images/s}) the system reaches."""
    points = []
    for n, ips in measured.items():
        c = allreduce_at(system, workload, n)
        if n > 1 and c is not None:
            points.append((c, measured_efficiency(workload, n, ips)))
    return fit_overlap_points(workload.step_s, points)


def _row(system, workload, n, overlap, measured_ips):
    t1 = workload.step_s
    g, m = system.layout(n)
    row = {"gpus": n, "nodes": m, "gpus_per_node": g, "overlap_fraction": overlap}
    c = allreduce_at(system, workload, n)
    row["allreduce_s"] = c
    ideal = n * workload.one_gpu_images_per_s
    for name, f in (("no_overlap", 0.0), ("fitted", overlap), ("full_overlap", 1.0)):
        e = efficiency(t1, c, f) if c is not None and f is not None else None
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
        row["measured_within_interval"] = within_bounds(e, no, full)
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


@dataclass(frozen=True)
class MeasuredPoint:
    """A training run at `gpus` GPUs: the all-reduce of its gradients (s) and its efficiency."""

    gpus: int
    allreduce_s: float
    efficiency: float


def leave_one_out(t1, points):
    """For every measured multi-GPU point, f fitted on the others predicts its efficiency: one row
    each with the prediction, its relative error (predicted / measured - 1) and the bounds'. With
    a single point there is nothing to fit f from: the row has its bounds and says so."""
    multi = [p for p in points if p.gpus > 1]
    rows = []
    for held in multi:
        others = [(p.allreduce_s, p.efficiency) for p in multi if p is not held]
        fit = fit_overlap_points(t1, others)
        no, full = efficiency(t1, held.allreduce_s, 0.0), efficiency(t1, held.allreduce_s, 1.0)
        predicted = efficiency(t1, held.allreduce_s, fit.fraction) if fit.fraction is not None else None
        rows.append(
            {
                "gpus": held.gpus,
                "measured_efficiency": held.efficiency,
                "overlap_fraction": fit.fraction,
                "predicted_efficiency": predicted,
                "rel_error": predicted / held.efficiency - 1 if predicted is not None else None,
                "efficiency_no_overlap": no,
                "efficiency_full_overlap": full,
                "no_overlap_rel_error": no / held.efficiency - 1,
                "full_overlap_rel_error": full / held.efficiency - 1,
                "within_interval": within_bounds(held.efficiency, no, full),
                "note": "" if others else "the only multi-GPU point: no other to fit the overlap from, bounds only",
            }
        )
    return rows


def judge(rel_errors, tolerance):
    """(label, sentence) on a prediction's own errors: 'untested' without any, 'within tolerance'
    where the worst is at most tolerance, else 'poor': then its figures are bounds, not forecasts."""
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
