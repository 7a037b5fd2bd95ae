"""The sweep's runs as the scaling prediction reads them: each completed run's images/s, batch,
gradient bytes, how its library sends them (step_messages.py) and step variation, grouped into
workloads (one system x framework x precision on one input path), so the model is checked against
each path's own figures: the step without input (synthetic) is what the all-reduce model describes;
a real path adds its input."""

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..common import frameworks
from ..common.errors import StageError
from ..common.metrics import STABLE_CV
from ..common.schema import default as config_default
from ..interconnect import efficiency_bounds as ic
from . import step_messages as msg
from . import step_model as sm

MIB = 2**20
# Real data before synthetic, as the verdict table reads them (results/verdict_rules.py), so its
# predicted column reads the workload its verdict does.
INPUT_ORDER = ["dali", "gpu", "cpu", "auto", "synthetic"]


def run_record(point):
    """What the prediction takes from one sweep run's summary; None where there is nothing to take
    (not run, failed, or a CPU figure on a system that requests GPUs, which is no GPU's)."""
    path = Path(point["run_dir"]) / "summary.json"
    if not path.exists():
        return None
    try:
        s = json.loads(path.read_text())
    except ValueError as exc:
        raise StageError(f"{path}: not a run summary ({exc})")
    if s.get("status") == "failed" or not s.get("images_per_s"):
        return None
    device = s.get("device_type") or ("cpu" if str(s.get("device", "")).lower().startswith("cpu") else "gpu")
    if point.get("gpu_request", "none") != "none" and device != "gpu":
        return None
    nbytes, nbytes_from = ic.gradient_bytes(s, point["framework"], point["precision"])
    return {
        **{k: point[k] for k in ("system", "framework", "precision", "gpus", "nodes")},
        "input": point.get("input", "auto"),
        "device": device,
        "images_per_s": s["images_per_s"],
        # the variation "stable" judges: over windows of steps where the run has it (common/metrics.py)
        "step_cv": s.get("window_images_per_s_cv") or s.get("step_images_per_s_cv"),
        "batch_per_gpu": (s.get("args") or {}).get("batch_per_gpu") or s["global_batch"] // point["gpus"],
        "gradient_bytes": nbytes,
        "gradient_bytes_from": nbytes_from,
        "bucket_cap_mb": (s.get("pytorch") or {}).get("bucket_cap_mb") or (s.get("args") or {}).get("bucket_cap_mb"),
        # what decides whether DDP's all-reduces can start during the backward pass (step_messages.py)
        "ddp_graph": (s.get("pytorch") or {}).get("ddp_graph"),
        "compile": (s.get("pytorch") or {}).get("compile"),
    }


def topology(setting, device):
    """How an all-reduce of the runs crosses nodes: prediction.topology, or for auto what the
    libraries do left to themselves. On GPUs NCCL picks ring or tree ("nccl"): PyTorch DDP calls it
    directly, and Horovod (TensorFlow, MXNet) calls NCCL's all-reduce; its hierarchical one runs only
    in a Horovod built with MPI, under its MPI controller, with HOROVOD_HIERARCHICAL_ALLREDUCE set,
    which the pipeline never sets and its default Gloo controller could not run
    (collective_model.hierarchical_allreduce_s). On the CPU Gloo's all-reduce is a ring."""
    if setting != "auto":
        return setting
    return "ring" if device == "cpu" else "nccl"


def ddp_overlaps(compile_mode, ddp_graph):
    """Whether DDP's buckets go out during the backward pass: not where the step is compiled as one
    graph (ddp_graph whole), whose all-reduces wait for the whole backward pass
    (docs/decisions.md#ddp_graph). A summary that records neither is taken as DDP's own way."""
    return not (compile_mode not in (None, "off") and ddp_graph == "whole")


