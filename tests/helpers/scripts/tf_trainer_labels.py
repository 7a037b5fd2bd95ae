"""The class labels the TensorFlow trainer's own input pipelines (train and validation) give for a
tfrecord output dir, with the label_offset its manifest records, as the trainer takes it. Prints
JSON: train labels of one epoch (shuffled order), validation labels by record number."""

import json
import sys
from types import SimpleNamespace

from workflow_scripts.train import harness
from workflow_scripts.train import tensorflow_horovod as tfh

data = sys.argv[1]
manifest = harness.read_manifest(data)
offset = manifest.get("label_offset", 0)  # as the trainer reads it
run = SimpleNamespace(
    args=SimpleNamespace(data=data, seed=0, batch_per_gpu=1, image_size=32),
    launch=SimpleNamespace(rank=0, world_size=1, local_size=1),
)
count = manifest["splits"]["train"]["images"]
train = [int(y[0]) for _, y in tfh.dataset(run, offset, 1).take(count)]
val = {
    int(n): int(y)
    for numbers, _, labels in tfh.val_dataset(run, offset, 1)
    for n, y in zip(numbers.numpy(), labels.numpy())
}
print(json.dumps({"offset": offset, "train": train, "val": [val[n] for n in sorted(val)]}))
