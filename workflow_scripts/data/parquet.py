"""ILSVRC2012 as Hugging Face's imagenet-1k holds it: parquet shards train-*.parquet and
validation-*.parquet (in dataset.root or its data/), columns image {bytes, path} and label, read
through pyarrow in place.

imagenet-1k names each image <its ILSVRC2012 name>_<wnid>.JPEG (n01440764_10026_n01440764.JPEG,
ILSVRC2012_val_00000001_n01751748.JPEG); each image gets back the name a tree gives it
(train/<wnid>/n01440764_10026.JPEG, val/ILSVRC2012_val_00000001.JPEG) and the tree's order, so the
copies are a tree's. The label column is trusted only after a check: imagenet-1k's classes are the
sorted WNIDs, and the WNID is in every image's path, so a shard whose labels are in another order
(another release's, a shard from elsewhere) is refused, naming the shard and the first class that
differs, rather than converted mislabelled.

A parquet shard can be read only a row group at a time, so the converters, which read in the
index's shuffled order, keep the last row groups read (Reader) and read a group again where the
order returns to it after it left the cache: docs/data.md says what that costs.
"""

import json
import re
import threading
from collections import OrderedDict
from pathlib import Path, PurePosixPath

from ..common.errors import StageError
from . import layout

SPLITS = {"train": "train-*.parquet", "val": "validation-*.parquet"}
# <name>[_<wnid>].<ext>: imagenet-1k's paths carry the synset last; a tree's name carries it first (train)
HF_NAME = re.compile(r"^(?P<stem>.+?)(?:_(?P<wnid>n\d{8}))?(?P<ext>\.[A-Za-z]+)$")
TRAIN_WNID = re.compile(r"^(n\d{8})_")
# Row groups a Reader keeps: imagenet-1k's of about a hundred images each are about 11 MB
CACHED_GROUPS = 64


def shards(root):
    """{split: [shard paths]} where dataset.root (or its data/) holds Hugging Face's shards, else None."""
    root = Path(root)
    for folder in (root, root / "data"):
        found = {split: sorted(folder.glob(pattern)) for split, pattern in SPLITS.items()}
        if any(found.values()):
            for split, files in found.items():
                if not files:
                    raise StageError(
                        f"{folder} holds Hugging Face parquet shards but none named {SPLITS[split]}: the {split} "
                        f"split is missing. Fix: download imagenet-1k's {SPLITS[split]} into {folder}"
                    )
            return found
    return None


def _pq():
    try:
        import pyarrow.parquet
    except ImportError:  # an environment made before pyarrow was in its requirements
        raise StageError(
            "the parquet form (dataset.root holds *.parquet shards) needs pyarrow: run bash envs/setup.sh again"
        ) from None
    return pyarrow.parquet


def _open(path):
    try:
        pf = _pq().ParquetFile(path)
    except Exception as exc:  # pyarrow's errors are not OSError alone
        raise StageError(f"{path}: not a readable parquet file ({exc})") from None
    fields = {f.name: f for f in pf.schema_arrow}
    image = fields.get("image")
    if (
        "label" not in fields
        or image is None
        or {"bytes", "path"} - {image.type.field(i).name for i in range(image.type.num_fields)}
    ):
        raise StageError(
            f"{path}: not a Hugging Face imagenet-1k shard: needs columns image {{bytes, path}} and label, has "
            f"{', '.join(fields)}"
        )
    return pf


def _rows(path, pf):
    """(row group, row, image path, label) of every row, reading no image bytes."""
    for g in range(pf.num_row_groups):
        t = pf.read_row_group(g, columns=["image.path", "label"])
        names = t.column("image").combine_chunks().field("path").to_pylist()
        for r, (name, label) in enumerate(zip(names, t.column("label").to_pylist())):
            if not name or label is None:
                raise StageError(f"{path}, row group {g}, row {r}: an image without its path or label")
            yield g, r, *_split_name(path, g, r, PurePosixPath(name).name), label


def _split_name(path, g, r, name):
    """(the image's ILSVRC2012 name, the WNID its path names or None)."""
    m = HF_NAME.match(name)
    if not m:
        raise StageError(f"{path}, row group {g}, row {r}: image path {name!r} is not <name>.JPEG")
    return m["stem"] + m["ext"], m["wnid"]


def _class_names(pf):
    try:
        label = json.loads(pf.schema_arrow.metadata[b"huggingface"])["info"]["features"]["label"]
        return list(label["names"])
    except (TypeError, KeyError, ValueError):
        return []


def _train(files):
    rows, names = [], []
    for s, path in enumerate(files):
        pf = _open(path)
        names = names or _class_names(pf)
        for g, r, name, named, label in _rows(path, pf):
            m = TRAIN_WNID.match(name)
            if (named or m) is None or (named and m and named != m.group(1)):
                raise StageError(
                    f"{path}, row group {g}, row {r}: image path {name!r} names no one synset "
                    f"(<wnid>_<n>_<wnid>.JPEG), which the check of the label order needs"
                )
            rows.append((s, g, r, name, label, named or m.group(1)))
    return rows, names


