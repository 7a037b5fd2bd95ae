"""Val images as the networks see them, the same for calibration and scoring: decoded from the
data stage's LMDB (record = position in the val split), shorter side resized to size x 256/224,
centre-cropped to size x size, scaled to [0, 1] and normalised with ImageNet's mean and std (as
the training stage normalises, and as torchvision's ImageNet weights expect)."""

import io
import os
import threading

import numpy as np
import torch
from PIL import Image
from torchvision.transforms import v2 as T

from ..common.errors import StageError
from ..common.parallel import ordered_map
from ..data.lmdb_dataset import LMDBImageNet
from .image_lists import read_tsv

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def resize_for(size):
    """The shorter side before the centre crop: 256 for the 224 crop, in proportion otherwise."""
    return round(size * 256 / 224)


def transform(size):
    return T.Compose(
        [
            T.Resize(resize_for(size), antialias=True),
            T.CenterCrop(size),
            T.PILToTensor(),
            T.ToDtype(torch.float32, scale=True),
            T.Normalize(MEAN, STD),
        ]
    )


def read_list(path):
    """[(position, label)] of a split list (split.py's calibration.tsv or scoring.tsv)."""
    return [(int(r["position"]), int(r["label"])) for r in read_tsv(path)]


def batches(lmdb_dir, items, size, batch_size, threads, desc):
    """Yield (float32 N x 3 x size x size, labels, positions) over `items` in order. Records are
    read under a lock (one LMDB reader), decoded and transformed in `threads` threads; a record's
    label must be the list's, or the LMDB and the list come from different datasets."""
    ds = LMDBImageNet(os.path.join(lmdb_dir, "val"))
    tf = transform(size)
    lock = threading.Lock()

    def load(item):
        pos, label = item
        with lock:
            jpeg, stored = ds.raw(pos)
        if stored != label:
            raise StageError(
                f"{lmdb_dir}/val record {pos} has label {stored}, the split list says {label}: "
                f"the LMDB and the index are from different runs of the data stage"
            )
        with Image.open(io.BytesIO(jpeg)) as im:
            return tf(im.convert("RGB")).numpy(), label, pos

    batch = []
    for sample in ordered_map(load, items, threads, desc):
        batch.append(sample)
        if len(batch) == batch_size:
            yield _stack(batch)
            batch = []
    if batch:
        yield _stack(batch)


def _stack(samples):
    return (np.stack([s[0] for s in samples]), np.array([s[1] for s in samples]), [s[2] for s in samples])
