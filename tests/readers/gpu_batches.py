"""Run gpu_input.GPUBatches (on CPU tensors) over an lmdb output dir's train split in batches
of 4, with 1 and 2 lanes, twice each, and report what came out in which order.
Prints JSON:  gpu_batches.py LMDB_DIR"""
import hashlib
import json
import sys

from workflow_scripts.data.lmdb_dataset import LMDBImageNet
from workflow_scripts.train import gpu_input

ds = LMDBImageNet(f"{sys.argv[1]}/train")
items = [ds.raw(i) for i in range(len(ds))]
raw = [gpu_input.collate_raw(items[i:i + 4]) for i in range(0, len(items) - 3, 4)]


def run(lanes, n=6):
    gpu = gpu_input.GPUBatches(iter(raw), "cpu", 32, seed=5, lanes=lanes, depth=3)
    try:
        out = [next(gpu) for _ in range(n)]
    finally:
        gpu.close()
    return {"labels": [y.tolist() for _, y in out],
            "pixels": [hashlib.sha256(x.contiguous().numpy().tobytes()).hexdigest()[:16] for x, _ in out],
            "stats_lanes": gpu.stats().get("lanes")}


print(json.dumps({"expected_labels": [r[2].tolist() for r in raw[:6]], "one": run(1), "two": run(2),
                  "two_again": run(2)}))