def _check_order(files, rows, synsets):
    """Refuses the first shard whose labels are not the sorted WNIDs' positions, naming its first
    class that differs; then any image labelled other than its own synset."""
    first = [{} for _ in files]  # per shard: label -> its first row
    for row in rows:
        first[row[0]].setdefault(row[4], row)
    for path, seen in zip(files, first):
        for label in sorted(seen):
            _, g, r, name, _, wnid = seen[label]
            if not 0 <= label < len(synsets) or synsets[label] != wnid:
                ours = synsets[label] if 0 <= label < len(synsets) else f"none (there are {len(synsets)})"
                raise StageError(
                    f"{path}: its class {label} is {wnid} (row group {g}, row {r}, {name}), where class {label} of "
                    f"the sorted WNIDs is {ours}: the shard's labels are not imagenet-1k's order (the sorted WNIDs). "
                    f"Fix: download the shard again from Hugging Face's imagenet-1k"
                )
    for s, g, r, name, label, wnid in rows:
        if synsets[label] != wnid:
            raise StageError(
                f"{files[s]}, row group {g}, row {r}: {name} is labelled {label} ({synsets[label]}), not its synset "
                f"{wnid}. Fix: download the shard again from Hugging Face's imagenet-1k"
            )


def discover(root, found):
    train_rows, names = _train(found["train"])
    synsets = sorted({row[5] for row in train_rows})
    _check_order(found["train"], train_rows, synsets)
    train = [
        layout.Item(f"train/{wnid}/{name}", wnid, f"{s}:{g}:{r}")
        for s, g, r, name, label, wnid in sorted(train_rows, key=lambda row: (row[5], row[3]))
    ]
    val = []
    for s, path in enumerate(found["val"]):
        for g, r, name, named, label in _rows(path, _open(path)):
            if not layout.VAL_NAME.match(PurePosixPath(name).stem):
                raise StageError(f"{path}, row group {g}, row {r}: val image {name!r} is not ILSVRC2012_val_%08d.JPEG")
            if not 0 <= label < len(synsets) or (named and synsets[label] != named):
                raise StageError(
                    f"{path}, row group {g}, row {r}: {name} is labelled {label} "
                    f"({synsets[label] if 0 <= label < len(synsets) else 'no class'}, of the train shards' "
                    f"{len(synsets)} sorted WNIDs), its path names {named or 'no synset'}. Fix: download the shard "
                    f"again from Hugging Face's imagenet-1k"
                )
            val.append(layout.Item(f"val/{name}", synsets[label], f"{s}:{g}:{r}"))
    val.sort(key=lambda it: it.relpath)
    words = dict(zip(synsets, names)) if len(names) == len(synsets) else {}
    source = {split: [str(Path(p).resolve()) for p in files] for split, files in found.items()}
    shown = f"labels from the label column of {found['val'][0].parent}/{SPLITS['val']}"
    return layout.Layout(Path(root), synsets, train, val, shown, form="parquet", source=source, words=words)


def named(lay, split, item):
    s, g, r = item.location.split(":")
    return f"{lay.source[split][int(s)]}, row group {g}, row {r} ({PurePosixPath(item.relpath).name})"


class _Group:
    def __init__(self):
        self.ready, self.images, self.error = threading.Event(), None, None


class Reader:
    """Image bytes by (shard, row group, row), a row group read once while it stays among the last
    CACHED_GROUPS read; threads that want a group being read wait for that read."""

    def __init__(self, source, cached=CACHED_GROUPS):
        self.source, self.cached = source, cached
        self.groups, self.lock, self.files = OrderedDict(), threading.Lock(), {}

    def _load(self, split, s, g):
        path = self.source[split][s]
        with self.lock:
            pf = self.files.get(path) or self.files.setdefault(path, _open(path))
        t = pf.read_row_group(g, columns=["image.bytes"])
        return t.column("image").combine_chunks().field("bytes").to_pylist()

    def read(self, split, location, relpath):
        s, g, r = map(int, location.split(":"))
        key = (split, s, g)
        with self.lock:
            group = self.groups.get(key)
            mine = group is None
            if mine:
                group = self.groups[key] = _Group()
                while len(self.groups) > self.cached:
                    self.groups.popitem(last=False)
            else:
                self.groups.move_to_end(key)
        if mine:
            try:
                group.images = self._load(split, s, g)
            except Exception as exc:  # pyarrow's errors are not OSError alone
                group.error = StageError(f"{self.source[split][s]}, row group {g}: cannot read ({exc})")
            group.ready.set()
        group.ready.wait()
        if group.error:
            raise group.error
        if r >= len(group.images) or group.images[r] is None:
            raise StageError(
                f"{self.source[split][s]}, row group {g}, row {r} ({relpath}): no image there: the shard changed "
                f"after indexing. Fix: snakemake --forcerun index_dataset"
            )
        return group.images[r]

    def close(self):
        self.files.clear()
