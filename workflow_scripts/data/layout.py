"""Read the ILSVRC2012 raw layout: which files exist, and which synset each belongs to.

train/<wnid>/<wnid>_<n>.JPEG, and val/ as either synset folders or flat ILSVRC2012_val_*.JPEG
files labelled by Kaggle's LOC_val_solution.csv, by one synset per line in image order
(TensorFlow's imagenet_2012_validation_synset_labels.txt), or by the devkit's own ground truth
(ILSVRC2012_validation_ground_truth.txt: one ILSVRC2012_ID per line, mapped to synsets by the
devkit's data/meta.mat beside it). Class index = position of the wnid in the sorted list of train
synsets. Kaggle's tree may be given at its top folder: its images are in ILSVRC/Data/CLS-LOC/, its
label files beside ILSVRC/.
"""

import csv
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..common.errors import StageError

IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png"}
VAL_NAME = re.compile(r"^ILSVRC2012_val_(\d{8})$")
# Where a flat val/ folder's labels are looked for, in this order, when config names none.
LABEL_FILE_NAMES = (
    "LOC_val_solution.csv",
    "imagenet_2012_validation_synset_labels.txt",
    "ILSVRC2012_validation_ground_truth.txt",
)
DEVKIT_META = "meta.mat"  # the devkit's synsets (ILSVRC2012_ID -> WNID), beside its ground truth
# Kaggle's ImageNet (imagenet-object-localization-challenge): the images this far below its top
# folder, which holds LOC_val_solution.csv and LOC_synset_mapping.txt
KAGGLE_IMAGES = ("ILSVRC", "Data", "CLS-LOC")
# Beside a positional label file that one of this project's generators cut to its own val set
# (data/embedded.py, benchmarks/imagenet_like.py): the file's sha256, so that the file, and only as
# written, stands for its tree without config dataset.val_subset
GENERATED = "dlscale_generated.json"


@dataclass(frozen=True)
class Item:
    relpath: str  # relative to the dataset root, '/'-separated
    synset: str
    # where an archive or parquet form holds the bytes (data/archives.py, data/parquet.py); "" in a tree
    location: str = ""


@dataclass(frozen=True)
class Layout:
    root: Path
    synsets: list  # sorted train wnids; index = class label
    train: list  # of Item
    val: list  # of Item
    val_source: str  # how val labels were found, for the manifest
    form: str = "tree"  # tree | archives | parquet: which module reads the bytes (data/sources.py)
    source: dict = field(default_factory=dict)  # what that module needs beyond the root
    words: dict = field(default_factory=dict)  # class texts the source itself carries (meta.mat, HF's names)


def _images_in(folder):
    """The images of a folder; a symbolic link whose target is gone is kept, so that the index
    lists it among its rejects rather than drop it without a word."""
    return sorted(p for p in folder.iterdir() if (p.is_file() or p.is_symlink()) and p.suffix.lower() in IMAGE_SUFFIXES)


def image_root(root):
    """The folder holding train/ and val/: `root`, or its ILSVRC/Data/CLS-LOC where `root` is the
    top folder of Kaggle's tree."""
    root = Path(root)
    kaggle = root.joinpath(*KAGGLE_IMAGES)
    if not (root / "train").is_dir() and (kaggle / "train").is_dir():
        return kaggle
    return root


def label_folders(images):
    """Where label files are looked for: the image root, its val/, its parent and, in Kaggle's
    tree, its top folder (three levels up, beside ILSVRC/)."""
    images = Path(images)
    folders = [images, images / "val", images.parent]
    if images.parts[-len(KAGGLE_IMAGES) :] == KAGGLE_IMAGES:
        folders.append(images.parents[len(KAGGLE_IMAGES) - 1])
    return folders


