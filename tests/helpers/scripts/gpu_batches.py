"""Run gpu_input.GPUBatches (on CPU tensors) over an lmdb output dir's train split in batches
of 4, with 1 and 2 lanes, twice each, and with nvImageCodec's decoder, and report what came out
in which order.
Prints JSON:  gpu_batches.py LMDB_DIR"""

import hashlib
import json
import sys

from workflow_scripts.data.lmdb_dataset import LMDBImageNet
from workflow_scripts.train import gpu_input

ds = LMDBImageNet(f"{sys.argv[1]}/train")
items = [ds.raw(i) for i in range(len(ds))]
raw = [gpu_input.collate_raw(items[i : i + 4]) for i in range(0, len(items) - 3, 4)]


def run(lanes, n=6, decoder="torchvision"):
    gpu = gpu_input.GPUBatches(iter(raw), "cpu", 32, seed=5, lanes=lanes, depth=3, decoder=decoder)
    try:
        out = [next(gpu) for _ in range(n)]
    finally:
        gpu.close()
    return {
        "labels": [y.tolist() for _, y in out],
        "pixels": [hashlib.sha256(x.contiguous().numpy().tobytes()).hexdigest()[:16] for x, _ in out],
        "stats_lanes": gpu.stats().get("lanes"),
        "max": [x.abs().max().item() for x, _ in out],
        "x": [x for x, _ in out],
    }


def levels(a, b):
    """Largest difference of two runs' batches, in 8-bit levels of the first channel's std."""
    return max(((p - q).abs().max() * 0.229 * 255).item() for p, q in zip(a["x"], b["x"]))


one, two, two_again, nvimg = run(1), run(2), run(2), run(1, decoder="nvimgcodec")
nvimg_levels = levels(one, nvimg)
for r in (one, two, two_again, nvimg):
    del r["x"]


print(
    json.dumps(
        {
            "expected_labels": [r[2].tolist() for r in raw[:6]],
            "one": one,
            "two": two,
            "two_again": two_again,
            "nvimgcodec": nvimg,
            "nvimgcodec_vs_torchvision_levels": nvimg_levels,
        }
    )
)
