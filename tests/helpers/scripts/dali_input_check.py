"""Run the DALI input path (workflow_scripts/train/dali_input.py) on the CPU (DALI's CPU pipeline:
device_id=None) and report what it gives, next to what the other paths give for the same data.
Prints JSON:  dali_input_check.py LMDB_DIR WORK_DIR

  labels      per record of the train LMDB (LMDB order): sha256 of its JPEG bytes, its label; what
              dali_input.read gives per shard of 2 over one epoch (bytes' sha256, label, DALI's
              source of the sample); DALIBatches' labels, unshuffled (one rank; also in runs of
              two batches over two epochs) and shuffled (each rank of 2, two epochs); with two
              pipelines a rank (dual), unshuffled, one rank and each of two, in halves
              and in 3 and 4 parts (dali_dual_parts)
  crops       decode_crop on a lossless PNG whose pixels encode their own coordinates: each crop's
              box, next to torchvision's RandomResizedCrop.get_params on an image of the same size
  augment     DALIBatches over an LMDB written by the data stage's writer, of horizontal ramps
              (label 1) and constant-colour images (label 0): per ramp, whether it came out flipped;
              per constant image, its normalized values, next to the CPU path's
  resize      finish (resize, normalize, flip) on whole decoded JPEGs against the CPU path's Pillow
              resize of the same images, in 8-bit levels
"""

import hashlib
import io
import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F
from nvidia.dali import fn, pipeline_def, types
from PIL import Image
from torchvision.transforms import v2 as T
from torchvision.transforms.v2 import functional as TF

from workflow_scripts.common.errors import StageError
from workflow_scripts.data.lmdb_caffe2 import write_split
from workflow_scripts.data.lmdb_dataset import LMDBImageNet
from workflow_scripts.train import dali_input, gpu_input, pytorch_input

lmdb_dir, work = Path(sys.argv[1]), Path(sys.argv[2])
STD = torch.tensor(gpu_input.STD).view(1, 3, 1, 1)
MEAN = torch.tensor(gpu_input.MEAN).view(1, 3, 1, 1)


def sha(data):
    return hashlib.sha256(bytes(data)).hexdigest()[:16]


def cpu_pipe(batch, **kw):
    return pipeline_def(batch_size=batch, num_threads=2, device_id=None, seed=kw.pop("seed", 1), **kw)


# ------------------------------------------------------------------ labels

train = lmdb_dir / "train"
ds = LMDBImageNet(train)
records = [ds.raw(i) for i in range(len(ds))]
out = {"records": [[sha(j), y] for j, y in records]}


def read_shard(shard, shards):
    @cpu_pipe(1, seed=7)
    def pipe():
        return dali_input.read(train, shard, shards, shuffle=True)

    p = pipe()
    p.build()
    size = p.reader_meta(dali_input.READER)["epoch_size"]
    count = math.floor((shard + 1) * size / shards) - math.floor(shard * size / shards)
    got = []
    for _ in range(count):
        jpegs, labels = p.run()
        got.append([sha(np.array(jpegs[0])), int(np.array(labels[0]).reshape(-1)[0]), jpegs[0].source_info()])
    return got


out["reader_shards"] = [read_shard(s, 2) for s in range(2)]


def batch_labels(n, **kw):
    b = dali_input.DALIBatches(train, "cpu", 32, threads=2, **kw)
    try:
        got = [next(b) for _ in range(n)]
    finally:
        b.close()
    x = got[0][0]
    return {
        "labels": [y.tolist() for _, y in got],
        "x_shape": list(x.shape),
        "x_dtype": str(x.dtype),
        "y_dtype": str(got[0][1].dtype),
        "channels_last": x.is_contiguous(memory_format=torch.channels_last),
        "epochs": b.stats()["epochs_completed"],
        "decoder": b.stats()["decoder"],
        "dual_threads": b.stats().get("dual_threads"),
        "dual_parts": b.stats().get("dual_parts"),
    }


