"""The verdict table's measures read from the INT8 stage's tables: INT8's speed-up over FP32 by batch
size (Fig. 9) and the accuracy it loses (Table III)."""

from ..common.chance_level import describe, no_better_than_guessing
from . import stage_outputs as names
from .guards import int8_caveats
from .verdict_rules import Unmeasured, col, compare, result


def int8_speedup(t, f, tol):
    rows = t[names.INT8_THROUGHPUT]
    rows = rows[rows.model == "resnet50"]
    small = f["batches"] == "below_64"
    rows = rows[rows.batch_size < 64] if small else rows[rows.batch_size >= 64]
    if rows.empty:
        raise Unmeasured(
            f"no ResNet-50 batch size {'below' if small else 'of'} 64{'' if small else ' or more'} in "
            f"{names.INT8_THROUGHPUT}.csv; set inference.throughput.batch_sizes (and resnet50 in "
            f"inference.throughput.models)"
        )
    cpu = rows.engine.iloc[0] != "tensorrt"
    device = f"{rows.device.iloc[0]} ({rows.engine.iloc[0]}{', CPU' if cpu else ''})"
    text = "; ".join(f"batch {r.batch_size}: {r.int8_over_fp32:.2f}x" for r in rows.itertuples())
    # Each batch size's ratio with its interval: its slowest INT8 run over the fastest FP32 one, and back.
    values = [_int8_interval(r) for r in rows.itertuples()]
    return result(
        text,
        rows.int8_over_fp32.median(),
        "batch sizes " + ", ".join(str(b) for b in rows.batch_size),
        True,
        device,
        compare(f, values, tol),
        caveats=[c for r in rows.itertuples() for c in int8_caveats(r)],
        cpu=cpu,
    )


def _int8_interval(r):
    """(ratio, low, high) of one batch size: the median ratio scaled by the runs' spread on either side."""
    ratio, spread = r.int8_over_fp32, []
    for a, b in (("int8_worst", "fp32_best"), ("int8_best", "fp32_worst")):
        if not (col(r, a) and col(r, b)):
            return (ratio,) * 3
        spread.append((getattr(r, a) / r.int8_images_per_s) / (getattr(r, b) / r.fp32_images_per_s))
    return ratio, ratio * spread[0], ratio * spread[1]


def int8_accuracy(t, f, tol):
    rows = t[names.INT8_ACCURACY]
    if rows.empty:
        raise Unmeasured(f"{names.INT8_ACCURACY}.csv has no network; set inference.models")
    diff = rows[f"diff_{f['metric']}"].abs()
    worst = rows.loc[diff.idxmax()]
    allowed = f["bound"] + 100.0 / rows.scored_images.min()
    text = f"largest |FP32 - INT8| {diff.max():.2f} points ({worst.network}); allowed {allowed:.2f}"
    point = ", ".join(f"{r.network} ({r.scored_images} images)" for r in rows.itertuples())
    device = f"{rows.engine.iloc[0]}" + (", CPU" if rows.engine.iloc[0] != "tensorrt" else "")
    missing = f"on {len(rows)} of the study's 7 networks (inference.models adds the others)" if len(rows) < 7 else ""
    # An accuracy finding does not depend on the device: a CPU's figure decides it as a GPU's would.
    # It does depend on a model that has learned: two that guess agree to within chance.
    k, right = (1, "fp32_top1_correct") if f["metric"] == "top1" else (5, "fp32_top5_correct")
    caveats = [
        f"{r.network}: {describe(getattr(r, right), r.scored_images, int(r.classes), k)}"
        for r in rows.itertuples()
        if col(r, "classes") and no_better_than_guessing(getattr(r, right), r.scored_images, int(r.classes), k)
    ]
    return result(text, diff.max(), point, not missing, device, diff.max() <= allowed, missing, caveats)
