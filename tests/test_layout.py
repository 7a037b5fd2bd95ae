"""Reading the ILSVRC2012 raw layout: the three val layouts, class indices, clear errors."""

import json

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
        layout.discover(root, val_subset=True)  # edited: no longer the generator's list for its own set


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
    lay = layout.discover(root, str(truth), val_subset=True)  # a ground truth cut to these 6 images
    assert [it.synset for it in sorted(lay.val, key=lambda it: it.relpath)] == tf_labels
    (devkit / "meta.mat").unlink()
    with pytest.raises(StageError, match="meta.mat"):
        layout.discover(root, str(truth), val_subset=True)


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
        layout.check(root, val_subset=True)


def _truth(root):
    """{val image number: the synset the generator drew it from} of a _flat_tree (3 classes)."""
    order = _generator_order(3, len(list((root / "val").iterdir())) // 3, 1)
    return {n: embedded.class_spec(c)[0] for n, (c, _) in enumerate(order, start=1)}


def test_a_positional_file_a_line_short_beside_a_val_folder_a_file_short_stops(tmp_path):
    """Issue 61, item 13: line 4 of TensorFlow's list lost and the last val image removed. The line
    count then equals the highest image number, so a count against the images cannot see it; read
    as it is, 4 of the 11 images would take another synset (their neighbour's). A positional file shorter than
    the full set's 50,000 lines is refused unless config dataset.val_subset says it was cut."""
    root, label = _flat_tree(tmp_path, val_per_class=4)
    truth = _truth(root)
    lines = label.read_text().splitlines()
    label.write_text("\n".join(lines[:3] + lines[4:]) + "\n")
    sorted((root / "val").iterdir())[-1].unlink()
    shifted = [n for n, w in enumerate(label.read_text().split(), start=1) if truth[n] != w]
    assert len(shifted) == 4, shifted  # what a silent pass would have converted
    with pytest.raises(StageError) as e:
        layout.check(root)
    said = str(e.value)
    assert str(label) in said and "11 label lines" in said and "50,000" in said, said
    assert "dataset.val_subset: true" in said and "LOC_val_solution.csv" in said and "Fix:" in said, said


def test_a_val_subset_with_its_cut_file_is_read_where_the_config_says_so(tmp_path):
    """A user's subset: val images 1..6 of 12 and the list cut to their 6 lines, no generator's
    record beside it (a user's own cut). Refused without the key, read with it, every label right."""
    root, label = _flat_tree(tmp_path, val_per_class=4)
    truth = _truth(root)
    (root / layout.GENERATED).unlink()
    label.write_text("\n".join(label.read_text().splitlines()[:6]) + "\n")
    for p in sorted((root / "val").iterdir())[6:]:
        p.unlink()
    with pytest.raises(StageError, match="6 label lines, where a file that labels"):
        layout.check(root)
    lay = layout.discover(root, val_subset=True)
    assert {int(it.relpath[-13:-5]): it.synset for it in lay.val} == {n: truth[n] for n in range(1, 7)}


def test_the_generators_list_stands_for_its_own_small_val_set_only_as_written(tmp_path):
    """The embedded default's val set is 320 images, its list 320 lines: the generator says so beside
    it (a sha256 of the list), so the default needs no key. An edited list is judged as a user's."""
    root, label = _flat_tree(tmp_path, val_per_class=4)
    assert layout.check(root)[0] == label and len(layout.discover(root).val) == 12
    label.write_text(label.read_text().replace(label.read_text().split()[0], label.read_text().split()[1], 1))
    with pytest.raises(StageError, match="12 label lines, where"):
        layout.check(root)


def _kaggle_tree(tmp_path):
    """Kaggle's imagenet-object-localization-challenge as it unpacks: the images in
    ILSVRC/Data/CLS-LOC/{train,val,test}, LOC_val_solution.csv and LOC_synset_mapping.txt beside ILSVRC/."""
    top = tmp_path / "imagenet-object-localization-challenge"
    images = top.joinpath(*layout.KAGGLE_IMAGES)
    embedded.make(images, classes=3, train_per_class=1, val_per_class=2, seed=1, val_layout="kaggle-csv", quirks=False)
    for name in ("LOC_val_solution.csv", "LOC_synset_mapping.txt"):
        (images / name).rename(top / name)
    (images / "test").mkdir()
    (images / "test" / "ILSVRC2012_test_00000001.JPEG").write_bytes((images / "val").iterdir().__next__().read_bytes())
    return top, images


def test_kaggles_tree_is_read_at_its_top_folder_and_at_its_image_folder(tmp_path):
    top, images = _kaggle_tree(tmp_path)
    truth = {f"ILSVRC2012_val_{n:08d}.JPEG": w for n, w in _truth(images).items()}
    for root in (top, images):
        lay = layout.discover(root)
        assert lay.root == images and lay.val_source.startswith(f"labels from {top / 'LOC_val_solution.csv'}")
        assert {it.relpath.rsplit("/", 1)[1]: it.synset for it in lay.val} == truth
        assert len(lay.train) == 3 and not any("test" in it.relpath for it in lay.val)


def test_a_folder_without_either_layout_names_both(tmp_path):
    (tmp_path / "ILSVRC" / "Data").mkdir(parents=True)
    with pytest.raises(StageError, match=r"train is missing: .*ILSVRC/Data/CLS-LOC/train and val"):
        layout.check(tmp_path)


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


def test_kaggles_tree_at_its_top_folder_is_indexed_and_followed(tmp_path):
    """Through the index (its class names from LOC_synset_mapping.txt beside ILSVRC/) and the
    workflow's plan (the names it follows are those under ILSVRC/Data/CLS-LOC)."""
    from helpers import CONFIG, validated, with_overrides

    from workflow_scripts.data import index
    from workflow_scripts.plan.data_plan import DataPlan

    top, images = _kaggle_tree(tmp_path)
    index.build(top, tmp_path / "index")
    summary = json.loads((tmp_path / "index" / "summary.json").read_text())
    assert summary["root"] == str(images.resolve()) and summary["images"] == {"train": 3, "val": 6}, summary
    wnid, shape, hue = embedded.class_spec(0)
    assert f"{wnid}\t{hue} {shape}\n" in (tmp_path / "index" / "synset_words.txt").read_text()
    plan = DataPlan(validated(with_overrides(CONFIG, data_dir=str(tmp_path / "data"), dataset__root=str(top))))
    before = plan.contents()
    (images / "train" / wnid / f"{wnid}_99.JPEG").write_bytes((images / "train" / wnid / f"{wnid}_1.JPEG").read_bytes())
    assert plan.contents() != before
