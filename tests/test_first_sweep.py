"""A first real sweep as a user meets it, planned with Snakemake on this machine (no cluster):
`snakemake price` prints what the plan reserves, a budget under it stops the workflow naming the
costliest jobs, and a one-framework sweep plans (its INT8 stage without the `pipeline` weights
that only a PyTorch run could give, saying so). Cluster limits: tests/test_cluster_limits.py."""

import json

import pytest
from helpers import interpreter, snakemake, without_slurm, write_config

pytestmark = pytest.mark.stage

GPU = {
    "gpus_per_node": 4,
    "max_nodes": 2,
    "gpu_request": "gpus-per-node",
    "cpus_per_task": 8,
    "time_min": 30,
    # interpreters that exist here: the plan is priced, nothing is run
    "envs": {fw: interpreter(fw) for fw in ("tensorflow", "mxnet", "pytorch")},
}


def test_price_prints_the_plan_and_a_budget_under_it_is_refused(tmp_path):
    write_config(tmp_path, systems={"gpu": GPU}, training__systems=["gpu"], training__gpus=[4, 8])
    proc = snakemake(tmp_path, "price", env=without_slurm(tmp_path))
    figures = json.loads((tmp_path / "results" / "price.json").read_text())["summary"]
    # 3 frameworks x fp32 at 1 and 2 nodes of 4 GPUs: 6 points, each point's 3 repeats (auto on a GPU
    # system) one job of 3 x 30 min, the partition's MaxTime unknown here
    assert figures["by_stage"]["training"] == 6 and figures["largest"]["gpus"] == 8
    # exclusive 4-GPU nodes, 30 min: training 9 x (1 + 2 nodes) x 4 GPUs x 0.5 h = 54 GPU-hours; preflight
    # 3 x (1 + 2 nodes) and the interconnect's 4 and 8 GPUs: (9 + 3) x 4 x 0.5 = 24; preflight's data and
    # input checks, each framework's on one node: 6 x 4 x 0.5 = 12; the embedded default's long test (2
    # GPUs, one node) reserves its 12 jobs: 3 x 4 x 12 x 0.5 = 72. The INT8 stage's ONNX Runtime jobs and
    # the conversions are CPU jobs, counted apart
    assert figures["gpu_hours_reserved"] == 54 + 24 + 12 + 72
    assert figures["by_stage"]["preflight"] == 12
    assert figures["cpu_jobs"] == figures["by_stage"]["data"] + figures["by_stage"]["INT8"]
    assert "GPU-hours reserved" in (tmp_path / "results" / "price.md").read_text()
    write_config(tmp_path, systems={"gpu": GPU}, training__systems=["gpu"], training__gpus=[4, 8], budget_gpu_hours=10)
    proc = snakemake(tmp_path, "-n", "training", check=False, env=without_slurm(tmp_path))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "config budget_gpu_hours = 10" in out and "8gpu" in out, out[-3000:]
    assert snakemake(tmp_path, "-n", "price", env=without_slurm(tmp_path)).returncode == 0  # the price itself runs


def test_a_one_framework_sweep_plans_without_the_pipeline_weights(tmp_path):
    write_config(tmp_path, training__frameworks=["tensorflow"])
    proc = snakemake(tmp_path, "-n", "all", env=without_slurm(tmp_path))
    out = proc.stdout + proc.stderr
    assert "inference.models.resnet50 = pipeline left out of the INT8 stage" in out, out[-3000:]
    assert "tensorflow_fp32_1gpu" in out and "pytorch_fp32" not in out and "int8_accuracy" in out


def test_cpu_stages_go_to_the_cpu_partition_without_a_gpu_or_a_whole_node(tmp_path):
    write_config(
        tmp_path,
        systems={"gpu": {**GPU, "partition": "gpu"}},
        training__systems=["gpu"],
        cpu_jobs={"partition": "cpu", "time_min": 360},
    )
    out = snakemake(tmp_path, "-n", "all", env=without_slurm(tmp_path)).stdout
    blocks = {}
    for block in out.split("\n\n"):
        for line in block.splitlines():
            if line.startswith("rule "):
                blocks.setdefault(line[5:].rstrip(":"), []).append(block)
    for rule in ("index_dataset", "tfrecord", "recordio", "lmdb", "int8_calibrate", "int8_throughput_run"):
        for block in blocks[rule]:
            resources = next(ln for ln in block.splitlines() if ln.strip().startswith("resources:"))
            assert "slurm_partition=cpu" in resources and "runtime=360" in resources, (rule, resources)
            assert "--exclusive" not in resources and "gpu" not in resources.replace("slurm_partition", ""), resources


def test_torchvision_weights_are_fetched_by_a_local_rule_before_the_export_job(tmp_path):
    """Compute nodes often have no internet: the download is its own rule, run where snakemake
    runs (localrules), and the export job reads its cache; without a network it says so, naming
    the key and the cache (this machine has none)."""
    write_config(tmp_path, inference__models={"resnet50": "torchvision"})
    out = snakemake(tmp_path, "-n", "-p", "int8", env=without_slurm(tmp_path)).stdout
    assert "localrule int8_weights:" in out or "rule int8_weights:" in out, out[-3000:]
    assert "fetch_weights --network resnet50 --torch-home data/weights/torch" in out
    assert "export --network resnet50 --source torchvision --torch-home data/weights/torch" in out
    proc = snakemake(tmp_path, "data/weights/resnet50.torchvision.json", check=False, env=without_slurm(tmp_path))
    log = (tmp_path / "logs" / "int8" / "resnet50" / "weights.log").read_text()
    assert proc.returncode != 0 and "config inference.models.resnet50 = torchvision" in log, log[-2000:]
    assert "could not be downloaded" in log and "Traceback" not in log
