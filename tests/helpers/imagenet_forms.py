"""ILSVRC2012's other forms made from a small tree, as image-net.org and Hugging Face lay them out:
the train tar of per-synset tars, the val tar and the devkit (meta.mat, validation ground truth);
imagenet-1k's parquet shards. And the tree a user gets by extracting the archives."""

import io
import random
import tarfile
from pathlib import Path

DEVKIT_DATA = "ILSVRC2012_devkit_t12/data"


def _add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 1_330_000_000, 0o644
    tar.addfile(info, io.BytesIO(data))


def _tar_bytes(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members:
            _add(tar, name, data)
    return buf.getvalue()


def _meta_mat(wnids, ids):
    from scipy.io import savemat

    buf = io.BytesIO()
    synsets = [{"ILSVRC2012_ID": ids[w], "WNID": w, "words": f"words of {w}"} for w in wnids]
    savemat(buf, {"synsets": synsets})
    return buf.getvalue()


def make_archives(tree, out, damage=None):
    """The three archives of the embedded `tree` (synset-list val labels) in `out`. Members are added
    in shuffled order (the index must sort, as a tree's layout does), and ILSVRC2012_IDs are not the
    sorted order (so only meta.mat maps them). damage: "truncated" cuts the second synset's tar in
    the middle of its last image; "undecodable" replaces that image's bytes with text."""
    tree, out = Path(tree), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(5)
    wnids = sorted(p.name for p in (tree / "train").iterdir())
    inner = []
    for k, wnid in enumerate(wnids):
        images = sorted((tree / "train" / wnid).iterdir())
        members = [(p.name, p.read_bytes()) for p in images]
        if damage == "undecodable" and k == 1:
            members[-1] = (members[-1][0], b"<html>503 Service Unavailable</html>\n")
        rng.shuffle(members)
        data = _tar_bytes(members)
        if damage == "truncated" and k == 1:
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                last = max(tar.getmembers(), key=lambda m: m.offset_data)
            data = data[: last.offset_data + last.size // 2]
        inner.append((f"{wnid}.tar", data))
    rng.shuffle(inner)
    (out / "ILSVRC2012_img_train.tar").write_bytes(_tar_bytes(inner))
    val = [(p.name, p.read_bytes()) for p in sorted((tree / "val").glob("*.JPEG"))]
    rng.shuffle(val)
    (out / "ILSVRC2012_img_val.tar").write_bytes(_tar_bytes(val))
    ids = dict(zip(wnids, rng.sample(range(1, len(wnids) + 1), len(wnids))))
    truth = "".join(f"{ids[w]}\n" for w in (tree / "imagenet_2012_validation_synset_labels.txt").read_text().split())
    with tarfile.open(out / "ILSVRC2012_devkit_t12.tar.gz", "w:gz") as tar:
        _add(tar, f"{DEVKIT_DATA}/meta.mat", _meta_mat(wnids, ids))
        _add(tar, f"{DEVKIT_DATA}/ILSVRC2012_validation_ground_truth.txt", truth.encode())
    return out


def extract(archives, out):
    """The tree image-net.org's instructions make of the archives: train/<wnid>/ from each inner tar,
    a flat val/, the devkit beside them. Returns (root, the devkit's ground truth)."""
    archives, out = Path(archives), Path(out)
    with tarfile.open(archives / "ILSVRC2012_img_train.tar") as outer:
        for m in outer.getmembers():
            with tarfile.open(fileobj=outer.extractfile(m)) as inner:
                inner.extractall(out / "train" / m.name.removesuffix(".tar"), filter="data")
    with tarfile.open(archives / "ILSVRC2012_img_val.tar") as tar:
        tar.extractall(out / "val", filter="data")
    with tarfile.open(archives / "ILSVRC2012_devkit_t12.tar.gz") as tar:
        tar.extractall(out, filter="data")
    return out, out / DEVKIT_DATA / "ILSVRC2012_validation_ground_truth.txt"


def make_parquet(tree, out, rows_per_group=4, shards=2, mislabel=None):
    """imagenet-1k's parquet shards of the embedded `tree` in `out`: train-*-of-*.parquet and
    validation-*.parquet, columns image {bytes, path} and label (the sorted WNIDs' positions), the
    class names in the schema's huggingface metadata, rows in shuffled order. mislabel: a shard number whose labels are
    shifted by one class."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    tree, out = Path(tree), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    wnids = sorted(p.name for p in (tree / "train").iterdir())
    label = {w: i for i, w in enumerate(wnids)}
    train = [(p, label[p.parent.name]) for p in sorted((tree / "train").rglob("*.JPEG"))]
    random.Random(6).shuffle(train)
    val_wnids = (tree / "imagenet_2012_validation_synset_labels.txt").read_text().split()
    val = [(p, label[val_wnids[int(p.stem[-8:]) - 1]]) for p in sorted((tree / "val").glob("*.JPEG"))]
    # the class names as the tree's own LOC_synset_mapping.txt has them, so the copies can be compared whole
    words = dict(ln.split(None, 1) for ln in (tree / "LOC_synset_mapping.txt").read_text().splitlines())
    label_feature = {"names": [words[w].strip() for w in wnids], "_type": "ClassLabel"}
    meta = json.dumps({"info": {"features": {"image": {"_type": "Image"}, "label": label_feature}}})
    for split, items in (("train", train), ("validation", val)):
        n = shards if split == "train" else 1
        for s in range(n):
            part = items[s::n]
            labels = [(lab + 1) % len(wnids) if mislabel == s and split == "train" else lab for _, lab in part]
            table = pa.table(
                {
                    # imagenet-1k's paths: the ILSVRC2012 name with the image's synset added
                    "image": pa.array(
                        [{"bytes": p.read_bytes(), "path": f"{p.stem}_{wnids[lab]}.JPEG"} for p, lab in part]
                    ),
                    "label": pa.array(labels, pa.int64()),
                }
            ).replace_schema_metadata({"huggingface": meta})
            pq.write_table(table, out / f"{split}-{s:05d}-of-{n:05d}.parquet", row_group_size=rows_per_group)
    return out


# The three converters as the rules run them (rules/data.smk), on a small index: its shards few
CONVERTERS = (
    ("tensorflow", "tfrecord", ["--train-shards", "3", "--val-shards", "2"]),
    ("mxnet", "recordio", []),
    ("pytorch", "lmdb_caffe2", []),
)


def convert_all(index, out):
    """Each converter of `index` into out/<module>, through its framework's interpreter."""
    from . import run_stage  # the package's, which imports this module's siblings

    for env, module, extra in CONVERTERS:
        run_stage(
            env, f"workflow_scripts.data.{module}", "--index", index, "--out", out / module, "--threads", "2", *extra
        )