def check(root, val_labels="", val_subset=False):
    """The cheap part of discover(): the layout is there and val labels can be found.
    Returns the val label file (None for synset folders) and the other label files found that
    agree with it. Run at workflow parse time. val_subset: config dataset.val_subset."""
    given = Path(root)
    if not given.is_dir():
        raise StageError(f"dataset root {given} (config dataset.root) is not a directory")
    root = image_root(given)
    for d in (root / "train", root / "val"):
        if not d.is_dir():
            raise StageError(
                f"{d} is missing: expected the ILSVRC2012 layout train/<wnid>/ and val/ in {given} (config "
                f"dataset.root), or Kaggle's {'/'.join(KAGGLE_IMAGES)}/train and val below it"
            )
    val_dir = root / "val"
    has_dirs = has_files = False
    with os.scandir(val_dir) as it:
        for entry in it:
            has_dirs |= entry.is_dir()
            has_files |= entry.is_file() and Path(entry.name).suffix.lower() in IMAGE_SUFFIXES
    if has_dirs and has_files:
        raise StageError(f"{val_dir} mixes synset folders and loose images; use one layout")
    if not has_dirs and not has_files:
        raise StageError(f"{val_dir} holds no images")
    if not has_dirs:
        found = _find_label_file(root, val_dir, val_labels)
        check_labels_whole(found[0], _read_label_file(found[0]), _val_numbers(val_dir), val_subset)
        return found
    return None, []


FULL_VAL = 50_000  # ILSVRC2012's validation images: a label file of the full set has one entry each


def _val_numbers(val_dir):
    with os.scandir(val_dir) as it:
        return sorted(
            int(m.group(1)) for e in it if e.is_file() and (m := VAL_NAME.match(Path(e.name).stem)) is not None
        )


def _positional(path):
    """Whether the file labels images by line position (TensorFlow's, the devkit's), not by name."""
    with open(path, errors="replace") as f:
        return not f.readline().startswith("ImageId,")


def record_generated(label_file, generator):
    """Called by a generator of ours that wrote `label_file` (positional) for its own val set."""
    label_file = Path(label_file)
    record = {"generator": generator, "label_files": {label_file.name: _sha256(label_file)}}
    (label_file.parent / GENERATED).write_text(json.dumps(record, indent=1) + "\n")


def _sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _generated_for_its_tree(path):
    """Whether `path` is a label file one of our generators cut to its own val set, unchanged since."""
    try:
        written = json.loads((Path(path).parent / GENERATED).read_text())["label_files"]
        return written.get(Path(path).name) == _sha256(path)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def check_labels_whole(path, labels, numbers, val_subset=False, positional=None):
    """The whole label file against the images, before anything is converted. One labelled by
    position (TensorFlow's, the devkit's) must have the full set's 50,000 lines, since one line
    added or lost shifts every label after it and a val folder missing its last images hides it;
    fewer only where config dataset.val_subset says the folder is a subset and the file was cut to
    it (then one line per image up to the highest number), or where one of our generators wrote
    the file for its own tree. One labelled by name must have no entry without an image unless it
    is the full set's."""
    if not numbers:
        return
    have, top = len(labels), max(numbers)
    if _positional(path) if positional is None else positional:
        if have == FULL_VAL:
            return
        if val_subset or _generated_for_its_tree(path):
            if have != top:
                raise StageError(_shifted(path, have, top))
            return
        raise StageError(_not_the_full_set(path, have, numbers))
    if have not in (len(numbers), FULL_VAL):
        spare = sorted(set(labels) - set(numbers))
        if spare:
            raise StageError(
                f"{path}: {len(spare):,} entries name no image in the val folder ({have:,} entries, "
                f"{len(numbers):,} images), first ILSVRC2012_val_{spare[0]:08d}. {LABEL_FIX}"
            )


LABEL_FIX = (
    "Fix: restore the file from its source (the full set's has one entry per image, 50,000), or set "
    "config dataset.val_labels to another label source (Kaggle's LOC_val_solution.csv names each image)"
)


def _shifted(path, have, top):
    return (
        f"{path}: {have:,} label lines for validation images numbered up to {top:,} (config dataset.val_subset: "
        f"a file cut to the subset has one line per image up to the highest number): a line added or lost "
        f"shifts every label after it, so every image's label is in doubt; the first line without its image "
        f"(or image without its line): {min(have, top) + 1:,}. {LABEL_FIX}"
    )


