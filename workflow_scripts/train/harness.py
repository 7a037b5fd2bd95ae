"""What the three trainers share: their command line, the run directory, the step log and
summary, telemetry, the per-rank weight digests and the run's provenance.

A run directory holds:
  steps.jsonl              rank 0's per-iteration log (global images per step)
  rank<r>.json             per rank: host, launch, weight digest after the first step and at the end
  telemetry.<node>.csv     one time series per node (written by local rank 0)
  cache.<node>.json        the page-cache report of that node (written before training)
  provenance.<node>.json   that node's CPU, memory, GPUs, driver, CUDA, GPU topology (local rank 0)
  summary.json             images/s and variation (metrics.summarize), config, versions, cache,
                           the gradients one step all-reduces
  weights.*                the final weights (framework format)
"""
import argparse
import hashlib
import json
import math
import platform
import socket
import sys
from pathlib import Path

from ..common import metrics
from ..common.atomic import write_json
from ..common.errors import StageError
from ..common import provenance
from ..common.launch import detect
from ..common.telemetry import Telemetry


def arg_parser(description):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--data", default="", help="the data stage's output directory for this framework")
    ap.add_argument("--data-source", choices=("real", "synthetic"), default="real")
    ap.add_argument("--precision", choices=("fp32", "fp16"), default="fp32")
    ap.add_argument("--batch-per-gpu", type=int, required=True, help="per rank (per GPU, or per CPU process)")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--classes", type=int, default=0, help="synthetic data: number of classes (default 1000)")
    ap.add_argument("--mode", choices=("steps", "epochs"), default="steps")
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--steps", type=int, default=100, help="timed steps, mode=steps")
    ap.add_argument("--epochs", type=float, default=1.0, help="mode=epochs")
    ap.add_argument("--lr", type=float, default=0.1, help="learning rate per 256 images (scaled linearly)")
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=1e-4)
    ap.add_argument("--decode-threads", type=int, default=0, help="0: the framework's rule (see module)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--telemetry-interval", type=float, default=1.0, help="seconds; 0 disables")
    ap.add_argument("--out", required=True, help="run directory")
    return ap


def read_manifest(data_dir):
    path = Path(data_dir) / "manifest.json"
    if not path.is_file():
        raise StageError(f"{path} is missing: {data_dir} is not an output of the data stage")
    return json.loads(path.read_text())


def classes_of(data_dir):
    """Number of classes of a data stage output (its synsets.txt)."""
    return len((Path(data_dir) / "synsets.txt").read_text().split())


def weights_digest(arrays):
    """sha256 over the model's parameters in order (numpy arrays): equal on every rank iff the
    ranks hold identical weights."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(a.tobytes())
    return h.hexdigest()


def gradients(elements, element_bytes, dtype):
    """What one step all-reduces, for the summary: the trainable parameters' gradients as the
    framework sends them. The interconnect stage predicts the step's communication from it."""
    return {"elements": int(elements), "element_bytes": int(element_bytes),
            "bytes": int(elements) * int(element_bytes), "dtype": str(dtype)}


class Run:
    def __init__(self, args, framework, versions):
        self.args, self.framework, self.versions = args, framework, versions
        self.launch = detect()
        self.dir = Path(args.out)
        self.dir.mkdir(parents=True, exist_ok=True)
        if args.data_source == "real" and not args.data:
            raise StageError("--data is required with --data-source real")
        self.global_batch = args.batch_per_gpu * self.launch.world_size
        self.log = metrics.StepLog(self.dir / "steps.jsonl", args.warmup_steps, self.global_batch,
                                   write=self.launch.rank == 0)
        self.digests = {}
        self.telemetry = None
        if self.launch.local_rank == 0:
            write_json(self.dir / f"provenance.{self.node}.json", provenance.node_facts())
        if self.launch.local_rank == 0 and args.telemetry_interval > 0:
            # Synthetic runs watch the dataset's device too: it should show no reads.
            self.telemetry = Telemetry(self.dir / f"telemetry.{self.node}.csv", args.data or None,
                                       args.telemetry_interval)
            self.telemetry.start()

    @property
    def node(self):
        return self.launch.hostname or socket.gethostname()

    @property
    def lr(self):
        return self.args.lr * self.global_batch / 256

    def total_steps(self, train_images):
        """steps: warm-up + timed; epochs: passes over the data at the global batch (the warm-up
        steps are part of the first epoch and excluded from timing)."""
        if self.args.mode == "steps":
            return self.args.warmup_steps + self.args.steps
        if not train_images:
            raise StageError("mode epochs needs real data: a synthetic run has no epoch (use mode steps)")
        steps = math.ceil(self.args.epochs * train_images / self.global_batch)
        if steps <= self.args.warmup_steps:
            raise StageError(f"{self.args.epochs} epoch(s) of {train_images} images at global batch "
                             f"{self.global_batch} is {steps} steps, not more than the {self.args.warmup_steps} warm-up steps")
        return steps

    def record_digest(self, phase, digest):
        self.digests[phase] = digest
        write_json(self.dir / f"rank{self.launch.rank}.json",
                   {"rank": self.launch.rank, "node": self.node, "launch": self.launch.as_dict(),
                    "weights_sha256": self.digests})

    def finish(self, extra=None):
        if self.telemetry:
            self.telemetry.stop()
        self.log.close()
        if self.launch.rank != 0:
            return None
        caches = {p.stem.split(".", 1)[1]: json.loads(p.read_text()) for p in sorted(self.dir.glob("cache.*.json"))}
        settings = {k: v for k, v in vars(self.args).items() if k != "out"}
        summary = {
            "status": "ok",
            "framework": self.framework,
            **metrics.summarize(self.log.steps),
            "global_batch": self.global_batch,
            "world_size": self.launch.world_size,
            "num_nodes": self.launch.num_nodes,
            "launch": self.launch.as_dict(),
            "args": vars(self.args),
            "lr": self.lr,
            "versions": {"python": sys.version.split()[0], "platform": platform.platform(), **self.versions},
            "page_cache": caches or {"note": "no cache report: clearing did not run before this run"},
            "provenance": {"nodes": {p.stem.split(".", 1)[1]: json.loads(p.read_text())
                                     for p in sorted(self.dir.glob("provenance.*.json"))},
                           "code": provenance.code_version(), "settings_hash": provenance.settings_hash(settings)},
            **(extra or {}),
        }
        write_json(self.dir / "summary.json", summary)
        return summary
