"""ILSVRC2012 as image-net.org hands it out, read in place: ILSVRC2012_img_train.tar (a tar of one
tar per synset), ILSVRC2012_img_val.tar (flat ILSVRC2012_val_%08d.JPEG) and the devkit
(ILSVRC2012_devkit_t12.tar.gz: data/meta.mat and data/ILSVRC2012_validation_ground_truth.txt).

Neither tar is compressed, so every image's bytes lie at a fixed offset of its archive file: the
index reads the member lists (each inner tar's headers through the outer one, nothing written
anywhere), records each image's offset, and the converters read the bytes with one pread each, in
any order. The images get the names an extraction would give them (train/<wnid>/<name>,
val/<name>) and the order a tree's layout gives them, so every format's copy is the one the
extracted tree makes.

Python's tarfile ends a listing quietly at a cut-off archive, as if it were complete; so each tar
(outer and inner) must hold its members' data whole and end in tar's end-of-archive block, or it is
refused, naming the archive and member.
"""

import io
import os
import tarfile
from pathlib import Path, PurePosixPath

from ..common.errors import StageError
from . import layout

TRAIN_TAR = "ILSVRC2012_img_train.tar"
VAL_TAR = "ILSVRC2012_img_val.tar"
DEVKIT = "ILSVRC2012_devkit_t12.tar.gz"
# config key -> the archive's name in dataset.root
KEYS = {"train_tar": TRAIN_TAR, "val_tar": VAL_TAR, "devkit": DEVKIT}
GROUND_TRUTH = "data/ILSVRC2012_validation_ground_truth.txt"
META = f"data/{layout.DEVKIT_META}"
BLOCK = tarfile.BLOCKSIZE
REFETCH = "Fix: download it again from image-net.org and compare its md5 with the one the download page gives"


def paths(root, given=None):
    """{config key: archive path} where dataset.root holds the archives or config names one
    (`given`: config dataset.train_tar, val_tar, devkit), else None (a tree or parquet shards)."""
    given = {k: v for k, v in (given or {}).items() if v}
    root = Path(root)
    if not given and not (root / TRAIN_TAR).exists():
        return None
    found = {key: Path(given.get(key) or root / name) for key, name in KEYS.items()}
    for key, path in found.items():
        if not path.is_file():
            where = f"config dataset.{key}" if key in given else f"dataset.root {root} (or config dataset.{key})"
            raise StageError(
                f"{path} is missing: image-net.org's archive form needs {', '.join(KEYS.values())}, each in "
                f"{where}. Fix: put it there or set config dataset.{key} to its path"
            )
    return found


def _whole(fd, archive, container, start, size, tar):
    """Refuses a tar (the archive, or a member tar at `start`) that was cut: a member's data past
    its end, or no end-of-archive block after the last member."""
    where = f"{archive}" + (f", member {container}" if container else "")
    last = None
    try:
        members = tar.getmembers()
    except tarfile.TarError as exc:
        raise StageError(f"{where}: truncated or damaged ({exc}). {REFETCH}") from None
    for m in members:
        if m.isreg() and m.offset_data + m.size > size:
            raise StageError(
                f"{where}: truncated: member {m.name} needs {m.offset_data + m.size:,} bytes, the tar holds "
                f"{size:,}. {REFETCH}"
            )
        last = m
    end = tar.offset
    if end + BLOCK > size or os.pread(fd, BLOCK, start + end) != bytes(BLOCK):
        after = f" after member {last.name}" if last else ""
        raise StageError(
            f"{where}: truncated: no end-of-archive block{after} (byte {end:,} of {size:,}), so members after it "
            f"may be lost. {REFETCH}"
        )


def _open(path, fileobj=None, name=None):
    try:
        return tarfile.open(name=None if fileobj else path, fileobj=fileobj, mode="r:")
    except (tarfile.TarError, OSError) as exc:
        raise StageError(f"{name or path}: not a readable tar ({exc}). {REFETCH}") from None


def _images(members):
    return [m for m in members if m.isreg() and PurePosixPath(m.name).suffix.lower() in layout.IMAGE_SUFFIXES]


def _train(path):
    """{wnid: [(name, absolute offset, size)]} of the train tar's inner tars."""
    synsets = {}
    size = path.stat().st_size
    with open(path, "rb") as f, _open(path) as outer:
        _whole(f.fileno(), path, "", 0, size, outer)
        for m in outer.getmembers():
            wnid = PurePosixPath(m.name).name.removesuffix(".tar")
            if not m.isreg() or not m.name.endswith(".tar"):
                continue
            inner = _open(None, outer.extractfile(m), f"{path}, member {m.name}")
            with inner:
                _whole(f.fileno(), path, m.name, m.offset_data, m.size, inner)
                synsets[wnid] = [
                    (PurePosixPath(i.name).name, m.offset_data + i.offset_data, i.size) for i in _images(inner)
                ]
    if not synsets:
        raise StageError(f"{path} holds no per-synset tars (<wnid>.tar). {REFETCH}")
    return synsets