N = len(records)
out["unshuffled"] = batch_labels(N // 5, batch=5, seed=3, shuffle=False)
# runs of two batches, over two epochs: the same batches, split out of each run
out["unshuffled_runs"] = batch_labels(2 * (N // 5), batch=5, seed=3, shuffle=False, run_batches=2)
out["ranks"] = [
    batch_labels(
        2 * (N // 2 // 3), batch=3, seed=pytorch_input.input_seed(0, r), rank=r, world_size=2, channels_last=True
    )
    for r in range(2)
]
# two pipelines a rank (dual), unshuffled: one rank over two epochs; two ranks, whose halves differ by
# a record, over two epochs each
out["dual"] = batch_labels(2 * (N // 6), batch=6, seed=3, shuffle=False, decoder="dual", channels_last=True)
out["dual_ranks"] = [
    batch_labels(6, batch=4, seed=pytorch_input.input_seed(0, r), rank=r, world_size=2, shuffle=False, decoder="dual")
    for r in range(2)
]
# dual in 4 parts (dali_dual_parts), unshuffled: one rank over two epochs, its four readers' shards of
# 7, 8, 7 and 8 records, three of them in the CPU's pipeline, 2 records a batch from each (4 runs of
# each shard, the last padded); the same with 1 record from each (7 runs of some shards, 8 of others:
# refused); two ranks in 3 parts, 5 records a shard
out["dual_parts"] = batch_labels(6, batch=8, seed=3, shuffle=False, decoder="dual", dual_parts=4)
try:
    batch_labels(1, batch=4, seed=3, shuffle=False, decoder="dual", dual_parts=4)
    out["dual_parts_drifting"] = None
except StageError as e:
    out["dual_parts_drifting"] = str(e)
out["dual_parts_ranks"] = [
    batch_labels(
        10,
        batch=3,
        seed=pytorch_input.input_seed(0, r),
        rank=r,
        world_size=2,
        shuffle=False,
        decoder="dual",
        dual_parts=3,
    )  # fmt: skip
    for r in range(2)
]

# ------------------------------------------------------------------ crops

H, W, DRAWS = 375, 500, 4000
yy, xx = np.mgrid[0:H, 0:W]
coded = np.stack([xx % 256, yy % 256, xx // 256 + 2 * (yy // 256)], axis=-1).astype(np.uint8)
png = io.BytesIO()
Image.fromarray(coded).save(png, format="PNG")
png = np.frombuffer(png.getvalue(), dtype=np.uint8)


@cpu_pipe(250, seed=11)
def crop_pipe():
    encoded = fn.external_source(source=lambda: [png] * 250, batch=True)
    return dali_input.decode_crop(encoded, "cpu")


p = crop_pipe()
p.build()
boxes, wrong = [], 0
while len(boxes) < DRAWS:
    (crops,) = p.run()
    for i in range(len(crops)):
        c = np.array(crops[i])
        r, g, b = (int(v) for v in c[0, 0])
        t, l, h, w = g + 256 * (b // 2), r + 256 * (b % 2), c.shape[0], c.shape[1]
        boxes.append([t, l, h, w])
        wrong += not np.array_equal(c, coded[t : t + h, l : l + w])  # the crop is that region's pixels
torch.manual_seed(0)
blank = Image.new("RGB", (W, H))
theirs = [
    list(T.RandomResizedCrop.get_params(blank, list(gpu_input.SCALE), list(gpu_input.RATIO))) for _ in range(DRAWS)
]
out["crops"] = {"image": [H, W], "dali": boxes, "torchvision": theirs, "not_the_region": wrong}

# ------------------------------------------------------------------ flips, normalization

rng = np.random.default_rng(5)
ramp = np.round(40 + 170 * np.arange(W) / (W - 1)).astype(np.uint8)
RAMP = np.repeat(np.broadcast_to(ramp[None, :, None], (H, W, 1)), 3, axis=2)
COLOUR = (200, 120, 40)


def jpeg(array):
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(array)).save(buf, format="JPEG", quality=95, subsampling=0)
    return buf.getvalue()


kinds = rng.permutation([1] * 30 + [0] * 10)
ramp_jpeg, flat_jpeg = jpeg(RAMP), jpeg(np.full((H, W, 3), COLOUR, np.uint8))
recs = [SimpleNamespace(position=i, label=int(k), data=ramp_jpeg if k else flat_jpeg) for i, k in enumerate(kinds)]
(work / "augment").mkdir(parents=True, exist_ok=True)
write_split(work / "augment", "train", recs, len(recs))
b = dali_input.DALIBatches(work / "augment" / "train", "cpu", 32, batch=10, seed=21, threads=2)
flips, flat = [], []
for _ in range(60):
    x, y = next(b)
    levels = (x * STD + MEAN) * 255
    for img, label in zip(levels, y.tolist()):
        if label == 1:  # the ramp rises to the right: a flipped one falls
            flips.append(img[0, :, :8].mean().item() > img[0, :, -8:].mean().item())
    flat.append(x[y == 0])
b.close()
dali_flat = torch.cat(flat)
# The CPU path (cpu_transform: RandomResizedCrop, flip, normalize) on the same constant JPEG.
cpu_flat = pytorch_input.cpu_transform(32)(Image.open(io.BytesIO(flat_jpeg)).convert("RGB"))
out["augment"] = {
    "ramp_flipped": flips,
    "flat_dali": {"min": dali_flat.amin(dim=(0, 2, 3)).tolist(), "max": dali_flat.amax(dim=(0, 2, 3)).tolist()},
    "flat_cpu": {"min": cpu_flat.amin(dim=(1, 2)).tolist(), "max": cpu_flat.amax(dim=(1, 2)).tolist()},
    "flat_expected": [(c / 255 - m) / s for c, m, s in zip(COLOUR, gpu_input.MEAN, gpu_input.STD)],
    "level": [1 / (255 * s) for s in gpu_input.STD],
}

# ------------------------------------------------------------------ resize against the CPU path


def resize_levels(size, jpegs, mirror):
    """finish() against the CPU path (Pillow's resize, rounded to 8 bits) and against
    F.interpolate(antialias=True) in float (the GPU path's filter), on the same decoded pixels,
    in 8-bit levels: over the whole image and without its outermost ring of pixels."""

    @cpu_pipe(len(jpegs))
    def pipe():
        encoded = fn.external_source(source=lambda: [np.frombuffer(j, dtype=np.uint8) for j in jpegs], batch=True)
        images = fn.decoders.image(encoded, device="cpu", output_type=types.RGB, adjust_orientation=False)
        return dali_input.finish(images, size, mirror)

    p = pipe()
    p.build()
    (x,) = p.run()
    dali = torch.stack([torch.from_numpy(np.array(x[i])) for i in range(len(jpegs))]) * STD * 255 + MEAN * 255
    pillow, interp = [], []
    for j in jpegs:
        im = Image.open(io.BytesIO(j)).convert("RGB")
        small = TF.pil_to_tensor(TF.resize(im, [size, size], antialias=True)).float()
        smooth = F.interpolate(
            TF.pil_to_tensor(im)[None].float(), size=(size, size), mode="bilinear", align_corners=False, antialias=True
        )[0]
        pillow.append(small.flip(-1) if mirror else small)
        interp.append(smooth.flip(-1) if mirror else smooth)
    got = {}
    for name, ref in (("pillow", pillow), ("interpolate", interp)):
        levels = (dali - torch.stack(ref)).abs()
        got[name] = {
            "mean": levels.mean().item(),
            "max": levels.max().item(),
            "inner_max": levels[:, :, 1:-1, 1:-1].max().item(),
        }
    return got


jpegs = [j for j, _ in records[:12]]
out["resize"] = {
    "down_64": resize_levels(64, jpegs, 0),
    "down_64_mirrored": resize_levels(64, jpegs, 1),
    "up_512": resize_levels(512, jpegs[:3], 0),
}
print(json.dumps(out))
