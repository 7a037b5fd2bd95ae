"""The sweep's runs as the scaling prediction reads them: each completed run's images/s, batch,
gradient bytes, bucket and step variation, grouped into workloads (one system x framework x
precision on one input path), so the model is checked against each path's own figures: the step
without input (synthetic) is what the all-reduce model describes; a real path adds its input."""

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..common.errors import StageError
from ..common.metrics import STABLE_CV
from ..common.schema import default as config_default
from ..interconnect import prediction as ic
from . import collective_model as cm

MIB = 2**20
# Horovod's documented default HOROVOD_FUSION_THRESHOLD, 64 MiB
# (https://github.com/horovod/horovod/blob/master/docs/tensor-fusion.rst); the pipeline leaves it as it is.
HOROVOD_FUSION_MIB = 64
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
    }


def bucket(framework, recorded_mb, settings):
    """(bytes per message, where that comes from): prediction.bucket_mb, else the run's own."""
    mb = settings.bucket_for(framework)
    if mb:
        return int(mb * MIB), f"prediction.bucket_mb: {mb:g} MiB"
    if framework == "pytorch":
        if recorded_mb:
            return int(recorded_mb * MIB), f"the run's bucket_cap_mb: {recorded_mb:g} MiB"
        default = config_default("training.pytorch.bucket_cap_mb")
        return int(default * MIB), f"DDP's default bucket_cap_mb: {default:g} MiB (not in the run's summary)"
    return HOROVOD_FUSION_MIB * MIB, f"Horovod's default fusion buffer: {HOROVOD_FUSION_MIB} MiB"


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
    bucket_bytes: int
    bucket_from: str
    images_per_s: dict = field(default_factory=dict)
    nodes: dict = field(default_factory=dict)
    step_cv: dict = field(default_factory=dict)  # the largest over the point's repeats

    @property
    def t1(self):
        return self.batch_per_gpu / self.images_per_s[1] if 1 in self.images_per_s else None

    @property
    def model(self):
        return cm.Workload(self.t1, self.batch_per_gpu, self.gradient_bytes, self.bucket_bytes)

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
        nbytes, nbytes_from = bucket(framework, first["bucket_cap_mb"], settings)
        w = Workload(
            system,
            framework,
            precision,
            path,
            first["device"],
            first["batch_per_gpu"],
            first["gradient_bytes"],
            first["gradient_bytes_from"],
            nbytes,
            nbytes_from,
        )
        for n in sorted({r["gpus"] for r in runs}):
            at = [r for r in runs if r["gpus"] == n]
            w.images_per_s[n] = sum(r["images_per_s"] for r in at) / len(at)
            w.nodes[n] = at[0]["nodes"]
            cvs = [r["step_cv"] for r in at if r.get("step_cv") is not None]
            w.step_cv[n] = max(cvs) if cvs else None
        out.append(w)
    return out
