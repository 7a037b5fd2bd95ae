"""The data stage through snakemake, as a user runs it: the embedded default end to end, reruns
only what a config edit affects, byte-identical outputs, atomic outputs, clear config errors."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import yaml
from conftest import CONFIG, REPO, interpreter, tree_hashes

SNAKEMAKE = str(REPO / ".venv" / "bin" / "snakemake")


def write_config(workdir, **overrides):
    cfg = yaml.safe_load(yaml.safe_dump(CONFIG))
    cfg["envs"] = {env: interpreter(env) for env in cfg["envs"]}
    for dotted, value in overrides.items():
        node = cfg
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node[p]
        node[leaf] = value
    (workdir / "config.yaml").write_text(yaml.safe_dump(cfg))


def snakemake(workdir, *args, check=True):
    proc = subprocess.run([SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
                           "--cores", "2", *args], capture_output=True, text=True, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def planned_jobs(workdir):
    """Rule names a dry run would execute."""
    out = snakemake(workdir, "-n", "--quiet", "rules").stdout
    return {m.group(1) for m in re.finditer(r"^(\w+)\s+\d+$", out, re.M)} - {"total", "all"}


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """The embedded default, exactly as the quick start runs it, in a scratch working directory."""
    work = tmp_path_factory.mktemp("pipeline")
    write_config(work)
    snakemake(work)
    return work


def test_embedded_default_converts_to_all_three_formats(default_run):
    data = default_run / "data"
    emb = CONFIG["dataset"]["embedded"]
    n_train, n_val = emb["classes"] * emb["train_per_class"], emb["classes"] * emb["val_per_class"]
    for fmt in ("tfrecord", "recordio", "lmdb"):
        manifest = yaml.safe_load((data / fmt / "manifest.json").read_text())
        assert manifest["splits"]["train"]["images"] == n_train
        assert manifest["splits"]["val"]["images"] == n_val
        assert manifest["classes"] == emb["classes"]
        assert (data / fmt / "synsets.txt").read_text().split() == (data / "index" / "synsets.txt").read_text().split()
    for rule in ("embedded_dataset", "index_dataset", "tfrecord", "recordio", "lmdb"):
        assert (default_run / "logs" / "data" / f"{rule}.log").is_file()
        assert (default_run / "logs" / "data" / f"{rule}.bench.tsv").is_file()
    assert "Nothing to be done" in snakemake(default_run, "-n").stdout + snakemake(default_run, "-n").stderr


def test_config_edit_reruns_only_what_it_affects(default_run):
    try:
        write_config(default_run, conversion__resize_shorter=96)
        assert planned_jobs(default_run) == {"tfrecord", "recordio", "lmdb"}
        write_config(default_run, conversion__tfrecord__train_shards=3)
        assert planned_jobs(default_run) == {"tfrecord"}
        write_config(default_run, conversion__shuffle_seed=5)
        assert planned_jobs(default_run) == {"index_dataset", "tfrecord", "recordio", "lmdb"}
        write_config(default_run, dataset__embedded__classes=12)
        assert planned_jobs(default_run) == {"embedded_dataset", "index_dataset", "tfrecord", "recordio", "lmdb"}
    finally:
        write_config(default_run)


def test_same_input_and_config_give_byte_identical_outputs(default_run):
    before = tree_hashes(default_run / "data")
    snakemake(default_run, "--forceall")
    assert tree_hashes(default_run / "data") == before


def test_killed_conversion_leaves_nothing_that_looks_complete(default_run, tmp_path):
    out = tmp_path / "tfrecord"
    proc = subprocess.Popen([interpreter("tensorflow"), "-m", "workflow_scripts.data.tfrecord", "--index",
                             str(default_run / "data" / "index"), "--out", str(out), "--threads", "1",
                             "--resize-shorter", "64", "--train-shards", "8", "--val-shards", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    shard = None
    while time.time() < deadline and shard is None:
        shard = next(iter(tmp_path.glob(".tfrecord.partial-*/train-00001-of-00008")), None)
        time.sleep(0.02)
    assert shard is not None, "conversion never started writing"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists()


def test_bad_dataset_path_stops_at_once_naming_it(tmp_path):
    write_config(tmp_path, dataset__root=str(tmp_path / "no-such-imagenet"))
    proc = snakemake(tmp_path, "-n", check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "dataset.root" in out and "no-such-imagenet" in out


def test_schema_rejects_a_bad_value_naming_the_key(tmp_path):
    write_config(tmp_path, conversion__resize_shorter=-3)
    proc = snakemake(tmp_path, "-n", check=False)
    assert proc.returncode != 0 and "resize_shorter" in proc.stdout + proc.stderr


def test_missing_label_file_stops_at_once_naming_it(tmp_path):
    from workflow_scripts.data import embedded

    root = tmp_path / "imagenet"
    embedded.make(root, classes=2, train_per_class=1, val_per_class=1, quirks=False)
    (root / "imagenet_2012_validation_synset_labels.txt").unlink()
    write_config(tmp_path, dataset__root=str(root))
    proc = snakemake(tmp_path, "-n", check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "imagenet_2012_validation_synset_labels.txt" in out and "dataset.val_labels" in out


def test_lint_is_clean():
    proc = subprocess.run([SNAKEMAKE, "--lint"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert "Congratulations" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
