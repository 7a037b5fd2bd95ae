"""Read the three formats back with NVIDIA DALI's own readers (CPU pipelines: device_id=None).
Prints JSON: per format and split, the labels in reading order (TFRecord's less the manifest's
label_offset) and the decoded shapes."""

import json
import sys
from pathlib import Path

import nvidia.dali.fn as fn
import nvidia.dali.tfrecord as tfrec
import nvidia.dali.types as types
from nvidia.dali import pipeline_def

data = Path(sys.argv[1])


def read_all(make_reader, count, offset=0):
    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        jpegs, labels = make_reader()
        return fn.decoders.image(jpegs, device="cpu", output_type=types.RGB), labels

    p = pipe()
    p.build()
    labels, shapes = [], []
    for _ in range(count):
        images, lab = p.run()
        labels.append(int(lab.at(0).reshape(-1)[0]) - offset)
        shapes.append(list(images.at(0).shape))
    return {"labels": labels, "shapes": shapes}


def tfrecord(split):
    prefix = "train" if split == "train" else "validation"
    shards = sorted(p for p in (data / "tfrecord").glob(prefix + "-*"))

    def reader():
        feats = fn.readers.tfrecord(
            path=[str(s) for s in shards],
            index_path=[str(data / "tfrecord" / "idx" / (s.name + ".idx")) for s in shards],
            features={
                "image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1),
            },
        )
        return feats["image/encoded"], feats["image/class/label"]

    return reader


def mxnet(split):
    return lambda: fn.readers.mxnet(
        path=[str(data / "recordio" / f"{split}.rec")], index_path=[str(data / "recordio" / f"{split}.idx")]
    )


def caffe2(split):
    return lambda: fn.readers.caffe2(path=str(data / "lmdb" / split))


counts = {s: json.loads((data / "lmdb" / "manifest.json").read_text())["splits"][s]["images"] for s in ("train", "val")}
offsets = {"tfrecord": json.loads((data / "tfrecord" / "manifest.json").read_text())["label_offset"]}
out = {
    name: {s: read_all(make(s), counts[s], offsets.get(name, 0)) for s in ("train", "val")}
    for name, make in (("tfrecord", tfrecord), ("mxnet", mxnet), ("caffe2", caffe2))
}
print(json.dumps(out))
