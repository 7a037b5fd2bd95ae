"""Read a tfrecord output dir back with tf.data and the standard ImageNet feature spec; check
DALI's index files against the shards. Prints JSON: per record its stored label and its class
(the label less the manifest's label_offset, as a reader of the data stage's output takes it)."""

import hashlib
import json
import struct
import sys
from pathlib import Path

import tensorflow as tf

SPEC = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
    "image/class/synset": tf.io.FixedLenFeature([], tf.string),
    "image/class/text": tf.io.FixedLenFeature([], tf.string),
    "image/filename": tf.io.FixedLenFeature([], tf.string),
    "image/format": tf.io.FixedLenFeature([], tf.string),
    "image/height": tf.io.FixedLenFeature([], tf.int64),
    "image/width": tf.io.FixedLenFeature([], tf.int64),
    "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
}


def check_index(shard, idx):
    data = shard.read_bytes()
    pos = 0
    for line in idx.read_text().splitlines():
        offset, size = map(int, line.split())
        (length,) = struct.unpack("<Q", data[offset : offset + 8])
        if offset != pos or size != length + 16:
            return False
        pos += size
    return pos == len(data)


out = {}
root = Path(sys.argv[1])
offset = json.loads((root / "manifest.json").read_text())["label_offset"]
for split, prefix in (("train", "train-"), ("val", "validation-")):
    shards = sorted(str(p) for p in root.glob(prefix + "*"))
    ds = tf.data.TFRecordDataset(shards).map(lambda r: tf.io.parse_single_example(r, SPEC))
    records = {}
    for ex in ds:
        img = tf.io.decode_jpeg(ex["image/encoded"], channels=0)
        records[ex["image/filename"].numpy().decode()] = {
            "stored_label": int(ex["image/class/label"]),
            "label": int(ex["image/class/label"]) - offset,
            "synset": ex["image/class/synset"].numpy().decode(),
            "format": ex["image/format"].numpy().decode(),
            "shape": list(img.shape),
            "hw": [int(ex["image/height"]), int(ex["image/width"])],
            "sha256": hashlib.sha256(ex["image/encoded"].numpy()).hexdigest(),
        }
    out[split] = records
    out[split + "_shards"] = len(shards)
    out[split + "_index_ok"] = all(check_index(Path(s), root / "idx" / (Path(s).name + ".idx")) for s in shards)
print(json.dumps(out))
