"""The input paths alone (workflow_scripts/train/input_capacity.py) and their benchmark
(benchmarks/input_capacity.py): the shared arithmetic and timing, the CLI's defaults, and each
framework's path on a small embedded tree, converted and measured for a second or two. Rates are
checked for being rates, never against each other."""

import json
import os
import subprocess
import sys

import pytest
from helpers import REPO

from benchmarks import input_capacity as bench
from workflow_scripts.cluster.affinity import parse_cpu_list
from workflow_scripts.common.schema import default as config_default
from workflow_scripts.train import harness, input_capacity


@pytest.mark.unit
def test_rates_are_images_over_seconds_and_per_cpu():
    r = input_capacity.rates([0.1, 0.3], batch=4, cpus=2)
    assert r["images_per_s"] == pytest.approx(8 / 0.4)
    assert r["images_per_s_per_core"] == pytest.approx(8 / 0.4 / 2)
    assert r["batch_time_cv"] == pytest.approx(0.1 / 0.2)  # population sd over the mean
    assert (r["batches_timed"], r["images_timed"], r["seconds_timed"]) == (2, 8, pytest.approx(0.4))
    assert input_capacity.rates([0.5], batch=4, cpus=1)["batch_time_cv"] == 0.0
    with pytest.raises(ValueError):
        input_capacity.rates([], batch=4, cpus=1)


@pytest.mark.unit
def test_warm_up_batches_are_taken_and_not_timed():
    taken, ready = [], []
    feed = input_capacity.Feed(lambda: taken.append(len(taken)) or len(taken), ready=ready.append)
    times = input_capacity.take(feed, seconds=0.01, warmup=3)
    assert len(taken) == len(ready) == 3 + len(times) and times
    assert sum(times) >= 0.01
    # the warm-up covers what the path prepared ahead while it started
    assert input_capacity.warmup_for(2, 4) == 4 and input_capacity.warmup_for(10, None) == 10


@pytest.mark.unit
def test_other_processes_are_counted_without_this_ones_workers():
    sample = {"others_s": 3.0, "others": [(10, "pt_data_worker", "root", 2.0), (20, "snakemake", "root", 1.0)]}
    o = input_capacity.others(sample, mine={10}, seconds=10, node_cpus=2)
    assert o["others_cpu_s"] == pytest.approx(1.0) and o["others_cpu_share"] == pytest.approx(0.05)
    assert not o["isolated"] and [b["name"] for b in o["busiest_others"]] == ["snakemake"]
    assert input_capacity.others({"others_s": 0.0}, set(), 10, 2)["isolated"]


@pytest.mark.unit
def test_cpu_set_is_the_kernels_list_format():
    cpus = {0, 1, 2, 3, 8, 10, 11}
    assert input_capacity.cpu_set(cpus) == "0-3,8,10-11"
    assert set(parse_cpu_list(input_capacity.cpu_set(cpus))) == cpus


@pytest.mark.unit
def test_the_cli_takes_the_schemas_defaults_and_the_trainers_flags():
    a = input_capacity.arg_parser().parse_args(["--framework", "mxnet", "--data", "d", "--batch-per-gpu", "4"])
    assert a.image_size == config_default("training.image_size")
    assert a.dali_decoder == config_default("training.pytorch.dali_decoder")
    assert a.threads == config_default("training.decode_threads") == 0  # 0: the trainer's rule
    assert a.seed == config_default("training.seed")
    words = input_capacity.trainer_words("mxnet", "d", "dali", "cpu", 4, 32, 3, 0)
    args = harness.arg_parser("").parse_args(words)
    assert (args.data, args.batch_per_gpu, args.image_size, args.decode_threads) == ("d", 4, 32, 3)
    assert harness.arg_parser("").parse_args(input_capacity.trainer_words("mxnet", "d", "", "", 4, 32, None, 0))
    assert "--input" in input_capacity.trainer_words("pytorch", "d", "gpu", "cpu", 4, 32, None, 0)


