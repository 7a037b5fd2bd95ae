"""No silent CPU fallback: a system that requests GPUs never gets a CPU figure. On this GPU-less
machine its training jobs stop before training, naming the interpreter, the config key and the
fix; a missing GPU environment stops the workflow when it is parsed; the tables never put a CPU
run in a GPU system's row."""
import json

import pytest
from conftest import REPO, interpreter, snakemake, write_config

from workflow_scripts.report import runs

GPU_SYSTEM = {"gpu": {"gpus_per_node": 2, "max_nodes": 1, "gpu_request": "gpus-per-node"}}
# What each framework's CPU environment is, seen from a run that needs a GPU per task.
CAUSE = {"tensorflow": "is a CPU build", "mxnet": "is a CPU build",
         "pytorch": "sees 0 GPU(s)"}


def test_missing_gpu_environment_stops_the_workflow_naming_the_key_and_the_setup(tmp_path):
    write_config(tmp_path, systems=GPU_SYSTEM, training__systems=["gpu"],
                 envs_gpu={"tensorflow": str(tmp_path / "no-env" / "bin" / "python")})
    proc = snakemake(tmp_path, "-n", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "config envs_gpu.tensorflow" in out and "bash envs/setup.sh --gpu" in out


def test_gpu_system_with_cpu_frameworks_fails_before_training_with_the_named_cause(tmp_path):
    # A user who points the GPU environments at the CPU builds, on a node without a GPU.
    cpu_envs = {fw: interpreter(fw) for fw in CAUSE}
    write_config(tmp_path, systems=GPU_SYSTEM, training__systems=["gpu"], training__gpus=[2],
                 training__inputs=["synthetic"], training__retries=0, envs_gpu=cpu_envs,
                 # the trainers' own guard, behind preflight's (tests/test_preflight.py)
                 preflight__gate=False,
                 # the interconnect stage of a GPU system stops too without a GPU; scaling then has no
                 # all-reduce to read, and the tables do not wait for it
                 interconnect__collectives=["broadcast"])
    snakemake(tmp_path, "training_tables")
    for fw, cause in CAUSE.items():
        run = tmp_path / "results" / "runs" / "gpu" / f"{fw}_fp32_2gpu_synthetic"
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "failed", summary
        assert cause in summary["reason"] and f"config envs_gpu.{fw}" in summary["reason"], summary["reason"]
        steps = run / "steps.jsonl"
        assert not steps.exists() or steps.read_text() == "", "training started"
        log = (tmp_path / "logs" / "train" / "gpu" / f"{fw}_fp32_2gpu_synthetic.log").read_text()
        assert "envs/setup.sh --gpu" in log or "gpu_request" in log
    table = (tmp_path / "results" / "training_throughput.csv").read_text()
    assert table.count(",failed,") == 3


@pytest.mark.parametrize("framework", ["tensorflow", "pytorch"])
def test_tables_refuse_a_cpu_run_in_a_gpu_systems_row(pipeline_run, framework):
    run_dir = pipeline_run / "results" / "runs" / "local" / f"{framework}_fp32_2gpu"
    point = {"system": "local", "framework": framework, "precision": "fp32", "gpus": 2, "nodes": 1,
             "run_dir": str(run_dir)}
    assert runs.record({**point, "gpu_request": "none"})["status"] == "ok"
    row = runs.record({**point, "gpu_request": "gres"})
    assert row["status"] == "invalid" and "requests GPUs: not a GPU figure" in row["why"]


def test_a_container_interpreter_starts_every_task_of_a_gpu_run(tmp_path):
    """envs_gpu may name a container: the run's ranks start as `<runtime> exec ... <image> python3`
    inside srun (shown by the dry run's command; no container runtime installs from Debian 12 here,
    so none is run). The page cache is still cleared on the host, by the workflow's interpreter."""
    image = tmp_path / "dlscale-gpu.sif"
    image.write_bytes(b"not a real image: the dry run only checks that it exists")
    write_config(tmp_path, systems=GPU_SYSTEM, training__systems=["gpu"], training__frameworks=["mxnet"],
                 training__gpus=[2], inference__models={"resnet50": "torchvision"},
                 envs_gpu={"mxnet": {"container": str(image), "bind": ["/scratch/imagenet"]}})
    out = snakemake(tmp_path, "-n", "-p", "training").stdout
    words = ("apptainer exec --nv --bind={repo} --bind=/scratch/imagenet --env=PYTHONPATH={repo} {image} python3"
             .format(repo=REPO, image=image))
    assert f"--python='{words}'" in out and "--horovod -- workflow_scripts.train.mxnet_horovod" in out
    (image).unlink()
    proc = snakemake(tmp_path, "-n", check=False)
    assert proc.returncode != 0 and f"config envs_gpu.mxnet: container image {image} does not exist" in proc.stdout + proc.stderr
