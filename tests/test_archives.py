"""image-net.org's archives converted in place (issue 64, item 1): the index reads the member lists
and the devkit, the converters read each image out of its archive, and the three copies are the
ones the extracted tree of the same archives makes, byte for byte. A damaged archive is named."""

import csv
import json
import os

import pytest
from helpers import QUIRKY, run_stage
from helpers.imagenet_forms import CONVERTERS, convert_all, extract, make_archives

from workflow_scripts.common.errors import StageError
from workflow_scripts.data import embedded, sources


def _index(out, *args, check=True):
    return run_stage(
        "workflow",
        "workflow_scripts.data.index",
        *args,
        "--out",
        out,
        "--val-subset",
        "1",
        "--threads",
        "2",
        check=check,
    )


def _convert(work, *index_args):
    _index(work / "index", *index_args)
    convert_all(work / "index", work)
    return work


def _files(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def _rows(path):
    with open(path, newline="") as f:
        return [{k: v for k, v in row.items() if k != "location"} for row in csv.DictReader(f, delimiter="\t")]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("forms") / "ILSVRC2012"
    return embedded.make(root, seed=7, **QUIRKY)  # CMYK, PNG and grayscale members among them


@pytest.mark.stage
def test_the_archives_copies_are_the_extracted_trees_byte_for_byte(tree, tmp_path):
    archives = make_archives(tree, tmp_path / "archives")
    extracted, truth = extract(archives, tmp_path / "extracted")
    from_archives = _convert(tmp_path / "a", "--root", archives)
    from_tree = _convert(tmp_path / "t", "--root", extracted, "--val-labels", truth)
    summary = json.loads((from_archives / "index" / "summary.json").read_text())
    assert summary["form"] == "archives" and summary["images"] == {"train": 30, "val": 20}
    assert sorted(os.listdir(archives)) == sorted(sources.archives.KEYS.values()), "something was extracted"
    for split in ("train", "val"):  # the same images, labels and shuffled order
        assert _rows(from_archives / "index" / f"{split}.tsv") == _rows(from_tree / "index" / f"{split}.tsv")
    for _, module, _ in CONVERTERS:
        a, t = from_archives / module, from_tree / module
        assert _files(a) == _files(t)
        for name in _files(a):
            if name in ("manifest.json", "done.json"):
                continue
            assert (a / name).read_bytes() == (t / name).read_bytes(), f"{module}/{name}"
        manifests = [json.loads((d / "manifest.json").read_text()) for d in (a, t)]
        assert manifests[0].pop("source") == str(archives.resolve())
        manifests[1].pop("source")
        assert manifests[0] == manifests[1]
        assert any(k.startswith("reencoded") for k in manifests[0]["splits"]["train"]["stored_as"])
    # the class texts of TFRecord's image/class/text come from the devkit's meta.mat in both
    assert "words of n10000000" in (from_archives / "index" / "synset_words.txt").read_text()


@pytest.mark.stage
def test_a_truncated_inner_tar_is_refused_naming_the_archive_and_member(tree, tmp_path):
    archives = make_archives(tree, tmp_path / "archives", damage="truncated")
    proc = _index(tmp_path / "index", "--root", archives, check=False)
    assert proc.returncode == 2, proc.stderr
    assert f"{archives / 'ILSVRC2012_img_train.tar'}, member n10000001.tar: truncated" in proc.stderr
    assert not (tmp_path / "index").exists()


@pytest.mark.stage
def test_an_undecodable_member_is_a_reject_named_by_archive_and_member(tree, tmp_path):
    archives = make_archives(tree, tmp_path / "archives", damage="undecodable")
    proc = _index(tmp_path / "index", "--root", archives, check=False)  # 1 of 50: over the default 1 %
    assert proc.returncode == 2
    assert f"in {archives / 'ILSVRC2012_img_train.tar'}, member n10000001.tar/n10000001_" in proc.stderr
    assert "max_reject_fraction" in proc.stderr
    _index(tmp_path / "index", "--root", archives, "--max-reject-fraction", "0.05")
    with open(tmp_path / "index" / "rejects.tsv", newline="") as f:
        (reject,) = list(csv.DictReader(f, delimiter="\t"))
    assert reject["relpath"].startswith("train/n10000001/") and "member n10000001.tar/" in reject["reason"]


@pytest.mark.stage
def test_a_changed_archive_reindexes_and_one_still_being_written_is_waited_for(tree, tmp_path):
    archives = make_archives(tree, tmp_path / "archives")
    form, files = sources.check(archives)
    assert form == "archives" and len(files) == 3
    before = sources.fingerprint(archives, form, files)
    os.utime(archives / "ILSVRC2012_img_val.tar", ns=(1, 1))
    assert sources.fingerprint(archives, form, files) != before
    proc = _index(tmp_path / "index", "--root", archives, "--settle-s", "300", check=False)
    assert proc.returncode == 2 and f"{archives / 'ILSVRC2012_img_val.tar'} changed" in proc.stderr


@pytest.mark.stage
def test_an_archive_missing_or_named_elsewhere(tree, tmp_path):
    archives = make_archives(tree, tmp_path / "archives")
    elsewhere = tmp_path / "kept" / "devkit.tar.gz"
    elsewhere.parent.mkdir()
    (archives / "ILSVRC2012_devkit_t12.tar.gz").rename(elsewhere)
    with pytest.raises(StageError, match="config dataset.devkit"):
        sources.check(archives)
    form, files = sources.check(archives, keys={"devkit": str(elsewhere)})
    assert form == "archives" and elsewhere in files
    with pytest.raises(
        StageError, match="dataset.val_labels = .* the devkit's ground truth: the file would not be read"
    ):
        sources.check(archives, val_labels=str(tmp_path / "labels.txt"), keys={"devkit": str(elsewhere)})
    lay = sources.discover(archives, val_subset=True, keys={"devkit": str(elsewhere)})
    assert len(lay.train) == 30 and len(lay.val) == 20 and lay.val[0].relpath == "val/ILSVRC2012_val_00000001.JPEG"


@pytest.mark.unit
def test_an_archive_key_without_a_root_is_refused_and_only_set_keys_reach_the_index(tmp_path):
    from helpers import CONFIG, validated, with_overrides

    from workflow_scripts.plan import config_checks
    from workflow_scripts.plan.data_plan import DataPlan
    from workflow_scripts.plan.sweep import ConfigProblem

    c = validated(with_overrides(CONFIG, dataset__devkit=str(tmp_path / "devkit.tar.gz")))
    with pytest.raises(ConfigProblem, match="config dataset.devkit names an archive but dataset.root is empty"):
        config_checks.check_config(c)
    assert DataPlan(c).archive_args() == [f"--devkit={tmp_path / 'devkit.tar.gz'}"]
    assert DataPlan(validated(CONFIG)).archive_args() == []