def _not_the_full_set(path, have, numbers):
    return (
        f"{path}: {have:,} label lines, where a file that labels validation images by line position has the "
        f"full set's {FULL_VAL:,}: a line lost or added shifts every label after it, and a val folder without "
        f"its last images ({len(numbers):,} here, numbered up to {max(numbers):,}) would hide that, so no "
        f"shorter file is taken as it is. Fix: restore the file from its source; where the val folder is a "
        f"subset of ILSVRC2012's and the file was cut to it (one line per image up to the highest number), set "
        f"config dataset.val_subset: true; or set config dataset.val_labels to Kaggle's LOC_val_solution.csv, "
        f"which names each image"
    )


def discover(root, val_labels="", val_subset=False):
    label_file, agreeing = check(root, val_labels, val_subset)
    root = image_root(root)
    train_dir = root / "train"
    synsets = sorted(p.name for p in train_dir.iterdir() if p.is_dir())
    if not synsets:
        raise StageError(f"{train_dir} holds no synset folders (train/<wnid>/<wnid>_<n>.JPEG)")
    train = [Item(p.relative_to(root).as_posix(), wnid) for wnid in synsets for p in _images_in(train_dir / wnid)]
    if not train:
        raise StageError(f"{train_dir} holds synset folders but no .JPEG files")
    val, source = _val_items(root, root / "val", label_file)
    words = {}
    if label_file is not None and (label_file.parent / DEVKIT_META).is_file() and _holds_ids(label_file):
        words = devkit_meta(label_file.parent / DEVKIT_META)[1]
    if agreeing:
        source += f" (also found, and in agreement: {', '.join(map(str, agreeing))})"
    unknown = sorted({it.synset for it in val} - set(synsets))
    if unknown:
        raise StageError(
            f"validation labels name synsets with no train folder: "
            f"{', '.join(unknown[:10])}{' ...' if len(unknown) > 10 else ''} ({source})"
        )
    return Layout(root, synsets, train, val, source, words=words)


def _val_items(root, val_dir, label_file):
    if label_file is None:
        items = [
            Item(p.relative_to(root).as_posix(), d.name)
            for d in sorted(p for p in val_dir.iterdir() if p.is_dir())
            for p in _images_in(d)
        ]
        return items, "val/<wnid>/ folders"
    labels = _read_label_file(label_file)
    items = []
    for p in _images_in(val_dir):
        m = VAL_NAME.match(p.stem)
        if not m:
            raise StageError(f"{p}: flat val/ files must be named ILSVRC2012_val_%08d.JPEG")
        wnid = labels.get(int(m.group(1)))
        if wnid is None:
            raise StageError(f"{p.name} has no label in {label_file}")
        items.append(Item(p.relative_to(root).as_posix(), wnid))
    return items, f"labels from {label_file}"


def _find_label_file(root, val_dir, val_labels):
    """The val label file: config's, else the one found. Where several are found they must give
    every image the same synset, or the run stops naming them (which one is right is the
    user's call: dataset.val_labels)."""
    if val_labels:
        path = Path(val_labels)
        if not path.is_file():
            raise StageError(f"validation label file {path} (config dataset.val_labels) does not exist")
        return path, []
    folders = label_folders(root)
    found = [folder / name for folder in folders for name in LABEL_FILE_NAMES if (folder / name).is_file()]
    if not found:
        raise StageError(
            f"{val_dir} holds flat ILSVRC2012_val_*.JPEG files but no label file was found: looked for "
            f"{' or '.join(LABEL_FILE_NAMES)} in {', '.join(map(str, folders))}; "
            f"set config dataset.val_labels to its path"
        )
    first = _read_label_file(found[0])
    for other in found[1:]:
        labels = _read_label_file(other)
        differ = sorted(n for n in first.keys() | labels.keys() if first.get(n) != labels.get(n))
        if differ:
            n = differ[0]
            raise StageError(
                f"two validation label files disagree on {len(differ)} image(s), e.g. ILSVRC2012_val_{n:08d}: "
                f"{first.get(n, 'no label')} in {found[0]}, {labels.get(n, 'no label')} in {other}; set config "
                f"dataset.val_labels to the one to use"
            )
    return found[0], found[1:]


