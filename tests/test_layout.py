"""Reading the ILSVRC2012 raw layout: the three val layouts, class indices, clear errors."""

import pytest

from workflow_scripts.common.errors import StageError
from workflow_scripts.data import embedded, layout

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module", params=embedded.VAL_LAYOUTS)
def tree(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param) / "ILSVRC2012"
    embedded.make(root, classes=3, train_per_class=2, val_per_class=2, seed=1, val_layout=request.param, quirks=False)
    return root


def test_every_val_layout_gives_the_same_labels(tree):
    lay = layout.discover(tree)
    assert lay.synsets == sorted(lay.synsets) and len(lay.synsets) == 3
    assert len(lay.train) == 6 and len(lay.val) == 6
    # The generator numbers val images in a shuffled class order; the label of image n is the
    # class the generator drew it from, whatever the layout stores it as.
    truth = {}
    for n, (c, i) in enumerate(_generator_order(3, 2, 1), start=1):
        truth[f"ILSVRC2012_val_{n:08d}.JPEG"] = embedded.class_spec(c)[0]
    assert {it.relpath.rsplit("/", 1)[1]: it.synset for it in lay.val} == truth


def _generator_order(classes, per_class, seed):
    import numpy as np

    order = [(c, i) for i in range(per_class) for c in range(classes)]
    np.random.default_rng([seed, 1]).shuffle(order)
    return order


def test_flat_val_without_label_file_names_what_it_looked_for(tmp_path):
    root = tmp_path / "ds"
    embedded.make(root, classes=2, train_per_class=1, val_per_class=1, quirks=False)
    (root / "imagenet_2012_validation_synset_labels.txt").unlink()
    with pytest.raises(StageError, match="LOC_val_solution.csv or imagenet_2012_validation_synset_labels.txt"):
        layout.discover(root)


def test_explicit_label_file_and_missing_one(tmp_path):
    root = tmp_path / "ds"
    embedded.make(root, classes=2, train_per_class=1, val_per_class=1, quirks=False, val_layout="kaggle-csv")
    moved = tmp_path / "labels" / "LOC_val_solution.csv"
    moved.parent.mkdir()
    (root / "LOC_val_solution.csv").rename(moved)
    assert len(layout.discover(root, val_labels=str(moved)).val) == 2
    with pytest.raises(StageError, match="nope.csv.*dataset.val_labels"):
        layout.discover(root, val_labels=str(tmp_path / "nope.csv"))


def test_bad_root_and_missing_split(tmp_path):
    with pytest.raises(StageError, match="dataset.root"):
        layout.discover(tmp_path / "missing")
    (tmp_path / "train").mkdir()
    with pytest.raises(StageError, match="val is missing"):
        layout.discover(tmp_path)


def test_label_file_naming_an_unknown_synset(tmp_path):
    root = tmp_path / "ds"
    embedded.make(root, classes=2, train_per_class=1, val_per_class=1, quirks=False)
    f = root / "imagenet_2012_validation_synset_labels.txt"
    f.write_text(f.read_text().replace(embedded.class_spec(1)[0], "n99999999"))
    with pytest.raises(StageError, match="n99999999"):
        layout.discover(root)


def test_garbage_label_file(tmp_path):
    root = tmp_path / "ds"
    embedded.make(root, classes=2, train_per_class=1, val_per_class=1, quirks=False)
    (root / "imagenet_2012_validation_synset_labels.txt").write_text("cat\ndog\n")
    with pytest.raises(StageError, match="first bad line 'cat'"):
        layout.discover(root)


