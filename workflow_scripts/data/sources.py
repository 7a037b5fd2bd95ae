"""Which of its forms dataset.root holds ILSVRC2012 in, and a reader of each image's bytes from it.

tree: train/ and val/ folders (layout.py, the bytes from tree.py); archives: image-net.org's three
archives (archives.py); parquet: Hugging Face's imagenet-1k shards (parquet.py). Every form gives
the same Layout (names, synsets, order), so the index and the converters do not tell them apart.
"""

import hashlib
import os
from pathlib import Path

from ..common.errors import StageError
from . import archives, layout, listing, parquet, tree


def archive_keys(dataset):
    """config dataset's archive keys (train_tar, val_tar, devkit) as given."""
    return {key: dataset.get(key, "") for key in archives.KEYS}


def form_of(root, keys=None):
    """("archives", their paths) | ("parquet", its shards) | ("tree", None)."""
    found = archives.paths(root, keys)
    if found:
        return "archives", found
    shards = parquet.shards(root)
    if shards:
        return "parquet", shards
    return "tree", None


def check(root, val_labels="", val_subset=False, keys=None):
    """The parse-time check of dataset.root (cheap: no member list is read): the form, and the files
    whose size and mtime stand for the dataset (each archive or shard, else the label files in use)."""
    form, found = form_of(root, keys)
    _no_label_file(form, root, val_labels)
    if form == "archives":
        return form, list(found.values())
    if form == "parquet":
        return form, [p for split in found.values() for p in split]
    label_file, agreeing = layout.check(root, val_labels, val_subset)
    return form, [f for f in (label_file, *agreeing) if f]


def fingerprint(root, form, files, cache_path=None):
    """What the index depends on, digested (a param of the index: plan/data_plan.py): a tree's folder
    names and label files (listing.py), or each archive's or shard's size and mtime."""
    if form == "tree":
        return listing.fingerprint(layout.image_root(root), files, cache_path)
    h = hashlib.sha256()
    for f in sorted(str(p) for p in files):
        st = os.stat(f)
        h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def _no_label_file(form, root, val_labels):
    """A val label file given for a form that carries its own labels would be ignored: refused."""
    if val_labels and form != "tree":
        own = "the devkit's ground truth" if form == "archives" else "the shards' label column"
        raise StageError(
            f"config dataset.val_labels = {val_labels}, but dataset.root {root} holds the {form} form, whose val "
            f"labels are {own}: the file would not be read. Fix: unset dataset.val_labels"
        )


def discover(root, val_labels="", val_subset=False, keys=None):
    form, found = form_of(root, keys)
    _no_label_file(form, root, val_labels)
    if form == "archives":
        return archives.discover(root, found, val_subset)
    if form == "parquet":
        return parquet.discover(root, found)
    return layout.discover(root, val_labels, val_subset)


def named(lay, split, item):
    """Where an image lies, for messages."""
    if lay.form == "archives":
        return archives.named(lay, split, item)
    if lay.form == "parquet":
        return parquet.named(lay, split, item)
    return str(Path(lay.root) / item.relpath)


def reader(form, root, source):
    """An object with read(split, location, relpath) -> bytes and close()."""
    if form == "archives":
        return archives.Reader(source)
    if form == "parquet":
        return parquet.Reader(source)
    return tree.Reader(root)
