"""The scaling prediction's settings: config.yaml's prediction section as the flags
plan/prediction_args.py passes (each defaulting to the schema's default), and what
scaling_prediction reads of them."""

import argparse
from dataclasses import dataclass

from ..common.schema import default as config_default
from . import collective_model as cm


def _latency(text):
    """A latency flag's value: microseconds, or null (fitted)."""
    if text in ("null", "", None):
        return None
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text}: a latency in microseconds, at least 0, or null")
    return value


def _bucket(text):
    """--bucket-mb: one number of MiB, or FRAMEWORK=MIB,... (a framework left out: 0, its own)."""
    if isinstance(text, (int, float)):
        return float(text)
    try:
        if "=" not in text:
            return float(text)
        return {k.strip(): float(v) for k, v in (item.split("=", 1) for item in text.split(","))}
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text}: MiB, or FRAMEWORK=MIB,... e.g. pytorch=50,tensorflow=64")


@dataclass(frozen=True)
class Settings:
    max_gpus: int
    gpus_per_node: int
    intra_busbw: float
    intra_latency_us: float | None
    inter_busbw: float
    inter_latency_us: float | None
    topology: str
    algorithm: str
    host_copy_GBps: float
    bucket_mb: float | dict
    backward_share: float
    tolerance: float

    @classmethod
    def from_args(cls, a):
        return cls(
            a.max_gpus,
            a.gpus_per_node,
            a.intra_node_busbw_GBps,
            a.intra_node_latency_us,
            a.inter_node_busbw_GBps,
            a.inter_node_latency_us,
            a.topology,
            a.algorithm,
            a.host_copy_GBps,
            a.bucket_mb,
            a.backward_share,
            a.tolerance,
        )

    def overrides(self):
        """Whether prediction.* sets hardware rather than fitting it."""
        return bool(
            self.gpus_per_node
            or self.intra_busbw
            or self.inter_busbw
            or self.intra_latency_us is not None
            or self.inter_latency_us is not None
        )

    def bucket_for(self, framework):
        mb = self.bucket_mb.get(framework, 0) if isinstance(self.bucket_mb, dict) else self.bucket_mb
        return mb or None


def add_arguments(ap):
    """The prediction section's keys as flags (plan/prediction_args.py's words), each defaulting to
    the schema's default; their meaning: schemas/config.schema.yaml."""
    ap.add_argument("--max-gpus", type=int, default=config_default("prediction.max_gpus"))
    ap.add_argument("--gpus-per-node", type=int, default=config_default("prediction.gpus_per_node"))
    ap.add_argument("--intra-node-busbw-GBps", type=float, default=config_default("prediction.intra_node.busbw_GBps"))
    ap.add_argument(
        "--intra-node-latency-us", type=_latency, default=config_default("prediction.intra_node.latency_us")
    )
    ap.add_argument("--inter-node-busbw-GBps", type=float, default=config_default("prediction.inter_node.busbw_GBps"))
    ap.add_argument(
        "--inter-node-latency-us", type=_latency, default=config_default("prediction.inter_node.latency_us")
    )
    ap.add_argument("--topology", choices=["auto", *cm.TOPOLOGIES], default=config_default("prediction.topology"))
    ap.add_argument("--algorithm", choices=list(cm.ALGORITHMS), default=config_default("prediction.algorithm"))
    ap.add_argument("--host-copy-GBps", type=float, default=config_default("prediction.host_copy_GBps"))
    ap.add_argument(
        "--bucket-mb", type=_bucket, default=config_default("prediction.bucket_mb"), help="MiB, or FRAMEWORK=MIB,..."
    )
    ap.add_argument("--backward-share", type=float, default=config_default("prediction.backward_share"))
    ap.add_argument("--tolerance", type=float, default=config_default("prediction.tolerance"))
    return ap
