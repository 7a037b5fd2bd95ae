"""What the interconnect alone predicts for a training run's scaling: the time one all-reduce of
the model's gradients takes at N GPUs (the stage's measurement, interpolated in log-log between
the sizes around it), against the 1-GPU step time t1:

    no overlap    efficiency = t1 / (t1 + t_allreduce)     (all-reduce after the backward pass)
    full overlap  efficiency = t1 / (t1 + t_allreduce - min(b t1, t_allreduce))
                  (as much hidden as the backward pass, b = prediction.backward_share of t1, can)

The measured efficiency (t1 / t_N with the same batch per GPU) lies between them when
communication is what a run loses; below the no-overlap bound something else costs time too.
Plain Python, so that it also runs on a bare GPU host:

    python3 -m workflow_scripts.interconnect.efficiency_bounds --raw OUT/x.json \\
        --baseline-step-s 0.0452 [--step-s 0.0466] [--gradient-bytes 102228128]
    python3 -m workflow_scripts.interconnect.efficiency_bounds --raw OUT/x.json \\
        --baseline-summary RUN_1GPU/summary.json --summary RUN_2GPU/summary.json
"""

import argparse
import json
import math
from pathlib import Path

from ..common import frameworks
from ..common.errors import StageError, run_main
from ..common.schema import default as config_default

# torchvision's ResNet-50 with 1000 classes; the trainers record their model's own count (Keras'
# and Gluon's differ slightly, the embedded default has 16 classes), this is for runs that do not.
RESNET50_PARAMETERS = 25_557_032


def element_bytes(framework, precision, summary):
    """Bytes per gradient element a run all-reduces, for a summary that does not record them.
    PyTorch's autocast and Keras' mixed precision keep float32 parameters, so their gradients go
    out as float32 (PyTorch: bfloat16 with grad_compression bf16); MXNet's fp16 casts the model
    itself to float16, so Horovod all-reduces float16 gradients."""
    if (summary.get(framework) or {}).get("grad_compression") == "bf16":  # PyTorch's option
        return 2
    known = frameworks.REGISTRY.get(framework)
    return known.fp16_gradient_bytes if known and precision == "fp16" else 4


def gradient_bytes(summary, framework, precision):
    """(bytes one step all-reduces, where that figure comes from)."""
    g = summary.get("gradients")
    if g:
        return g["bytes"], f"run summary: {g['elements']} x {g['element_bytes']} B ({g['dtype']})"
    b = element_bytes(framework, precision, summary)
    return RESNET50_PARAMETERS * b, f"rule: ResNet-50's {RESNET50_PARAMETERS} parameters x {b} B"


def allreduce_points(raw):
    """(bytes, median seconds) of the all-reduces a raw output of collectives.py holds."""
    return sorted((r["bytes"], r["median_s"]) for r in raw["results"] if r["collective"] == "all_reduce")


def interpolate(points, nbytes):
    """Seconds for nbytes on the straight line in log(bytes)-log(seconds) between the two
    measured sizes around it; None outside the measured range (no extrapolation)."""
    for (b0, t0), (b1, t1) in zip(points, points[1:]):
        if b0 <= nbytes <= b1:
            f = (math.log(nbytes) - math.log(b0)) / (math.log(b1) - math.log(b0))
            return math.exp(math.log(t0) + f * (math.log(t1) - math.log(t0)))
    if points and points[-1][0] == nbytes:
        return points[-1][1]
    return None


def bounds(t1, t_allreduce, backward_share=None):
    """(no-overlap, full-overlap) efficiency. At most the backward pass, backward_share x t1
    (config prediction.backward_share by default), can hide the all-reduce (predict/step_model.py
    also keeps the last message out, which a single all-reduce time cannot tell)."""
    share = config_default("prediction.backward_share") if backward_share is None else backward_share
    return t1 / (t1 + t_allreduce), t1 / (t1 + t_allreduce - min(share * t1, t_allreduce))


def verdict(measured, no_overlap, full_overlap):
    """(label, sentence): where the measured efficiency lies against the two bounds."""
    said = f"measured {measured:.1%} against {no_overlap:.1%} with no overlap and {full_overlap:.1%} with full overlap"
    if measured >= full_overlap:
        why = " (above 100%: the 1-GPU baseline itself ran slower, e.g. on a busy machine)" if measured > 1 else ""
        return "above full overlap", (
            f"{said}: at or above full overlap, communication costs this run nothing measurable{why}"
        )
    if measured <= no_overlap:
        return "below no overlap", (
            f"{said}: below even no overlap, so the all-reduce alone, sent after the backward "
            f"pass, would cost less than this run lost; something else takes the rest "
            f"(input, synchronisation, ranks sharing cores or memory)"
        )
    if measured - no_overlap < full_overlap - measured:
        return (
            "closer to no overlap",
            f"{said}: closer to no overlap, the all-reduce mostly waits for the backward pass",
        )
    return (
        "closer to full overlap",
        f"{said}: closer to full overlap, the all-reduce mostly runs behind the backward pass",
    )


