"""Top-1 and top-5 accuracy of one engine over the scored val images (split.py's scoring.tsv,
never the calibration images), in batches as the study ran them.

Writes the counts (JSON) and every image's top-5 classes (TSV: position, label, top5), so a
table's figures can be traced to images.
"""

import argparse
import time

import numpy as np

from ..cluster import cpus
from ..common.atomic import write_json
from ..common.errors import StageError, run_main
from . import engines, val_images
from .image_lists import write_tsv


def top5(logits):
    """The five highest-scoring classes per row, best first (ties: the lower class)."""
    order = np.argsort(-logits, axis=1, kind="stable")
    return order[:, :5]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    engines.add_engine_args(ap)
    ap.add_argument("--images", required=True, help="scoring.tsv (split.py)")
    ap.add_argument("--lmdb", required=True)
    ap.add_argument("--image-size", type=int, required=True)
    ap.add_argument("--batch-size", type=int, required=True)
    cpus.add_job_threads(ap)
    ap.add_argument("--out", required=True, help="counts (JSON)")
    ap.add_argument("--predictions", required=True, help="per-image top-5 (TSV)")
    a = ap.parse_args()
    a.threads = cpus.job_threads(a)
    items = val_images.read_list(a.images)
    runner = engines.open_engine(a.engine, a.engine_file, a.threads)
    labels_max = max(lab for _, lab in items)
    if labels_max >= runner.classes:
        raise StageError(
            f"{a.network} has {runner.classes} outputs, but the val images have labels up to {labels_max}: "
            f"its weights are for another set of classes (see inference.models.{a.network})"
        )
    rows, top1, top5_hits = [], 0, 0
    start = time.perf_counter()
    for x, y, positions in val_images.batches(a.lmdb, items, a.image_size, a.batch_size, a.threads, a.precision):
        best = top5(runner.run(x))
        top1 += int((best[:, 0] == y).sum())
        top5_hits += int((best == y[:, None]).any(axis=1).sum())
        rows += [(p, lab, " ".join(map(str, b))) for p, lab, b in zip(positions, y, best)]
    runner.close()
    n = len(rows)
    write_tsv(a.predictions, ("position", "label", "top5"), rows)
    write_json(
        a.out,
        {
            "network": a.network,
            "precision": a.precision,
            "engine": a.engine,
            "images": n,
            "top1_correct": top1,
            "top5_correct": top5_hits,
            "top1": top1 / n,
            "top5": top5_hits / n,
            "classes": runner.classes,
            # What the engine ran on, for the accuracy table (TensorRT kernels differ by GPU model).
            "device": runner.device,
            "host": engines.host_name(),
            "batch_size": a.batch_size,
            "image_size": a.image_size,
        },
    )
    print(
        f"evaluate: {a.network} {a.precision} on {a.engine}: top-1 {top1}/{n} = {top1 / n:.2%}, "
        f"top-5 {top5_hits}/{n} = {top5_hits / n:.2%} ({n / (time.perf_counter() - start):.0f} images/s with decoding)"
    )


if __name__ == "__main__":
    run_main(main)