def _val(path):
    size = path.stat().st_size
    with open(path, "rb") as f, _open(path) as tar:
        _whole(f.fileno(), path, "", 0, size, tar)
        return [(PurePosixPath(m.name).name, m.offset_data, m.size) for m in _images(tar)]


def _devkit(path):
    """({image number: WNID}, {WNID: words}) from the devkit's ground truth and meta.mat."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            found = {}
            for m in tar.getmembers():
                for want in (GROUND_TRUTH, META):
                    if m.isreg() and m.name.endswith(want):
                        found[want] = (m.name, tar.extractfile(m).read())
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise StageError(f"{path} (config dataset.devkit): not a readable tar.gz ({exc}). {REFETCH}") from None
    for want in (GROUND_TRUTH, META):
        if want not in found:
            raise StageError(f"{path} (config dataset.devkit) holds no {want}: is it ILSVRC2012's devkit ({DEVKIT})?")
    meta_name = f"{path}:{found[META][0]}"
    ids, words = layout.devkit_meta(io.BytesIO(found[META][1]), meta_name)
    lines = [ln.strip() for ln in found[GROUND_TRUTH][1].decode(errors="replace").splitlines() if ln.strip()]
    return layout.devkit_labels(f"{path}:{found[GROUND_TRUTH][0]}", lines, ids, meta_name), words


def discover(root, found, val_subset=False):
    """The Layout of the archives `found` (paths()), in a tree's order with its names. The devkit
    first: it is small, and a problem with the labels is named before the train tar's hundreds of
    thousands of headers are read."""
    labels, words = _devkit(found["devkit"])
    train = _train(found["train_tar"])
    synsets = sorted(train)
    items = [
        layout.Item(f"train/{wnid}/{name}", wnid, f"{offset}:{size}")
        for wnid in synsets
        for name, offset, size in sorted(train[wnid])
    ]
    if not items:
        raise StageError(f"{found['train_tar']}: its per-synset tars hold no .JPEG members. {REFETCH}")
    numbers, val = [], []
    for name, offset, size in sorted(_val(found["val_tar"])):
        m = layout.VAL_NAME.match(PurePosixPath(name).stem)
        if not m:
            raise StageError(f"{found['val_tar']}, member {name}: val members must be named ILSVRC2012_val_%08d.JPEG")
        wnid = labels.get(int(m.group(1)))
        if wnid is None:
            raise StageError(f"{found['val_tar']}, member {name} has no label in {found['devkit']}")
        numbers.append(int(m.group(1)))
        val.append(layout.Item(f"val/{name}", wnid, f"{offset}:{size}"))
    layout.check_labels_whole(f"{found['devkit']}:{GROUND_TRUTH}", labels, numbers, val_subset, positional=True)
    unknown = sorted({it.synset for it in val} - set(synsets))
    if unknown:
        raise StageError(
            f"{found['devkit']}: validation labels name synsets with no per-synset tar in {found['train_tar']}: "
            f"{', '.join(unknown[:10])}{' ...' if len(unknown) > 10 else ''}"
        )
    source = {"train": str(Path(found["train_tar"]).resolve()), "val": str(Path(found["val_tar"]).resolve())}
    return layout.Layout(
        Path(root),
        synsets,
        items,
        val,
        f"labels from {found['devkit']}:{GROUND_TRUTH}",
        form="archives",
        source=source,
        words={w: words.get(w, w) for w in synsets},
    )


def named(lay, split, item):
    """Where an image lies, for messages: the archive and its member."""
    wnid_tar = f"{item.synset}.tar/" if split == "train" else ""
    return f"{lay.source[split]}, member {wnid_tar}{PurePosixPath(item.relpath).name}"


class Reader:
    """Each image's bytes by one pread of its archive at the index's "offset:size"."""

    def __init__(self, source):
        self.fds = {}
        for split, path in source.items():
            try:
                self.fds[split] = os.open(path, os.O_RDONLY)
            except OSError as exc:
                raise StageError(f"{path}: cannot read the archive the index was made from ({exc.strerror})") from None
        self.source = source

    def read(self, split, location, relpath):
        location, size = map(int, location.split(":"))
        data = os.pread(self.fds[split], size, location)
        if len(data) != size:
            raise StageError(
                f"{self.source[split]}: {relpath} at byte {location} reads {len(data)} of its {size} bytes: the "
                f"archive changed after indexing. Fix: snakemake --forcerun index_dataset"
            )
        return data

    def close(self):
        for fd in self.fds.values():
            os.close(fd)
