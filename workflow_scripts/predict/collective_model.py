"""The cost of one all-reduce of S bytes over n GPUs on m nodes of g GPUs each, as the libraries the
runs use carry it out: the model behind the scaling prediction (docs/interconnect.md, "Predicting
past the largest machine measured"). What a step sends, and what of it hides behind the backward
pass, is step_model.py's.

Each algorithm costs a bandwidth term and a latency term. Sources, each for one part (read for
their facts; none of their code is here):

- Bus bandwidth: NVIDIA's nccl-tests, doc/PERFORMANCE.md
  (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md): an all-reduce moves at
  least 2(n-1)/n x S through each rank's link, so busbw = algbw x 2(n-1)/n is the link speed it
  reached. The interconnect stage reports busbw by the same rule (interconnect/bandwidth.py).
- NCCL's ring and tree, and how their steps are charged across nodes: NCCL's tuning model,
  ncclTopoTuneModel in src/graph/tuning.cc (NCCL 2.28.9,
  https://github.com/NVIDIA/nccl/blob/v2.28.9-1/src/graph/tuning.cc). A ring all-reduce moves
  2(n-1)/n x S per rank in 2(n-1) steps, 2(m-1) of them over the network. A tree all-reduce's
  algorithm bandwidth is half its bus bandwidth, itself derated to 0.92: it moves about 2S through
  each node's link, in 2((g-1) + log2 m) steps (up the tree and down again). NCCL picks, per call,
  the algorithm its model gives as the faster.
- Horovod's hierarchical all-reduce (HOROVOD_HIERARCHICAL_ALLREDUCE=1), as Horovod 0.28.1 carries
  it out (horovod/common/ops/nccl_operations.cc, NCCLHierarchicalAllreduce::Execute,
  https://github.com/horovod/horovod/blob/v0.28.1/horovod/common/ops/nccl_operations.cc): an NCCL
  reduce-scatter within the node, each GPU's S/g copied to host memory, an MPI_Allreduce of that
  host memory across the nodes (one per local rank, all g of a node at once), the copy back to the
  GPU, an NCCL all-gather within the node. A node's network carries g x 2(m-1)/m x S/g = 2(m-1)/m
  x S: half the tree's at 2 nodes. Horovod builds it only with MPI (#if HAVE_MPI) and enables it
  only where its MPI context is on (horovod/common/operations.cc, CreateOperationManager: the MPI
  controller, or MPI for its CPU operations) and a run spans nodes: under the Gloo controller, the
  pipeline's default (training.horovod_controller), the variable changes nothing and Horovod runs
  NCCL's own all-reduce. The model takes MPI's all-reduce of host memory at the network's link as
  fitted to NCCL (the interconnect stage times no MPI), and costs the two copies only where their
  bandwidth is given (prediction.host_copy_GBps): without it the cost is that of the bytes the
  phases move, a lower bound (hierarchical_notes says so).

Units: bytes, seconds, GB/s with GB = 1e9 bytes, as nccl-tests and the interconnect stage use.
Plain Python (no numpy), so that it also runs on a bare GPU host. Fitting a link to the interconnect
stage's measured all-reduces is link_least_squares.py's.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ..common.errors import StageError

GB = 1e9
# how an all-reduce crosses nodes: NCCL's choice (ring or tree, the faster), NCCL_ALGO=Ring (one flat
# ring, also NCCL before 2.4), NCCL_ALGO=Tree, Horovod's hierarchical all-reduce
TOPOLOGIES = ("nccl", "ring", "tree", "hierarchical")
# NCCL's tuning model derates a tree's all-reduce bus bandwidth to 0.92 of the link's (tuning.cc)
TREE_BUSBW_SHARE = 0.92


@dataclass(frozen=True)
class Link:
    """A link as an all-reduce sees it: bus bandwidth (GB/s, nccl-tests' busbw) and the latency of
    one step of the algorithm (s)."""

    busbw_GBps: float
    step_latency_s: float = 0.0


# ---------------------------------------------------------------------------------------------
# One group of ranks on one kind of link


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
    """An all-reduce that moves what a ring moves in 2 ceil(log2 n) steps (recursive doubling, as an
    MPI library may run Horovod's all-reduce across nodes): the ring's bandwidth term, a tree's
    latency."""
    return bandwidth_term_s(nbytes, n, busbw_GBps) + tree_steps(n) * step_latency_s


# Horovod's all-reduce across nodes (prediction.algorithm): its cost, and its steps
ALGORITHMS = {"ring": ring_allreduce_s, "tree": tree_allreduce_s}
STEPS = {"ring": ring_steps, "tree": tree_steps}


# ---------------------------------------------------------------------------------------------
# Across nodes


def _need_inter(nodes, inter):
    if nodes > 1 and inter is None:
        raise StageError(f"{nodes} nodes but no inter-node link: measure across nodes or set its bandwidth and latency")


def _slowest(gpus_per_node, intra, inter):
    """The bus bandwidth of a path through every node: the slower of the node's link and the network's."""
    return min(intra.busbw_GBps, inter.busbw_GBps) if gpus_per_node > 1 else inter.busbw_GBps


def flat_ring_allreduce_s(nbytes, gpus_per_node, nodes, intra, inter):
    """One ring through all n = g x m GPUs (NCCL_ALGO=Ring; NCCL before 2.4): every rank, and every
    node's network link, moves 2(n-1)/n x S at the speed of the ring's slowest link; of its 2(n-1)
    steps, 2(m-1) cross the network (ncclTopoTuneModel)."""
    n = gpus_per_node * nodes
    if nodes <= 1:
        return ring_allreduce_s(nbytes, n, intra.busbw_GBps, intra.step_latency_s)
    _need_inter(nodes, inter)
    inter_steps = ring_steps(nodes)
    intra_steps = ring_steps(n) - inter_steps
    return (
        bandwidth_term_s(nbytes, n, _slowest(gpus_per_node, intra, inter))
        + intra_steps * intra.step_latency_s
        + inter_steps * inter.step_latency_s
    )


def nccl_tree_latency_steps(gpus_per_node, nodes):
    """(steps on the node's link, steps on the network) of NCCL's tree all-reduce: 2(g-1) along the
    chain within each node, 2 ceil(log2 m) up and down the tree of nodes."""
    return 2 * max(0, gpus_per_node - 1), tree_steps(nodes)


def nccl_tree_allreduce_s(nbytes, gpus_per_node, nodes, intra, inter):
    """NCCL's tree all-reduce (NCCL_ALGO=Tree; double binary trees across nodes, a chain within
    each) as NCCL's tuning model costs it: 2 x S over 0.92 of the slowest link's bus bandwidth,
    whatever m, and the steps of nccl_tree_latency_steps. Within one node the chain is the tree."""
    _need_inter(nodes, inter)
    bw = intra.busbw_GBps if nodes <= 1 else _slowest(gpus_per_node, intra, inter)
    if gpus_per_node * nodes <= 1:
        return 0.0
    intra_steps, inter_steps = nccl_tree_latency_steps(gpus_per_node, nodes)
    latency = intra_steps * intra.step_latency_s + (inter_steps * inter.step_latency_s if nodes > 1 else 0.0)
    return 2 * nbytes / (TREE_BUSBW_SHARE * bw * GB) + latency


def nccl_allreduce_s(nbytes, gpus_per_node, nodes, intra, inter):
    """What NCCL does left to itself: per call the faster of its ring and its tree."""
    return min(
        flat_ring_allreduce_s(nbytes, gpus_per_node, nodes, intra, inter),
        nccl_tree_allreduce_s(nbytes, gpus_per_node, nodes, intra, inter),
    )


def host_copy_s(nbytes, host):
    """One copy of nbytes between a GPU and host memory over `host` (the GB/s one GPU gets while
    every GPU of its node copies at once, and the latency of one copy); 0 where host is None: not
    costed (hierarchical_notes)."""
    if host is None or nbytes <= 0:
        return 0.0
    return nbytes / (host.busbw_GBps * GB) + host.step_latency_s


def hierarchical_allreduce_s(nbytes, gpus_per_node, nodes, intra, inter, inter_algorithm="ring", host=None):
    """Horovod's hierarchical all-reduce (NCCLHierarchicalAllreduce::Execute), in its order:

        reduce-scatter in the node      (g-1)/g x S / intra.busbw + (g-1) x intra.latency   (NCCL)
        copy to host memory             S/g / host.busbw + host.latency                     (each GPU)
        all-reduce across the m nodes   of S/g per GPU, all g GPUs of a node at once         (MPI)
        copy back to the GPU            S/g / host.busbw + host.latency
        all-gather in the node          (g-1)/g x S / intra.busbw + (g-1) x intra.latency   (NCCL)

    The g cross-node all-reduces of S/g share the node's network, so together they cost one
    all-reduce of S over m ranks at inter.busbw: 2(m-1)/m x S through the node's link (its NICs
    together), not a tree's 2S. Horovod waits for the reduce-scatter before copying and for each
    copy before the next phase, so nothing overlaps. host None: the copies not costed. With one node
    Horovod runs no hierarchy (size == local size): ring_allreduce_s(S, g, intra) exactly."""
    within = (
        ring_allreduce_s(nbytes, gpus_per_node, intra.busbw_GBps, intra.step_latency_s) if gpus_per_node > 1 else 0.0
    )
    if nodes <= 1:
        return within
    _need_inter(nodes, inter)
    copies = 2 * host_copy_s(nbytes / gpus_per_node, host)
    return within + copies + ALGORITHMS[inter_algorithm](nbytes, nodes, inter.busbw_GBps, inter.step_latency_s)


def uncosted(system, nodes):
    """The label of an all-reduce the model costs only in part: Horovod's hierarchical one across
    nodes without the copies' link ("" where every phase is costed)."""
    if system.topology != "hierarchical" or nodes <= 1 or system.host is not None:
        return ""
    return "allreduce_s without Horovod's copies to host memory and back (prediction.host_copy_GBps): a lower bound"


def hierarchical_notes(host):
    """What a prediction with Horovod's hierarchical all-reduce rests on, in words for its table:
    that the pipeline as it runs (the Gloo controller) cannot run it, and, without host (the copies'
    link, prediction.host_copy_GBps), that its cost leaves the copies out."""
    notes = [
        "topology hierarchical is Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE, which Horovod builds only with MPI "
        "and runs only under its MPI controller (training.horovod_controller: mpi, a Horovod built with MPI, the "
        "variable set in the ranks' environment) and across nodes: the pipeline's Gloo controller, its default, "
        "cannot run it (Horovod then calls NCCL's all-reduce), and PyTorch DDP never does; these rows are what it "
        "would give"
    ]
    if host is None:
        notes.append(
            "hierarchical rows across nodes cost the bytes its NCCL phases and MPI's all-reduce move at the links' "
            "speeds, not Horovod's copy of each GPU's share to host memory and back (prediction.host_copy_GBps "
            "unset): their allreduce_s is a lower bound, their efficiencies an upper one"
        )
    return notes


def network_bytes(nbytes, gpus_per_node, nodes, topology):
    """Bytes one all-reduce of nbytes sends through each node's network link, per direction, as the
    bandwidth term of a flat ring, NCCL's tree (its tuning model's 2S) or Horovod's hierarchical
    all-reduce charges them."""
    n = gpus_per_node * nodes
    if nodes <= 1:
        return 0.0
    per_node = {"ring": 2 * (n - 1) / n, "tree": 2.0, "hierarchical": 2 * (nodes - 1) / nodes}
    if topology not in per_node:
        raise StageError(f"network bytes of {topology!r}: one of {', '.join(per_node)} (nccl picks per message)")
    return per_node[topology] * nbytes


# ---------------------------------------------------------------------------------------------
# A cluster


@dataclass(frozen=True)
class System:
    """A cluster as the model sees it: GPUs per node, the link within a node (one Link, or one per
    GPU count in the node where measured: NVLink meshes and shared PCIe switches give each count
    its own), the link between nodes (None: not known), how an all-reduce crosses nodes (TOPOLOGIES)
    and, for Horovod's hierarchical all-reduce, its algorithm across nodes (ring, tree) and the link
    of its copies between each GPU and host memory (None: not costed)."""

    gpus_per_node: int
    intra: Link | Mapping | None
    inter: Link | None = None
    topology: str = "nccl"
    inter_algorithm: str = "ring"
    host: Link | None = None  # hierarchical only: a GPU's copies to host memory and back (None: not costed)

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
        if self.topology == "hierarchical":
            return hierarchical_allreduce_s(nbytes, g, m, intra, self.inter, self.inter_algorithm, self.host)
        cost = {"ring": flat_ring_allreduce_s, "tree": nccl_tree_allreduce_s, "nccl": nccl_allreduce_s}
        return cost[self.topology](nbytes, g, m, intra, self.inter)

    def reaches(self, n):
        """Whether the model knows every link an n-GPU run uses: the node's where a node holds
        several of its GPUs, the network's where it spans several nodes."""
        g, m = self.layout(n)
        return (m == 1 or self.inter is not None) and (g <= 1 or self.intra is not None)
