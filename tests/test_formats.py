"""Every image and label of a tree with ImageNet's quirks arrives in each format, read back
with the framework's own reader."""

import pytest
from helpers import CONFIG, QUIRKY, run_script, source_catalog

pytestmark = pytest.mark.stage


def _check_stored(entry, src):
    """Pass-through images keep their bytes; CMYK / PNG / grayscale ones were re-encoded."""
    if src["rgb_jpeg"]:
        assert entry["sha256"] == src["sha256"]
    else:
        assert entry["sha256"] != src["sha256"]


def test_tfrecord_read_by_tf_data(quirky_tree, quirky_converted):
    src = source_catalog(quirky_tree)
    got = run_script("tensorflow", "read_tfrecord.py", quirky_converted / "tfrecord")
    assert got["train_shards"] == 3 and got["val_shards"] == 2
    assert got["train_index_ok"] and got["val_index_ok"], "DALI index does not match the shards"
    for split in ("train", "val"):
        assert set(got[split]) == set(src[split])
        for name, rec in got[split].items():
            s = src[split][name]
            assert rec["label"] == s["label"], name
            assert rec["format"] == "JPEG" and rec["shape"][2] == 3, name
            assert rec["hw"] == [rec["shape"][0], rec["shape"][1]] == [s["size"][1], s["size"][0]], name
            _check_stored(rec, s)
    assert sum(not s["rgb_jpeg"] for s in src["train"].values()) == 4  # the tree really has quirks


def test_recordio_read_by_mxnet(quirky_tree, quirky_converted):
    src = source_catalog(quirky_tree)
    got = run_script("mxnet", "read_recordio.py", quirky_converted / "recordio")
    for split in ("train", "val"):
        items = got[split]
        assert [i["key"] for i in items] == [i["id"] for i in items] == list(range(len(src[split])))
        by_hash = {s["sha256"]: s for s in src[split].values()}
        passthrough = [i for i in items if i["sha256"] in by_hash]
        assert len(passthrough) == sum(s["rgb_jpeg"] for s in src[split].values())
        for i in passthrough:
            assert i["label"] == by_hash[i["sha256"]]["label"]
        assert all(i["shape"][2] == 3 for i in items)
        assert sorted(int(i["label"]) for i in items) == sorted(s["label"] for s in src[split].values())
    assert sorted(got["val_iter_labels"]) == sorted(s["label"] for s in src["val"].values())


def test_lmdb_read_by_pytorch_dataset(quirky_tree, quirky_converted):
    src = source_catalog(quirky_tree)
    got = run_script("pytorch", "read_lmdb.py", quirky_converted / "lmdb")
    for split in ("train", "val"):
        items = got[split]
        assert len(items) == len(src[split])
        by_hash = {s["sha256"]: s for s in src[split].values()}
        for i in items:
            assert i["mode"] == "RGB" and i["label"] == i["loader_label"]
            if i["sha256"] in by_hash:
                assert i["label"] == by_hash[i["sha256"]]["label"]
                assert i["size"] == by_hash[i["sha256"]]["size"]
        assert sum(i["sha256"] in by_hash for i in items) == sum(s["rgb_jpeg"] for s in src[split].values())
        assert sorted(i["label"] for i in items) == sorted(s["label"] for s in src[split].values())


def test_formats_hold_the_same_order(quirky_converted):
    """The train order is shuffled once, so record i is the same image in every format."""
    tf_ = run_script("tensorflow", "read_tfrecord.py", quirky_converted / "tfrecord")
    lm = run_script("pytorch", "read_lmdb.py", quirky_converted / "lmdb")
    mx = run_script("mxnet", "read_recordio.py", quirky_converted / "recordio")
    lmdb_order = [i["sha256"] for i in lm["train"]]
    assert [i["sha256"] for i in mx["train"]] == lmdb_order
    assert set(r["sha256"] for r in tf_["train"].values()) == set(lmdb_order)


def test_dali_reads_all_three_formats(quirky_tree, quirky_converted):
    """NVIDIA DALI's tfrecord (with our index files), mxnet and caffe2 readers, on the CPU."""
    src = source_catalog(quirky_tree)
    got = run_script("pytorch", "read_dali.py", quirky_converted)
    lm = run_script("pytorch", "read_lmdb.py", quirky_converted / "lmdb")
    for split in ("train", "val"):
        index_order = [i["label"] for i in lm[split]]
        assert sorted(index_order) == sorted(s["label"] for s in src[split].values())
        for fmt in ("tfrecord", "mxnet", "caffe2"):
            assert got[fmt][split]["labels"] == index_order, (fmt, split)
            assert all(shape[2] == 3 for shape in got[fmt][split]["shapes"]), (fmt, split)


def test_tfrecord_labels_follow_tf_builder_by_default_and_trainer_recovers_classes(quirky_tree, quirky_converted):
    """TensorFlow's ImageNet builder stores classes as 1..N (0 = background), and the readers
    written for it subtract 1: so does the data stage by default (the converter's own default and
    config.yaml's), and the TensorFlow trainer's input pipelines give back 0..N-1."""
    assert CONFIG["conversion"]["tfrecord"]["label_offset"] == 1
    src = source_catalog(quirky_tree)
    classes = QUIRKY["classes"]
    got = run_script("tensorflow", "read_tfrecord.py", quirky_converted / "tfrecord")
    for split in ("train", "val"):
        stored = {name: rec["stored_label"] for name, rec in got[split].items()}
        assert set(stored.values()) == set(range(1, classes + 1)), split
        assert all(stored[name] == s["label"] + 1 for name, s in src[split].items()), split
    first = sorted(p.name for p in (quirky_tree / "train").iterdir())[0]
    assert {
        got["train"][p.name]["stored_label"]
        for p in (quirky_tree / "train" / first).glob("*.JPEG")
        if p.name in got["train"]
    } == {1}

    trainer = run_script("tensorflow", "tf_trainer_labels.py", quirky_converted / "tfrecord")
    assert trainer["offset"] == 1
    assert sorted(trainer["train"]) == sorted(s["label"] for s in src["train"].values())
    # Validation in record order (the shards in order), as the long test scores it.
    assert trainer["val"] == [rec["stored_label"] - 1 for rec in got["val"].values()]