def _read_label_file(path):
    """Kaggle's CSV maps image id -> 'wnid x y x y ...'; TF's text file is one wnid per line,
    line i for image i (1-based). Returns {image number: wnid}."""
    text = Path(path).read_text()
    if text.startswith("ImageId,"):
        labels = {}
        for line, row in enumerate(csv.DictReader(text.splitlines()), start=2):
            m = VAL_NAME.match(row.get("ImageId") or "")
            pred = (row.get("PredictionString") or "").split()
            if not m or not pred:
                raise StageError(f"{path}: cannot read row {row!r} (ImageId,PredictionString)")
            if int(m.group(1)) in labels:
                raise StageError(
                    f"{path}, line {line}: {row['ImageId']} is labelled a second time. Fix: restore the file, "
                    f"or set config dataset.val_labels to another label source"
                )
            labels[int(m.group(1))] = pred[0]
        return labels
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if lines and all(ln.isdigit() for ln in lines[:50]):
        return _read_devkit_ground_truth(Path(path), lines)
    bad = [ln for ln in lines[:50] if not re.fullmatch(r"n\d{8}", ln)]
    if not lines or bad:
        first = f": first bad line {bad[0]!r}" if bad else ""
        raise StageError(
            f"{path} is neither Kaggle's LOC_val_solution.csv, one synset (nXXXXXXXX) per line, nor the "
            f"devkit's ILSVRC2012_validation_ground_truth.txt (one ILSVRC2012_ID per line){first}"
        )
    return {i + 1: wnid for i, wnid in enumerate(lines)}


def devkit_meta(meta, name=None):
    """The devkit's meta.mat (a path or an open file; `name` for messages) -> ({ILSVRC2012_ID: WNID},
    {WNID: words}) from its 'synsets' struct array."""
    from scipy.io import loadmat  # only a devkit needs it

    try:
        synsets = loadmat(meta, squeeze_me=True, struct_as_record=False)["synsets"]
        ids = {int(s.ILSVRC2012_ID): str(s.WNID) for s in synsets}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, NotImplementedError) as exc:
        raise StageError(f"{name or meta}: cannot read the devkit's synsets (ILSVRC2012_ID, WNID): {exc}") from None
    return ids, {str(s.WNID): str(getattr(s, "words", "") or s.WNID) for s in synsets}


def devkit_synsets(meta):
    """The devkit's meta.mat -> {ILSVRC2012_ID: WNID}."""
    return devkit_meta(meta)[0]


def _holds_ids(path):
    """Whether a label file is the devkit's ground truth (ILSVRC2012_IDs, not synsets)."""
    with open(path, errors="replace") as f:
        return f.readline().strip().isdigit()


def _read_devkit_ground_truth(path, lines):
    """The devkit's ground truth: line i is image i's ILSVRC2012_ID, a synset by the devkit's
    meta.mat (data/ of the devkit, beside the file)."""
    meta = path.parent / DEVKIT_META
    if not meta.is_file():
        raise StageError(
            f"{path} holds ILSVRC2012_IDs (the devkit's ground truth), which name synsets only through the "
            f"devkit's {DEVKIT_META}: put it beside the file ({meta}), as the devkit's data/ folder has it"
        )
    return devkit_labels(path, lines, devkit_synsets(meta), meta)


def devkit_labels(path, lines, ids, meta):
    """{image number: WNID} of the ground truth's `lines` (ILSVRC2012_IDs), through meta.mat's `ids`."""
    labels = {}
    for n, ln in enumerate(lines, start=1):
        if not ln.isdigit() or int(ln) not in ids:
            raise StageError(f"{path}, line {n}: {ln!r} is not an ILSVRC2012_ID of {meta}")
        labels[n] = ids[int(ln)]
    return labels
