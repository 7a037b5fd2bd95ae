"""Like with like in INT8 (issue 39, part 6): FP32 and INT8 of a batch size are timed in one job on
one device, the throughput table refuses a pair from two GPU models or two nodes, a TensorRT engine
is never loaded on another GPU model than the one that built it, and every inference job takes
inference.system's SLURM resources (the timed job its node alone). No TensorRT or GPU here: the
timed job runs on the CPU with ONNX Runtime, and the TensorRT jobs are read off the dry run."""

import csv
import json
import os
import re
import subprocess
import time

import pytest
from helpers import REPO, interpreter, run_script, run_stage, snakemake, without_slurm, write_config
from helpers.stand_in import route

from workflow_scripts.common.errors import StageError
from workflow_scripts.int8 import int8_tables, tensorrt_engine

SIZE, BATCH, WARMUP, REPEATS = 32, 2, 1, 3
A100, H100 = "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """A tiny network's FP32 and INT8 engines, made by the stage's own export, calibration,
    quantization and engine build (tests/helpers/scripts/int8_tiny_pair.py, then engine.py as int8_engine
    runs it)."""
    work = tmp_path_factory.mktemp("tiny-pair")
    run_script("pytorch", "int8_tiny_pair.py", work, SIZE)
    for p in ("fp32", "int8"):
        run_stage(
            "pytorch",
            "workflow_scripts.int8.build_engine",
            "--engine",
            "onnxruntime",
            "--onnx",
            work / f"{p}.onnx",
            "--precision",
            p,
            "--out",
            work / f"{p}.engine",
            "--info",
            work / f"{p}.engine.json",
        )
    return work


def timed_job(engines, root, node):
    """throughput.py as int8_throughput_run runs it, on `node` as SLURM would name it."""
    out = root / "resnet50" / "onnxruntime" / "throughput" / f"bs{BATCH}.json"
    argv = [
        "-m",
        "workflow_scripts.int8.throughput",
        "--engine",
        "onnxruntime",
        "--network",
        "resnet50",
        "--fp32",
        engines / "fp32.engine",
        "--int8",
        engines / "int8.engine",
        "--image-size",
        SIZE,
        "--batch-size",
        BATCH,
        "--warmup",
        WARMUP,
        "--repeats",
        REPEATS,
        "--threads",
        1,
        "--out",
        out,
    ]
    proc = subprocess.run(
        [interpreter("pytorch"), *map(str, argv)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "SLURMD_NODENAME": node},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.stage
def test_one_job_times_both_precisions_on_one_device(engines, tmp_path):
    before = time.time()
    out = timed_job(engines, tmp_path, "node-a")
    after = time.time()
    assert [f.name for f in out.parent.iterdir()] == [out.name]  # one record for the pair
    record = json.loads(out.read_text())
    assert before <= record["started_at"] < record["ended_at"] <= after
    assert record["blocks"] == [["fp32", 2], ["int8", 2], ["int8", 1], ["fp32", 1]]
    runs = record["precisions"]
    assert set(runs) == {"fp32", "int8"}
    for p, run in runs.items():
        assert run["precision"] == p and run["engine_file"] == str(engines / f"{p}.engine")
        assert len(run["times_s"]) == run["runs"] == REPEATS and run["timing"] == "host perf_counter"
    # One device and one node, each recorded per precision: the CPU model with the job's threads, the
    # node by SLURM's name for it.
    assert runs["fp32"]["device"] == runs["int8"]["device"] and runs["fp32"]["device"].endswith(", 1 threads")
    assert runs["fp32"]["host"] == runs["int8"]["host"] == "node-a"
    # The engines' own records name the CPU model that built them.
    built = json.loads((engines / "int8.engine.json").read_text())["built_on"]
    assert built["device"] and runs["int8"]["device"].startswith(built["device"])
    (row,) = int8_tables.throughput_rows(tmp_path, "onnxruntime", ["resnet50"], [BATCH])
    assert (row["device"], row["host"], row["order"]) == (runs["fp32"]["device"], "node-a", "fp32 int8 int8 fp32")
    assert f"on {row['device']} (node-a)" in int8_tables.throughput_markdown([row])


@pytest.mark.stage
def test_one_timing_job_writes_a_record_per_batch_size_each_with_its_own_blocks_and_isolation(engines, tmp_path):
    """int8_throughput_run's job (int8/timing_job.py) with ONNX Runtime's engines: every batch size in
    one process, each pair timed and recorded as throughput.py records one."""
    folder = tmp_path / "resnet50" / "onnxruntime" / "throughput"
    argv = ["-m", "workflow_scripts.int8.timing_job", "--engine", "onnxruntime", "--image-size", SIZE]
    argv += ["--pair", "resnet50", engines / "fp32.engine", engines / "int8.engine", folder]
    argv += ["--batch-sizes", 1, BATCH, "--warmup", WARMUP, "--repeats", REPEATS, "--threads", 1]
    proc = subprocess.run(
        [interpreter("pytorch"), *map(str, argv)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "SLURMD_NODENAME": "node-a", "SLURM_JOB_ID": ""},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(f.name for f in folder.iterdir()) == ["bs1.json", f"bs{BATCH}.json"]
    for batch in (1, BATCH):
        record = json.loads((folder / f"bs{batch}.json").read_text())
        assert (record["batch_size"], record["network"], record["engine"]) == (batch, "resnet50", "onnxruntime")
        # each pair its own ABBA blocks, warm-up, stability and isolation record
        assert record["blocks"] == [["fp32", 2], ["int8", 2], ["int8", 1], ["fp32", 1]]
        assert record["isolation"] and set(record["precisions"]) == {"fp32", "int8"}, record["isolation"]
        for p, run in record["precisions"].items():
            assert len(run["times_s"]) == REPEATS and "stable" in run and run["spans"], (batch, p)
            assert all(span["warmup_runs"] >= WARMUP for span in run["spans"]), run["spans"]
            assert run["host"] == "node-a" and run["engine_file"] == str(engines / f"{p}.engine")
    rows = int8_tables.throughput_rows(tmp_path, "onnxruntime", ["resnet50"], [1, BATCH])
    assert [r["batch_size"] for r in rows] == [1, BATCH] and {r["host"] for r in rows} == {"node-a"}
    assert "timing 2/2: resnet50, batch 2" in proc.stderr


def pair_record(fp32, int8):
    """A record as throughput.py writes it, with each precision's device and node as given."""
    run = {"runs": 3, "images_per_s": 100.0, "images_per_s_best": 110.0, "images_per_s_worst": 90.0}
    return {
        "image_size": 224,
        "warmup": 3,
        "threads": 1,
        "blocks": [["fp32", 2], ["int8", 2], ["int8", 1], ["fp32", 1]],
        "started_at": 0.0,
        "ended_at": 1.0,
        "precisions": {
            p: {**run, "precision": p, "timing": "cuda-events", "device": d, "host": h}
            for p, (d, h) in (("fp32", fp32), ("int8", int8))
        },
    }


