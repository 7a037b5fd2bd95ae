"""The GPU environments of `bash envs/setup.sh --gpu` (not built by the README's test command: they
take about 20 minutes and 9 GB; run `bash envs/setup.sh --gpu && .venv/bin/pytest -q
tests/test_gpu_envs.py`). Each is a CUDA build whose Horovod has NCCL, and on this GPU-less
machine a GPU system's run with it stops before training because it sees no GPU (not because it
is a CPU build: these are the real GPU builds)."""

import json
import subprocess

import pytest
from helpers import CONFIG, REPO, interpreter, trainer_command

GPU_ENVS = {fw: REPO / CONFIG["envs_gpu"][fw] for fw in ("tensorflow", "mxnet")}


def _built(fw):
    if not GPU_ENVS[fw].exists():
        pytest.skip(f"{GPU_ENVS[fw]} is not built: run 'bash envs/setup.sh --gpu' first")
    return str(GPU_ENVS[fw])


@pytest.mark.unit
@pytest.mark.parametrize("fw", GPU_ENVS)
def test_gpu_environment_is_a_cuda_build_with_horovod_nccl(fw):
    python = _built(fw)
    # setup.sh's own check ran at the end of the build; its record is beside the environment.
    record = json.loads((GPU_ENVS[fw].parent.parent / ".dlscale-gpu-check.json").read_text())
    assert record["required"] == fw and record["problems"] == []
    assert record[f"horovod.{fw}"]["nccl_built"] and record[f"horovod.{fw}"]["cuda_built"]
    assert record["tensorflow"]["is_built_with_cuda"] if fw == "tensorflow" else record["mxnet"]["features"]["CUDA"]
    assert record["python"].endswith(python.split("/.envs/")[1])


@pytest.mark.stage
@pytest.mark.parametrize(
    "fw, cause", [("tensorflow", "sees 0 GPU(s)"), ("mxnet", "a CUDA build of MXNet needs the NVIDIA driver")]
)
def test_gpu_environment_without_a_gpu_stops_before_training(fw, cause, tmp_path):
    python = _built(fw)
    cmd = trainer_command(
        fw,
        python,
        data_source="synthetic",
        batch_per_gpu=2,
        warmup_steps=0,
        steps=1,
        telemetry_interval=None,
        require_gpu=True,
        env_key=f"envs_gpu.{fw}",
        out=tmp_path,
    )
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0 and cause in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "summary.json").exists()


@pytest.mark.stage
@pytest.mark.parametrize("fw", ["pytorch", *GPU_ENVS])
def test_gpu_capable_environment_has_nvml_bindings_for_telemetry(fw):
    """Without nvidia-ml-py a GPU run's telemetry would hold no GPU rows, silently; here, without a
    GPU, NVML itself is what is missing, not its Python bindings."""
    python = interpreter("pytorch") if fw == "pytorch" else _built(fw)
    proc = subprocess.run(
        [python, "-c", "from workflow_scripts.cluster.telemetry import Gpus; print(Gpus().unavailable)"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ModuleNotFoundError" not in proc.stdout and "ImportError" not in proc.stdout, proc.stdout
