"""Hugging Face's imagenet-1k parquet shards converted in place (issue 64, item 2): read through
pyarrow, named and ordered as the tree they came from, and a shard whose labels are not the sorted
WNIDs' order refused by name."""

import json

import pytest
from helpers import QUIRKY, run_stage
from helpers.imagenet_forms import CONVERTERS, convert_all, make_parquet

from workflow_scripts.common.errors import StageError
from workflow_scripts.data import embedded, sources

pytestmark = pytest.mark.stage
pytest.importorskip("pyarrow")  # envs/workflow.txt, tf-mxnet.txt and torch.txt have it


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("parquet") / "ILSVRC2012"
    return embedded.make(root, seed=7, **QUIRKY)


def _convert(work, root, *args):
    run_stage(
        "workflow", "workflow_scripts.data.index", "--root", root, "--out", work / "index", "--threads", "2", *args
    )
    convert_all(work / "index", work)
    return work


def test_parquet_shards_convert_to_the_trees_copies(tree, tmp_path):
    shards = make_parquet(tree, tmp_path / "hf" / "data", rows_per_group=4, shards=2)
    from_parquet = _convert(tmp_path / "p", shards.parent)  # dataset.root at the repository, shards in data/
    from_tree = _convert(tmp_path / "t", tree)
    summary = json.loads((from_parquet / "index" / "summary.json").read_text())
    assert summary["form"] == "parquet" and summary["images"] == {"train": 30, "val": 20}
    for _, module, _ in CONVERTERS:
        a, t = from_parquet / module, from_tree / module
        files = sorted(str(p.relative_to(a)) for p in a.rglob("*") if p.is_file())
        assert files == sorted(str(p.relative_to(t)) for p in t.rglob("*") if p.is_file())
        for name in files:
            if name not in ("manifest.json", "done.json"):
                assert (a / name).read_bytes() == (t / name).read_bytes(), f"{module}/{name}"
        manifests = [json.loads((d / "manifest.json").read_text()) for d in (a, t)]
        assert manifests[0].pop("source") != manifests[1].pop("source")
        assert manifests[0] == manifests[1]
    # TFRecord's class texts: imagenet-1k's class names there, LOC_synset_mapping.txt's here
    synset_words = [(w / "index" / "synset_words.txt").read_text() for w in (from_parquet, from_tree)]
    assert synset_words[0] == synset_words[1]


def test_a_shard_labelled_in_another_order_is_refused_naming_it_and_the_class(tree, tmp_path):
    shards = make_parquet(tree, tmp_path / "hf", shards=2, mislabel=1)
    with pytest.raises(StageError) as err:
        sources.discover(shards)
    message = str(err.value)
    assert message.startswith(f"{shards / 'train-00001-of-00002.parquet'}: its class 0 is n10000004")
    assert "class 0 of the sorted WNIDs is n10000000" in message
    proc = run_stage(
        "workflow", "workflow_scripts.data.index", "--root", shards, "--out", tmp_path / "index", check=False
    )
    assert proc.returncode == 2 and "train-00001-of-00002.parquet: its class 0" in proc.stderr


def test_a_missing_split_and_a_shard_without_the_columns_are_named(tree, tmp_path):
    shards = make_parquet(tree, tmp_path / "hf")
    (shards / "validation-00000-of-00001.parquet").rename(tmp_path / "elsewhere.parquet")
    with pytest.raises(StageError, match="validation-\\*.parquet"):
        sources.check(shards)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"jpg": [b"x"], "cls": [0]}), shards / "validation-00000-of-00001.parquet")
    with pytest.raises(StageError, match="needs columns image"):
        sources.discover(shards)
