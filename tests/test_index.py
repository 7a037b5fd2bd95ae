"""The index stage: rejects listed with reasons, a reject threshold naming the files, a seeded order."""

import csv
import os

import pytest
from helpers import run_stage, snakemake, without_slurm, write_config

from workflow_scripts.data import embedded, index

pytestmark = pytest.mark.stage


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def test_rejects_are_listed_and_the_stage_continues(quirky_converted):
    rejects = _rows(quirky_converted / "index" / "rejects.tsv")
    reasons = sorted(r["reason"].split(":")[0] for r in rejects)
    assert reasons == ["cannot decode"] * 2 + ["empty file"] * 2 + ["not an image"] * 2
    manifest = (quirky_converted / "lmdb" / "manifest.json").read_text()
    assert all(r["relpath"] in manifest for r in rejects)


def test_too_many_rejects_fail_naming_the_files(quirky_tree, tmp_path):
    proc = run_stage(
        "workflow",
        "workflow_scripts.data.index",
        "--root",
        quirky_tree,
        "--out",
        tmp_path / "index",
        "--max-reject-fraction",
        "0.01",
        check=False,
    )
    assert proc.returncode == 2
    assert "conversion.max_reject_fraction" in proc.stderr
    assert "n10000002_broken_text.JPEG: not an image" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "index").exists()


def test_train_order_is_seeded(quirky_tree, quirky_converted, tmp_path):
    def order(seed):
        out = tmp_path / f"index{seed}"
        run_stage(
            "workflow",
            "workflow_scripts.data.index",
            "--root",
            quirky_tree,
            "--out",
            out,
            "--max-reject-fraction",
            "0.2",
            "--shuffle-seed",
            seed,
        )
        return [r["relpath"] for r in _rows(out / "train.tsv")]

    assert order(0) == [r["relpath"] for r in _rows(quirky_converted / "index" / "train.tsv")]
    assert order(1) != order(0) and sorted(order(1)) == sorted(order(0))


def test_a_dangling_link_and_a_name_that_is_not_utf8_are_rejected_by_name(tmp_path):
    """A symbolic link whose target is gone was dropped without a line; a file name that is not
    UTF-8 crashed the index with a traceback naming no file. Both are rejects now, listed."""
    root = tmp_path / "ILSVRC2012"
    embedded.make(root, classes=2, train_per_class=3, val_per_class=1, seed=1)
    wnid = sorted(p.name for p in (root / "train").iterdir())[0]
    folder = root / "train" / wnid
    (folder / f"{wnid}_gone.JPEG").symlink_to(tmp_path / "elsewhere.JPEG")
    good = next(folder.glob("*.JPEG")).read_bytes()
    with open(os.path.join(os.fsencode(folder), b"caf\xe9_" + wnid.encode() + b".JPEG"), "wb") as f:
        f.write(good)
    index.build(root, tmp_path / "index", "", 0, 0.5, 1)
    rejects = (tmp_path / "index" / "rejects.tsv").read_text()
    assert f"{wnid}_gone.JPEG\ta symbolic link to {tmp_path / 'elsewhere.JPEG'}, which does not exist" in rejects
    assert "caf\\xe9_" in rejects and "its name is not UTF-8" in rejects, rejects


def _index_plan(work):
    proc = snakemake(work, "-n", "data/index", env=without_slurm(work))
    return "index_dataset" in proc.stdout, proc.stdout + proc.stderr


def test_images_added_later_rerun_the_index_and_a_touched_folder_does_not(tmp_path):
    """Four train images added after the index was made (as while ImageNet is still being
    extracted) plan the index again; a folder touched with the same names plans nothing."""
    root = tmp_path / "ILSVRC2012"
    embedded.make(root, classes=2, train_per_class=3, val_per_class=1, seed=1)
    write_config(tmp_path, dataset__root=str(root), dataset__settle_s=0)
    snakemake(tmp_path, "data/index", env=without_slurm(tmp_path))
    assert _index_plan(tmp_path)[0] is False
    folder = sorted((root / "train").iterdir())[0]
    os.utime(folder)
    assert _index_plan(tmp_path)[0] is False
    jpeg = next(folder.glob("*.JPEG")).read_bytes()
    for i in range(4):
        (folder / f"{folder.name}_late{i}.JPEG").write_bytes(jpeg)
    planned, out = _index_plan(tmp_path)
    assert planned and "params" in out.lower(), out[-3000:]


def test_a_tree_still_being_written_is_not_indexed(tmp_path):
    """A folder whose ctime is seconds old, with dataset.settle_s at its default: the index job
    refuses, naming the folder and the key, and writes no index."""
    root = tmp_path / "ILSVRC2012"
    embedded.make(root, classes=2, train_per_class=3, val_per_class=1, seed=1)
    write_config(tmp_path, dataset__root=str(root))
    proc = snakemake(tmp_path, "data/index", check=False, env=without_slurm(tmp_path))
    log = (tmp_path / "logs" / "data" / "index_dataset.log").read_text()
    assert proc.returncode != 0 and not (tmp_path / "data" / "index").exists()
    assert "may still be being written" in log and "dataset.settle_s = 300 s" in log and str(root) in log, log
