"""Small datasets for the tests: the embedded generator's trees, through the index stage into a
format, and what a tree holds worked out from the tree itself."""

import hashlib
from pathlib import Path

from .processes import run_stage

# The quirky tree's sizes (conftest.quirky_tree).
QUIRKY = dict(classes=5, train_per_class=6, val_per_class=4)


def tree_hashes(path):
    path = Path(path)
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def embedded_lmdb(work, **sizes):
    """An embedded tree (embedded.make's `sizes`: classes, train_per_class, ...) in `work`, through
    the index stage into the Caffe2 LMDB (`work`/lmdb, its index beside it)."""
    from workflow_scripts.data import embedded

    embedded.make(work / "ILSVRC2012", **sizes)
    run_stage(
        "workflow",
        "workflow_scripts.data.index",
        "--root",
        work / "ILSVRC2012",
        "--out",
        work / "index",
        "--threads",
        "2",
    )
    run_stage(
        "pytorch",
        "workflow_scripts.data.lmdb_caffe2",
        "--index",
        work / "index",
        "--out",
        work / "lmdb",
        "--threads",
        "2",
    )
    return work / "lmdb"


def source_catalog(root):
    """{split: {file name: facts}} for every decodable image of the quirky tree, worked out from
    the tree itself (folders, label file, the generator's naming), not from the index stage."""
    from PIL import Image

    root = Path(root)
    synsets = sorted(p.name for p in (root / "train").iterdir())
    label = {w: i for i, w in enumerate(synsets)}
    val_labels = (root / "imagenet_2012_validation_synset_labels.txt").read_text().split()
    n_val = QUIRKY["classes"] * QUIRKY["val_per_class"]  # broken val files are numbered after these
    files = {
        "train": [(p, label[p.parent.name]) for p in (root / "train").rglob("*.JPEG") if "broken" not in p.name],
        "val": [
            (p, label[val_labels[n - 1]])
            for p in (root / "val").glob("*.JPEG")
            if (n := int(p.stem.rsplit("_", 1)[1])) <= n_val
        ],
    }
    out = {}
    for split, items in files.items():
        out[split] = {}
        for p, lab in items:
            im = Image.open(p)
            out[split][p.name] = {
                "label": lab,
                "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
                "rgb_jpeg": im.format == "JPEG" and im.mode == "RGB",
                "size": list(im.size),
            }
    return out
