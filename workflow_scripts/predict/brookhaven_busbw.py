"""The model's bus bandwidth against the Brookhaven paper's measured all-reduce bandwidths, from
paper_figures.yaml: on each system the paper timed, its measured busbw beside the links' stated
GB/s and the busbw the model (collective_model.py) gives on links of that stated speed."""

import math

from .collective_model import GB, Link, System
from .paper_entries import value, where

BROOKHAVEN_BYTES = 2**30  # the largest size of its Fig. 2
# one flat ring (NCCL_ALGO=Ring), NCCL's tree (NCCL_ALGO=Tree), Horovod's hierarchical all-reduce
TOPOLOGIES_SHOWN = ("ring", "tree", "hierarchical")

BROOKHAVEN_COLUMNS = [
    "system",
    "gpus",
    "nodes",
    "nominal_GBps",
    "measured_busbw_GBps",
    "measured_over_nominal",
    "model_busbw_ring_GBps",
    "model_busbw_tree_GBps",
    "model_busbw_hierarchical_GBps",
    "note",
]


def model_busbw(system, n, nbytes=BROOKHAVEN_BYTES):
    """The bus bandwidth the model gives an all-reduce of nbytes over n GPUs (nccl-tests' rule)."""
    return nbytes / system.allreduce_s(nbytes, n) / GB * 2 * (n - 1) / n


def brookhaven_rows(doc):
    """The Brookhaven paper's measured bus bandwidths beside the links' stated ones and the model's
    on those links, for each way across nodes: one ring, NCCL's tree (about 2 x S through each
    node's network), Horovod's hierarchical all-reduce (2(m-1)/m x S). Across nodes the node's own
    links are left out (taken as infinitely fast), and so are the hierarchical all-reduce's copies
    between GPU and host memory (collective_model.host_copy_s): the network is the bottleneck, and
    the paper gives no figure for either. Within a node the three are the ring, the tree's chain
    and the ring again."""
    out = []
    for s in doc["brookhaven"]["systems"]:
        nominal = value(doc, s["nominal_GBps"])
        measured = value(doc, s["measured_busbw_GBps"])
        n, m = s["gpus"], s["nodes"]
        row = dict.fromkeys(BROOKHAVEN_COLUMNS)
        row.update(system=s["name"], gpus=n, nodes=m, nominal_GBps=nominal, measured_busbw_GBps=measured)
        notes = [f"measured: {where(s['measured_busbw_GBps'])}"]
        if nominal is not None:
            g, intra, inter = (n, Link(nominal), None) if m == 1 else (n // m, Link(math.inf), Link(nominal))
            if m > 1:
                notes.append(
                    "nominal: the network; the node's links taken as infinitely fast, and so Horovod's copies to "
                    "host memory and back: the hierarchical column is the bytes its phases move"
                )
            # within a node NCCL's tree is a chain that its own model rates below the ring: not a way NCCL
            # picks for large messages there, so not shown
            shown = TOPOLOGIES_SHOWN if m > 1 else ("ring", "hierarchical")
            row.update({f"model_busbw_{t}_GBps": model_busbw(System(g, intra, inter, t), n) for t in shown})
        if nominal and measured:
            row["measured_over_nominal"] = measured / nominal
        row["note"] = "; ".join(notes)
        out.append(row)
    return out