def write_pair(root, fp32, int8, old=False, bs=1):
    folder = root / "resnet50" / "tensorrt" / "throughput"
    folder.mkdir(parents=True, exist_ok=True)
    record = pair_record(fp32, int8)
    if not old:
        path = folder / f"bs{bs}.json"
        path.write_text(json.dumps(record))
        return [path]
    # The per-precision jobs of before: one file each, no node.
    paths = []
    for p in ("fp32", "int8"):
        run = {k: v for k, v in record["precisions"][p].items() if k != "host"}
        paths.append(folder / f"{p}_bs{bs}.json")
        paths[-1].write_text(json.dumps({**run, "image_size": 224, "warmup": 3, "threads": 1}))
    return paths


def refused(root):
    with pytest.raises(StageError) as err:
        int8_tables.throughput_rows(root, "tensorrt", ["resnet50"], [1])
    return str(err.value)


@pytest.mark.stage
@pytest.mark.parametrize("old", [False, True], ids=["one-job", "per-precision-jobs"])
def test_table_refuses_a_pair_from_two_gpu_models(tmp_path, old):
    paths = write_pair(tmp_path, (A100, "gpu01"), (H100, "gpu01"), old=old)
    msg = refused(tmp_path)
    assert A100 in msg and H100 in msg and all(str(p) in msg for p in paths), msg
    # The table's command: one line naming both and the file, no table written.
    csv, md = tmp_path / "t.csv", tmp_path / "t.md"
    proc = run_stage(
        "workflow",
        "workflow_scripts.int8.int8_tables",
        "throughput",
        "--root",
        tmp_path,
        "--engine",
        "tensorrt",
        "--models",
        "resnet50",
        "--batch-sizes",
        1,
        "--csv",
        csv,
        "--md",
        md,
        check=False,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert A100 in proc.stderr and H100 in proc.stderr and str(paths[0]) in proc.stderr
    assert not csv.exists() and not md.exists()


@pytest.mark.unit
def test_table_refuses_a_pair_from_two_nodes(tmp_path):
    (path,) = write_pair(tmp_path, (H100, "gpu01"), (H100, "gpu02"))
    msg = refused(tmp_path)
    assert "'gpu01'" in msg and "'gpu02'" in msg and "node" in msg and str(path) in msg, msg


@pytest.mark.unit
def test_table_gives_the_one_device_and_node_of_an_agreeing_pair(tmp_path):
    write_pair(tmp_path, (H100, "gpu01"), (H100, "gpu01"))
    write_pair(tmp_path, (H100, "gpu01"), (H100, "gpu01"), old=True, bs=8)
    rows = int8_tables.throughput_rows(tmp_path, "tensorrt", ["resnet50"], [1, 8])
    assert [(r["device"], r["host"], r["order"]) for r in rows] == [
        (H100, "gpu01", "fp32 int8 int8 fp32"),
        (H100, "", ""),  # the old per-precision jobs kept no node, and timed one precision each
    ]


@pytest.mark.unit
def test_engine_built_on_another_gpu_model_is_not_loaded():
    plan = "results/int8/resnet50/tensorrt/int8.engine"
    built = {"device": A100, "compute_capability": "8.0", "host": "gpu01"}
    here = {"device": H100, "compute_capability": "9.0", "host": "gpu07"}
    with pytest.raises(StageError) as err:
        tensorrt_engine.check_built_for(plan, built, here)
    msg = str(err.value)
    assert "\n" not in msg
    for part in (plan, A100, H100, "inference.system", "gpu_type", "constraint", "snakemake --forcerun int8_engine"):
        assert part in msg, (part, msg)
    # A record without the GPU (an engine built before it was kept) cannot be vouched for either.
    with pytest.raises(StageError, match="--forcerun int8_engine"):
        tensorrt_engine.check_built_for(plan, None, here)
    tensorrt_engine.check_built_for(plan, {**built, "device": H100}, here)  # the same model: loaded


GPU = {
    "gpus_per_node": 4,
    "max_nodes": 1,
    "gpu_request": "gpus-per-node",
    "gpu_type": "a100",
    "cpus_per_task": 8,
    "partition": "gpu",
    "constraint": "a100-80g",
    "account": "proj",
    "qos": "high",
}
INFER_RULES = ("int8_engine", "int8_evaluate", "int8_throughput_run")


def dry_run_jobs(work, **overrides):
    """{rule: [(threads, resources, shell command) of each job]} of `snakemake -n -p int8`."""
    # TensorRT's jobs are planned only for a route that imports it: a stand-in's (helpers/stand_in.py)
    tensorrt = overrides.get("inference__engine") == "tensorrt"
    write_config(
        work,
        training__frameworks=["pytorch"],
        envs_gpu={"pytorch": route(work / "trt-route") if tensorrt else interpreter("pytorch")},
        inference__models={"resnet50": "torchvision"},
        **overrides,
    )
    out = snakemake(work, "int8", "-n", "-p", env=without_slurm(work)).stdout
    jobs = {}
    for block in re.split(r"\n(?=rule \w+:)", out):
        m = re.match(r"rule (\w+):", block)
        if not m or m.group(1) not in INFER_RULES:
            continue
        threads = re.search(r"^\s+threads: (\d+)", block, re.M)  # not shown when 1
        threads = int(threads.group(1)) if threads else 1
        resources = re.search(r"^\s+resources: (.*)$", block, re.M).group(1)
        command = re.search(r"^Shell command: (.*)$", block, re.M).group(1)
        jobs.setdefault(m.group(1), []).append((threads, resources, command))
    assert set(jobs) == set(INFER_RULES), out[-3000:]
    return jobs


@pytest.mark.stage
@pytest.mark.parametrize(
    "request_as, gpu_words",
    [("gpus-per-node", "slurm_extra=--gpus-per-node=a100:1"), ("gres", "gres=gpu:a100:1")],
)
def test_tensorrt_jobs_take_the_inference_systems_gpu_partition_and_the_timed_job_its_node(
    tmp_path, request_as, gpu_words
):
    # inference.system "": the first of training.systems, the GPU system here.
    jobs = dry_run_jobs(
        tmp_path,
        systems={"a100": {**GPU, "gpu_request": request_as}},
        training__systems=["a100"],
        inference__engine="tensorrt",
    )
    for rule, found in jobs.items():
        for _, resources, _ in found:
            for word in ("slurm_partition=gpu", "constraint=a100-80g", "slurm_account=proj", "qos=high"):
                assert word in resources, (rule, word, resources)
            assert "a100:1" in resources and (gpu_words in resources or "--exclusive" in resources), resources
            # Measuring: the timed job alone takes the node.
            assert ("--exclusive" in resources) == (rule == "int8_throughput_run"), (rule, resources)
    assert all(gpu_words.split("=", 1)[1] in r for _, r, _ in jobs["int8_throughput_run"])


@pytest.mark.stage
def test_onnxruntime_jobs_take_the_named_systems_partition_and_the_timed_job_every_core(tmp_path):
    jobs = dry_run_jobs(
        tmp_path,
        systems={"cpu": {"gpus_per_node": 2, "max_nodes": 1}, "a100": GPU},
        training__systems=["cpu"],
        inference__system="a100",
        inference__threads=1,
    )
    for rule, found in jobs.items():
        for threads, resources, command in found:
            assert "slurm_partition=gpu" in resources and "constraint=a100-80g" in resources, (rule, resources)
            assert "gpu" not in resources.replace("slurm_partition=gpu", ""), (rule, resources)  # no GPU asked
            # a CPU figure that backs no verdict: no GPU node taken alone, though systems.a100.exclusive is on
            assert "--exclusive" not in resources
            # Locally the timed job takes all of snakemake's cores (--cores 2); ONNX Runtime keeps its one thread.
            assert threads == (2 if rule == "int8_throughput_run" else 1), (rule, threads)
            assert "--threads 1 " in command, command


@pytest.mark.stage
def test_inference_system_not_under_systems_stops_the_workflow_naming_the_key(tmp_path):
    write_config(tmp_path, inference__system="v100")
    proc = snakemake(tmp_path, "int8", "-n", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "config inference.system = 'v100'" in out and "systems" in out, out[-2000:]


@pytest.mark.unit
def test_every_column_a_throughput_row_has_is_written(tmp_path):
    """The table's columns are the rows' keys: a key the writer does not know stops the stage (the
    verdict guards' columns were once left out of them, issue 52 item 10)."""
    runs = {
        p: {
            "device": "cpu",
            "host": "h",
            "timing": "host perf_counter",
            "runs": 20,
            "images_per_s": v,
            "images_per_s_best": v * 1.1,
            "images_per_s_worst": v * 0.9,
            "cv": 0.01,
            "window_cv": 0.005,
        }
        for p, v in (("fp32", 100.0), ("int8", 200.0))
    }
    rec = {"image_size": 64, "warmup": 1, "threads": 1, "blocks": [["fp32", 10], ["int8", 10]], "precisions": runs}
    rec["isolation"] = {"isolated": True, "why": "nothing else used the node"}
    folder = tmp_path / "resnet50" / "onnxruntime" / "throughput"
    folder.mkdir(parents=True)
    (folder / "bs8.json").write_text(json.dumps(rec))
    rows = int8_tables.throughput_rows(tmp_path, "onnxruntime", ["resnet50"], [8])
    int8_tables._write(tmp_path / "t.csv", tmp_path / "t.md", int8_tables.THROUGHPUT, rows, "")
    [row] = list(csv.DictReader(open(tmp_path / "t.csv")))
    assert row["isolated"] == "true" and row["int8_cv"] == "0.005" and row["fp32_cv_over"] == "windows", row