def test_the_devkits_own_val_ground_truth_is_read_through_its_meta_mat(tmp_path):
    """ILSVRC2012_validation_ground_truth.txt holds ILSVRC2012_IDs, whose order is not the sorted
    synsets': the devkit's meta.mat maps them (here made with shuffled ids, so no order can pass)."""
    savemat = pytest.importorskip("scipy.io").savemat
    root = tmp_path / "ILSVRC2012"
    embedded.make(root, classes=3, train_per_class=2, val_per_class=2, seed=1, val_layout="synset-list", quirks=False)
    tf_file = next(p for p in (root, root / "val", root.parent) if (p / layout.LABEL_FILE_NAMES[1]).is_file())
    tf_labels = (tf_file / layout.LABEL_FILE_NAMES[1]).read_text().split()
    (tf_file / layout.LABEL_FILE_NAMES[1]).unlink()
    wnids = sorted(set(tf_labels))
    ids = {w: i for w, i in zip(wnids, (3, 1, 2))}
    devkit = tmp_path / "ILSVRC2012_devkit_t12" / "data"
    devkit.mkdir(parents=True)
    synsets = [{"ILSVRC2012_ID": i, "WNID": w, "words": "x"} for w, i in ids.items()]
    savemat(devkit / "meta.mat", {"synsets": synsets})
    truth = devkit / "ILSVRC2012_validation_ground_truth.txt"
    truth.write_text("".join(f"{ids[w]}\n" for w in tf_labels))
    lay = layout.discover(root, str(truth))
    assert [it.synset for it in sorted(lay.val, key=lambda it: it.relpath)] == tf_labels
    (devkit / "meta.mat").unlink()
    with pytest.raises(StageError, match="meta.mat"):
        layout.discover(root, str(truth))


def _flat_tree(tmp_path, val_per_class=2):
    root = tmp_path / "ILSVRC2012"
    embedded.make(
        root, classes=3, train_per_class=1, val_per_class=val_per_class, seed=1, val_layout="synset-list", quirks=False
    )
    label = next(
        p / layout.LABEL_FILE_NAMES[1]
        for p in (root, root / "val", root.parent)
        if (p / layout.LABEL_FILE_NAMES[1]).is_file()
    )
    return root, label


def test_a_duplicated_label_line_stops_before_conversion_naming_the_file(tmp_path):
    """One line too many shifts every val label after it: all images present, all labelled, and 7 of
    12 wrong before this check."""
    root, label = _flat_tree(tmp_path, val_per_class=4)
    lines = label.read_text().splitlines()
    label.write_text("\n".join(lines[:3] + [lines[3]] + lines[3:]) + "\n")
    with pytest.raises(StageError) as e:
        layout.check(root)
    said = str(e.value)
    assert str(label) in said and "13 label lines" in said and "up to 12" in said and "Fix:" in said


def test_a_missing_label_line_with_a_val_subset_stops(tmp_path):
    root, label = _flat_tree(tmp_path, val_per_class=4)
    lines = label.read_text().splitlines()
    label.write_text("\n".join(lines[:2] + lines[3:]) + "\n")  # line 3 lost
    for p in sorted((root / "val").iterdir())[6:]:  # a subset: the first 6 images
        p.unlink()
    with pytest.raises(StageError, match="11 label lines for validation images numbered up to 6"):
        layout.check(root)


def test_a_name_labelled_twice_or_naming_no_image_stops(tmp_path):
    root, label = _flat_tree(tmp_path)
    wnids = label.read_text().split()
    label.unlink()
    rows = [f"ILSVRC2012_val_{n:08d},{w} 1 2 3 4" for n, w in enumerate(wnids, start=1)]
    csv = root / "LOC_val_solution.csv"
    csv.write_text("ImageId,PredictionString\n" + "\n".join(rows + [rows[0]]) + "\n")
    with pytest.raises(StageError, match=r"line 8: ILSVRC2012_val_00000001 is labelled a second time"):
        layout.check(root)
    csv.write_text("ImageId,PredictionString\n" + "\n".join(rows + ["ILSVRC2012_val_00000099,n00000001 1 2 3 4"]))
    with pytest.raises(StageError, match="1 entries name no image in the val folder.*ILSVRC2012_val_00000099"):
        layout.check(root)
    csv.write_text("ImageId,PredictionString\n" + "\n".join(rows) + "\n")
    assert layout.check(root)[0] == csv
