"""TFRecord shards with the feature keys of TensorFlow's ImageNet builder, and DALI index files.

train-%05d-of-%05d / validation-%05d-of-%05d, written with tf.io.TFRecordWriter; beside each
shard under idx/, DALI's tfrecord2idx format: one "offset size" line per record.
"""

import numpy as np
import tensorflow as tf

from ..common.errors import run_main
from ..common.schema import default as config_default
from . import convert

# TFRecord framing: uint64 length, uint32 crc of length, data, uint32 crc of data.
FRAME_OVERHEAD = 16


def example(rec, label_offset):
    def b(v):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))

    def i(v):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))

    empty = tf.train.Feature(float_list=tf.train.FloatList(value=[]))
    feats = {
        "image/height": i(rec.height),
        "image/width": i(rec.width),
        "image/colorspace": b(b"RGB"),
        "image/channels": i(3),
        "image/class/label": i(rec.label + label_offset),
        "image/class/synset": b(rec.synset.encode()),
        "image/class/text": b(rec.text.encode()),
        "image/format": b(b"JPEG"),
        "image/filename": b(rec.relpath.rsplit("/", 1)[-1].encode()),
        "image/encoded": b(rec.data),
        # The builder's bounding-box keys, empty: classification needs none.
        **{f"image/object/bbox/{k}": empty for k in ("xmin", "ymin", "xmax", "ymax")},
        "image/object/bbox/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feats))


def writer(shards, label_offset):
    def write_split(out, split, records, count):
        prefix = "train" if split == "train" else "validation"
        n_shards = max(1, min(shards[split], count))
        bounds = np.linspace(0, count, n_shards + 1).astype(int)
        (out / "idx").mkdir(exist_ok=True)
        files = []
        records = iter(records)
        for s in range(n_shards):
            name = f"{prefix}-{s:05d}-of-{n_shards:05d}"
            offset = 0
            with tf.io.TFRecordWriter(str(out / name)) as w, open(out / "idx" / f"{name}.idx", "w") as idx:
                for _ in range(bounds[s], bounds[s + 1]):
                    data = example(next(records), label_offset).SerializeToString()
                    w.write(data)
                    idx.write(f"{offset} {len(data) + FRAME_OVERHEAD}\n")
                    offset += len(data) + FRAME_OVERHEAD
            files += [out / name, out / "idx" / f"{name}.idx"]
        return files

    return write_split


def main():
    ap = convert.arg_parser(__doc__.splitlines()[0])
    ap.add_argument("--train-shards", type=int, default=1024)
    ap.add_argument("--val-shards", type=int, default=128)
    ap.add_argument(
        "--label-offset",
        type=int,
        choices=(0, 1),
        default=config_default("conversion.tfrecord.label_offset"),
        help="added to the 0-based class index: 1 (the default) is TF's builder's convention "
        "(0 = background), 0 stores the index itself",
    )
    a = ap.parse_args()
    convert.run(
        "tfrecord",
        writer({"train": a.train_shards, "val": a.val_shards}, a.label_offset),
        a,
        {"label_offset": a.label_offset},
    )


if __name__ == "__main__":
    run_main(main)