def sending(framework, record, settings, t1):
    """(step_messages.Sending, where it comes from) of a workload: prediction.bucket_mb's fixed size,
    else the library's own: PyTorch DDP's buckets of the run's bucket_cap_mb (which the trainer
    always passes, so DDP's first bucket is a full one), Horovod's Tensor Fusion cycles over the
    backward pass (backward_share x t1) for TensorFlow and MXNet."""
    nbytes = record["gradient_bytes"]
    horovod = frameworks.of(framework).horovod
    overlaps = horovod or ddp_overlaps(record.get("compile"), record.get("ddp_graph"))
    mb = settings.bucket_for(framework)
    if mb:
        said = f"prediction.bucket_mb: {mb:g} MiB"
        return msg.fixed(nbytes, int(mb * MIB), overlaps, said), said
    if not horovod:  # DDP's buckets
        cap = record.get("bucket_cap_mb")
        if cap:
            said = f"the run's bucket_cap_mb: {cap:g} MiB"
        else:
            cap = config_default("training.pytorch.bucket_cap_mb")
            said = f"DDP's default bucket_cap_mb: {cap:g} MiB (not in the run's summary)"
        s = msg.ddp_buckets(nbytes, int(cap * MIB), overlaps=overlaps)
        return s, f"{said}; {s.how}"
    backward = settings.backward_share * t1 if t1 else None
    s = msg.horovod_fusion(nbytes, backward, loop_runs_allreduce=record.get("device") == "cpu")
    return s, f"Horovod's defaults (the pipeline sets neither): {s.how}"


@dataclass
class Workload:
    """One system x framework x precision as the sweep ran it, on one input path: the images/s of
    every GPU count (the mean over its repeats) and the 1-GPU step, batch / that mean at 1 GPU (None
    without a 1-GPU run): scaling.csv's baseline_step_s, so that an efficiency here is its."""

    system: str
    framework: str
    precision: str
    input: str
    device: str
    batch_per_gpu: int
    gradient_bytes: int
    gradient_bytes_from: str
    record: dict  # the first run's record: what its library's messages are formed from
    settings: object
    images_per_s: dict = field(default_factory=dict)
    nodes: dict = field(default_factory=dict)
    step_cv: dict = field(default_factory=dict)  # the largest over the point's repeats

    @property
    def t1(self):
        return self.batch_per_gpu / self.images_per_s[1] if 1 in self.images_per_s else None

    @property
    def sending(self):
        """(step_messages.Sending, where it comes from)."""
        return sending(self.framework, self.record, self.settings, self.t1)

    @property
    def model(self):
        return sm.Workload(self.t1, self.batch_per_gpu, self.sending[0], self.settings.backward_share)

    @property
    def bucket_bytes(self):
        """The largest message a step sends."""
        return max(self.sending[0].messages)

    @property
    def bucket_from(self):
        return self.sending[1]

    @property
    def topology(self):
        return topology(self.settings.topology, self.device)

    @property
    def one_gpu_images_per_s(self):
        return self.images_per_s.get(1)

    def efficiency(self, n):
        return self.images_per_s[n] / (n * self.one_gpu_images_per_s) if self.t1 else None

    def unstable(self):
        """{GPU count: step CV} of the points whose steps vary beyond the study's 2%: figures the
        tool does not vouch for (docs/results.md#verdict-guards), so the model is not judged on them."""
        return {n: cv for n, cv in sorted(self.step_cv.items()) if cv is not None and cv > STABLE_CV}

    @property
    def name(self):
        return f"{self.system} {self.framework} {self.precision}"


def workloads(records, settings):
    """The runs grouped by system x framework x precision x input path, the paths in INPUT_ORDER."""
    groups = {}
    for r in records:
        groups.setdefault((r["system"], r["framework"], r["precision"], r["input"]), []).append(r)
    rank = {p: i for i, p in enumerate(INPUT_ORDER)}
    out = []
    for (system, framework, precision, path), runs in sorted(
        groups.items(), key=lambda kv: (*kv[0][:3], rank.get(kv[0][3], len(rank)), kv[0][3])
    ):
        first = min(runs, key=lambda r: r["gpus"])
        w = Workload(
            system,
            framework,
            precision,
            path,
            first["device"],
            first["batch_per_gpu"],
            first["gradient_bytes"],
            first["gradient_bytes_from"],
            first,
            settings,
        )
        for n in sorted({r["gpus"] for r in runs}):
            at = [r for r in runs if r["gpus"] == n]
            w.images_per_s[n] = sum(r["images_per_s"] for r in at) / len(at)
            w.nodes[n] = at[0]["nodes"]
            cvs = [r["step_cv"] for r in at if r.get("step_cv") is not None]
            w.step_cv[n] = max(cvs) if cvs else None
        out.append(w)
    return out