def _nccl_version(record):
    """The NCCL version (major.minor.patch) a read_logs() result, or a version string, names;
    None where unknown or where several were seen."""
    if isinstance(record, dict):
        found = {v.split("+")[0] for v in record.get("versions") or []}
        return found.pop() if len(found) == 1 else None
    return record.split("+")[0] if record else None


def library_note(run_nccl, run_framework, measured_raw):
    """None where the all-reduce that predicts a run was measured with the collective library the
    run used; else a sentence saying what differs. run_nccl: the run's NCCL as read_logs() gives
    it (or its version string; None: not recorded); run_framework: pytorch, tensorflow or mxnet;
    measured_raw: collectives.py's JSON (torch.distributed). PyTorch all-reduces through
    torch.distributed, TensorFlow and MXNet through Horovod: the same NCCL version is the same
    library whoever calls it, but Horovod's Gloo is its own build, not torch's."""
    if not measured_raw:
        return None
    known = frameworks.REGISTRY.get(run_framework)
    through = ("Horovod" if known.horovod else known.collective) if known else "Horovod"
    name = known.title if known else run_framework
    if measured_raw.get("backend") == "gloo":
        if through == "torch.distributed":
            return None
        return (
            f"the interconnect stage measured torch.distributed's Gloo while this {name} run all-reduced through "
            f"Horovod's Gloo, another build with its own algorithms: the prediction is torch's, not Horovod's"
        )
    measured = _nccl_version(measured_raw.get("nccl")) or _nccl_version(
        (measured_raw.get("versions") or {}).get("nccl")
    )
    ran = _nccl_version(run_nccl)
    if measured and ran and measured == ran:
        return None
    said = f"NCCL {measured}" if measured else "NCCL (version unknown)"
    used = f"NCCL {ran}" if ran else "NCCL (version not recorded)"
    return (
        f"the interconnect stage measured torch.distributed's {said} while this {name} run all-reduced "
        f"through {through}'s {used}"
    )


def step_s(summary):
    """Seconds per step of a run: its global batch / its images/s (timed steps only)."""
    return summary["global_batch"] / summary["images_per_s"]


def _read(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise StageError(f"{path}: cannot be read as JSON ({exc})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--raw", required=True, help="collectives.py's JSON at the run's GPU count")
    base = ap.add_mutually_exclusive_group(required=True)
    base.add_argument("--baseline-step-s", type=float, help="1-GPU step time: batch per GPU / images/s")
    base.add_argument("--baseline-summary", help="the 1-GPU run's summary.json")
    run = ap.add_mutually_exclusive_group()
    run.add_argument("--step-s", type=float, help="the N-GPU run's step time: global batch / images/s")
    run.add_argument("--summary", help="the N-GPU run's summary.json")
    ap.add_argument("--gradient-bytes", type=int, help="default: from --summary, else ResNet-50 in float32")
    a = ap.parse_args()
    raw = _read(a.raw)
    summary = _read(a.summary) if a.summary else {}
    t1 = a.baseline_step_s or step_s(_read(a.baseline_summary))
    tn = a.step_s or (step_s(summary) if summary else None)
    if a.gradient_bytes:
        nbytes, how = a.gradient_bytes, "--gradient-bytes"
    elif summary:
        nbytes, how = gradient_bytes(
            summary, summary.get("framework", ""), summary.get("args", {}).get("precision", "")
        )
    else:
        nbytes, how = RESNET50_PARAMETERS * 4, f"ResNet-50's {RESNET50_PARAMETERS} parameters x 4 B"
    points = allreduce_points(raw)
    t_ar = interpolate(points, nbytes)
    if t_ar is None:
        raise StageError(
            f"{a.raw}: its all-reduces span {points[0][0] if points else 0}-"
            f"{points[-1][0] if points else 0} B, not the {nbytes} B of the gradients: measure up to "
            f"at least that (--max-bytes)"
        )
    no, full = bounds(t1, t_ar)
    print(f"GPUs: {raw['world_size']} on {raw['num_nodes']} node(s), {raw['backend']} on {raw['device']}")
    print(f"gradient bytes: {nbytes} ({how})")
    print(
        f"all-reduce of the gradients: {t_ar * 1e3:.3f} ms (interpolated in log-log, medians of "
        f"{raw['iterations']} calls)"
    )
    print(f"1-GPU step: {t1 * 1e3:.3f} ms")
    print(f"predicted efficiency: no overlap {no:.2%}, full overlap {full:.2%}")
    if tn:
        print(f"N-GPU step: {tn * 1e3:.3f} ms; measured efficiency {t1 / tn:.2%}: {verdict(t1 / tn, no, full)[1]}")


if __name__ == "__main__":
    run_main(main)