@pytest.mark.unit
def test_the_benchmarks_dry_run_checks_its_commands(capsys, tmp_path):
    bench.main(["--root", str(tmp_path), "--out", str(tmp_path / "out"), "--device", "cpu", "--dry-run"])
    printed = capsys.readouterr().out.splitlines()
    assert sum(input_capacity.__name__ in line for line in printed) == len(bench.CPU_PATHS)
    assert sum("workflow_scripts.data." in line for line in printed) == 4  # index and three formats
    with pytest.raises(SystemExit):
        bench.main(["--root", "r", "--paths", "no-such-path", "--device", "cpu", "--dry-run"])


@pytest.mark.unit
def test_tfrecord_shards_hold_the_studys_images_each():
    assert bench.shards("train", 1281167) == 1024 and bench.shards("val", 50000) == 128
    assert bench.shards("train", 480) == 8 and bench.shards("train", 125100) == 100


@pytest.mark.stage
def test_each_frameworks_input_alone_on_a_converted_embedded_tree(tmp_path):
    from workflow_scripts.data import embedded

    embedded.make(tmp_path / "ILSVRC2012", classes=3, train_per_class=12, val_per_class=2, size=(96, 72))
    out, batch, warmup = tmp_path / "out", 4, 2
    cmd = [sys.executable, str(REPO / "benchmarks" / "input_capacity.py"), "--root", str(tmp_path / "ILSVRC2012")]
    cmd += ["--out", str(out), "--paths", "tensorflow,mxnet,dali-cpu", "--device", "cpu", "--batch", str(batch)]
    cmd += ["--image-size", "32", "--seconds", "1.5", "--warmup-batches", str(warmup), "--conversion-threads", "2"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads((out / "input_capacity.json").read_text())["rows"]
    assert [(r["path"], r["status"]) for r in rows] == [(p, "ok") for p in ("tensorflow", "mxnet", "dali-cpu")], rows
    for row in rows:
        r = json.loads((out / "runs" / f"{row['path']}_trule.json").read_text())  # the CLI's own --out
        assert r["images_per_s"] > 0 and r["batches_timed"] > 0 and r["images_timed"] == r["batches_timed"] * batch
        assert r["images_per_s"] == pytest.approx(r["images_timed"] / r["seconds_timed"])
        assert r["images_per_s_per_core"] == pytest.approx(r["images_per_s"] / r["cpus"])
        assert r["cpus"] == len(parse_cpu_list(r["cpu_set"])) >= 1 and r["device"] == "cpu"
        assert r["warmup_batches"] == max(warmup, r["ahead"] or 0) and r["warmup_asked"] == warmup
        assert r["threads"] >= 1 and not r["threads_given"] and r["threads_detail"]
        assert r["others_cpu_share"] >= 0 and isinstance(r["isolated"], bool)  # the suite runs beside it
    mxnet = json.loads((out / "runs" / "mxnet_trule.json").read_text())
    # MXNet's parser starts at most max(CPUs / 2 - 1, 1) of the threads the trainer asks for; the
    # trainer records both (decode: what runs)
    asked = mxnet["threads_detail"]["decode_asked"]
    ran = min(asked, max(mxnet["cpus"] // 2 - 1, 1))
    assert mxnet["threads"] == mxnet["threads_detail"]["decode"] == ran and bool(mxnet["note"]) == (ran < asked)
    dali = json.loads((out / "runs" / "dali-cpu_trule.json").read_text())
    # DALI counts every batch it handed over: the warm-up's were taken, and left out of the timing
    assert dali["path_stats"]["batches"] == dali["warmup_batches"] + dali["batches_timed"]
    assert dali["decoder"] == "cpu" and dali["threads_detail"]["dali"] == dali["threads"]
    table = (out / "input_capacity.md").read_text()
    assert table.count("| ok") == 3 and os.fspath(out / "converted") in table
