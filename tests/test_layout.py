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
