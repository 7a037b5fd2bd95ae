"""The data stage through snakemake, as a user runs it: the embedded default end to end, reruns
only what a config edit affects, byte-identical outputs, atomic outputs, clear config errors."""

import signal
import subprocess
import time

import pytest
import yaml
from helpers import (
    CONFIG,
    LONG_TEST_GPUS,
    REPO,
    SNAKEMAKE,
    as_a_user,
    interpreter,
    pipeline_config,
    planned_jobs,
    snakemake,
    tree_hashes,
    without_slurm,
    write_config,
)


@pytest.mark.stage
def test_the_quick_start_plans_the_jobs_pipeline_run_ran(tmp_path):
    """pipeline_run (helpers.PIPELINE) differs from the quick start's default only in sizes: a fresh
    directory of each plans the same jobs of `all`, every stage among them."""
    (default := tmp_path / "default").mkdir()
    (suite := tmp_path / "suite").mkdir()
    write_config(default, training__cache_clear=CONFIG["training"]["cache_clear"])  # the quick start's own
    pipeline_config(suite)
    planned = planned_jobs(default)
    assert planned == planned_jobs(suite)
    stages = {"tfrecord", "recordio", "lmdb", "preflight_check", "train", "long_test_run", "interconnect_collectives"}
    # The quick start clears each node's caches as the study did (the suite: its dataset only, SUITE).
    shell = snakemake(default, "all", "-n", "-p").stdout
    assert "--cache-clear=node" in shell and "--cache-clear=dataset" not in shell
    assert stages | {"int8_calibrate", "int8_throughput_run", "training_tables", "conclusions"} <= set(planned), planned


@pytest.mark.pipeline
def test_embedded_default_converts_to_all_three_formats(pipeline_run):
    default_run = pipeline_run
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


@pytest.mark.pipeline
def test_every_stage_ran_from_a_scratch_folder_with_interpreters_that_lack_this_project(pipeline_run):
    """pipeline_run ran as a user runs it on a cluster: `--directory` elsewhere than the repository,
    each interpreter one with the packages but not this project (a module's python, an image's), no
    PYTHONPATH of the tests'. Every job, the ranks and helpers they start, found the stage modules
    from the workflow's own folder."""
    assert REPO.resolve() not in pipeline_run.resolve().parents
    envs = yaml.safe_load((pipeline_run / "config.yaml").read_text())["envs"]
    assert set(envs) == set(CONFIG["envs"])
    for env, python in envs.items():
        assert python != interpreter(env)
        found = subprocess.run(
            [python, "-c", "import workflow_scripts"],
            cwd=pipeline_run,
            env=as_a_user(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "No module named 'workflow_scripts'" in found.stderr, (env, found.stderr[-2000:])
    assert planned_jobs(pipeline_run) == {}


@pytest.mark.stage
def test_the_shipped_config_plans_from_a_scratch_folder(tmp_path):
    """config.yaml as shipped, given from a scratch folder: its relative interpreters are the
    repository's (envs/setup.sh makes them there), not the folder's."""
    proc = subprocess.run(
        [SNAKEMAKE, "all", "-n", "-p", "--snakefile", REPO / "Snakefile", "--configfile", REPO / "config.yaml"],
        cwd=tmp_path,
        env=as_a_user(without_slurm(tmp_path)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"{REPO / CONFIG['envs']['workflow']} -m workflow_scripts.data.embedded" in proc.stdout


@pytest.mark.pipeline
def test_config_edit_reruns_only_what_it_affects(pipeline_run):
    work = pipeline_run
    try:
        pipeline_config(work, conversion__resize_shorter=96)
        # each conversion, then its whole-file check
        assert planned_jobs(work, "data") == {"tfrecord": 1, "recordio": 1, "lmdb": 1, "data_check": 3}
        pipeline_config(work, conversion__tfrecord__train_shards=3)
        assert planned_jobs(work, "data") == {"tfrecord": 1, "data_check": 1}
        # and the TensorFlow runs on it (the sweep's and the long test's), and the tables and figures
        # built from the runs
        assert {
            k: v
            for k, v in planned_jobs(work, "all").items()
            if k.startswith(("tfrecord", "train", "long_test", "time_to"))
        } == {
            "tfrecord": 1,
            "train": len(CONFIG["training"]["gpus"]),
            "training_tables": 1,
            "training_figures": 1,
            "long_test_run": len(LONG_TEST_GPUS),
            "time_to_accuracy": 1,
            "time_to_accuracy_figure": 1,
        }
        pipeline_config(work, conversion__shuffle_seed=5)
        assert planned_jobs(work, "data") == {
            "index_dataset": 1,
            "tfrecord": 1,
            "recordio": 1,
            "lmdb": 1,
            "data_check": 3,
        }
        pipeline_config(work, dataset__embedded__classes=12)
        assert planned_jobs(work, "data") == {
            "embedded_dataset": 1,
            "index_dataset": 1,
            "tfrecord": 1,
            "recordio": 1,
            "lmdb": 1,
            "data_check": 3,
        }
    finally:
        pipeline_config(work)


@pytest.mark.pipeline
def test_same_input_and_config_give_byte_identical_outputs(pipeline_run):
    # data/checked/ is the whole-file check's record of the files' sizes and mtimes, which a rewrite
    # changes: a record of the check, not data (workflow_scripts/data/verify.py)
    before = {k: v for k, v in tree_hashes(pipeline_run / "data").items() if not k.startswith("checked/")}
    snakemake(pipeline_run, "data", "--forceall")
    assert {k: v for k, v in tree_hashes(pipeline_run / "data").items() if not k.startswith("checked/")} == before
    # The regenerated data is the same bytes: mark the runs on it up to date again, every output in
    # the DAG's order (without --forceall, snakemake leaves out the jobs behind the preflight gates,
    # whose inputs are ancient(), and a later run would redo them all).
    snakemake(pipeline_run, "all", "--touch", "--forceall")
    assert planned_jobs(pipeline_run) == {}


@pytest.mark.pipeline
def test_killed_conversion_leaves_nothing_that_looks_complete(pipeline_run, tmp_path):
    default_run = pipeline_run
    out = tmp_path / "tfrecord"
    proc = subprocess.Popen(
        [
            interpreter("tensorflow"),
            "-m",
            "workflow_scripts.data.tfrecord",
            "--index",
            str(default_run / "data" / "index"),
            "--out",
            str(out),
            "--threads",
            "1",
            "--resize-shorter",
            "64",
            "--train-shards",
            "8",
            "--val-shards",
            "2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    shard = None
    while time.time() < deadline and shard is None:
        shard = next(iter(tmp_path.glob(".tfrecord.partial-*/train-00001-of-00008")), None)
        time.sleep(0.02)
    assert shard is not None, "conversion never started writing"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists()


@pytest.mark.stage
def test_bad_dataset_path_stops_at_once_naming_it(tmp_path):
    write_config(tmp_path, dataset__root=str(tmp_path / "no-such-imagenet"))
    proc = snakemake(tmp_path, "-n", check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "dataset.root" in out and "no-such-imagenet" in out


@pytest.mark.stage
def test_schema_rejects_a_bad_value_naming_the_key(tmp_path):
    write_config(tmp_path, conversion__resize_shorter=-3)
    proc = snakemake(tmp_path, "-n", check=False)
    assert proc.returncode != 0 and "resize_shorter" in proc.stdout + proc.stderr


@pytest.mark.stage
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


@pytest.mark.stage
def test_lint_is_clean():
    proc = subprocess.run([SNAKEMAKE, "--lint"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert "Congratulations" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
