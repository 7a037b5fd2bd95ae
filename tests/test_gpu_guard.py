"""No silent CPU fallback: a system that requests GPUs never gets a CPU figure. On this GPU-less
machine its training jobs stop before training, naming the interpreter, the config key and the
fix; a missing GPU environment stops the workflow when it is parsed; the tables never put a CPU
run in a GPU system's row."""

import json
import os
import re
import shlex
import subprocess
import sys

import pytest
from helpers import REPO, TRAINERS, interpreter, snakemake, write_config

from workflow_scripts.cluster import interpreter as interpreter_words
from workflow_scripts.results import runs

GPU_SYSTEM = {"gpu": {"gpus_per_node": 2, "max_nodes": 1, "gpu_request": "gpus-per-node", "cpus_per_task": 1}}
# What each framework's CPU environment is, seen from a run that needs a GPU per task.
CAUSE = {"tensorflow": "is a CPU build", "mxnet": "is a CPU build", "pytorch": "sees 0 GPU(s)"}


@pytest.mark.stage
def test_missing_gpu_environment_stops_the_workflow_naming_the_key_and_the_setup(tmp_path):
    write_config(
        tmp_path,
        systems=GPU_SYSTEM,
        training__systems=["gpu"],
        envs_gpu={"tensorflow": str(tmp_path / "no-env" / "bin" / "python")},
    )
    # A run, not a dry run: that plans on without it (tests/test_unbuilt_envs.py).
    proc = snakemake(tmp_path, "all", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "config envs_gpu.tensorflow" in out and "bash envs/setup.sh --gpu" in out
    assert not (tmp_path / "logs").exists()  # stopped while parsed: no job ran


@pytest.mark.pipeline
def test_gpu_system_with_cpu_frameworks_fails_before_training_with_the_named_cause(tmp_path):
    # A user who points the GPU environments at the CPU builds, on a node without a GPU.
    cpu_envs = {fw: interpreter(fw) for fw in CAUSE}
    write_config(
        tmp_path,
        systems=GPU_SYSTEM,
        training__systems=["gpu"],
        training__gpus=[2],
        training__inputs=["synthetic"],
        training__retries=0,
        training__repeats=1,  # one failed run per framework says it (auto: 3 on a GPU system)
        envs_gpu=cpu_envs,
        # the trainers' own guard, behind preflight's (tests/test_preflight.py)
        preflight__gate=False,
        # the interconnect stage of a GPU system stops too without a GPU; scaling then has no
        # all-reduce to read, and the tables do not wait for it
        interconnect__collectives=["broadcast"],
    )
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


@pytest.mark.pipeline
@pytest.mark.parametrize("framework", ["tensorflow", "pytorch"])
def test_tables_refuse_a_cpu_run_in_a_gpu_systems_row(pipeline_run, framework):
    run_dir = pipeline_run / "results" / "runs" / "local" / f"{framework}_fp32_2gpu"
    point = {
        "system": "local",
        "framework": framework,
        "precision": "fp32",
        "gpus": 2,
        "nodes": 1,
        "run_dir": str(run_dir),
    }
    assert runs.record({**point, "gpu_request": "none"})["status"] == "ok"
    row = runs.record({**point, "gpu_request": "gres"})
    assert row["status"] == "invalid" and "requests GPUs: not a GPU figure" in row["why"]


@pytest.mark.stage
def test_a_container_interpreter_starts_every_task_of_a_gpu_run(tmp_path):
    """envs_gpu may name a container: the run's ranks start as `<runtime> exec ... <image> python3`
    inside srun (shown by the dry run's command; no container runtime installs from Debian 12 here,
    so none is run). The page cache is still cleared on the host, by the workflow's interpreter."""
    image = tmp_path / "dlscale-gpu.sif"
    image.write_bytes(b"not a real image: the dry run only checks that it exists")
    write_config(
        tmp_path,
        systems=GPU_SYSTEM,
        training__systems=["gpu"],
        training__frameworks=["mxnet"],
        training__gpus=[2],
        inference__models={"resnet50": "torchvision"},
        envs_gpu={"mxnet": {"container": str(image), "bind": ["/scratch/imagenet"]}},
    )
    out = snakemake(tmp_path, "-n", "-p", "training").stdout
    nvml = [f"--bind={f}:{interpreter_words.SITE}/pynvml.py" for f in interpreter_words.pure_modules()]
    path = f"{REPO}:{interpreter_words.SITE}" if nvml else str(REPO)
    words = " ".join(
        ["apptainer exec --nv", f"--bind={REPO}", "--bind=/scratch/imagenet", *nvml, f"--env=PYTHONPATH={path}"]
        + [f"{image} python3"]
    )
    assert f"--python='{words}'" in out and "--horovod -- workflow_scripts.train.mxnet_horovod" in out
    (image).unlink()
    proc = snakemake(tmp_path, "-n", check=False)
    assert (
        proc.returncode != 0
        and f"config envs_gpu.mxnet: container image {image} does not exist" in proc.stdout + proc.stderr
    )


# Messages the frameworks print when their build holds no code this GPU can run, as reported in
# their issue trackers (apache/mxnet#16527, #20469, #6846; tensorflow/tensorflow#60530;
# pytorch/pytorch#90761-style runs; TensorFlow's kernel_gen wrappers on a too-old driver).
ARCH_FAILURES = {
    "mxnet": "MXNetError: [11:41:41] src/operator/contrib/./.././../common/../operator/mxnet_op.h:794: Check "
    "failed: err == cudaSuccess (48 vs. 0) : Name: mxnet_generic_kernel ErrStr:no kernel image is "
    "available for execution on the device",
    "mxnet_random": "Check failed: err == cudaSuccess (209 vs. 0) : rand_generator_seed_kernel ErrStr:no kernel "
    "image is available for execution on the device",
    "mxnet_old": "Check failed: err == cudaSuccess (8 vs. 0) Name: MapPlanKernel ErrStr:invalid device function",
    "tensorflow": "InternalError: Failed to load in-memory CUBIN: CUDA_ERROR_NO_BINARY_FOR_GPU: no kernel image is "
    "available for execution on the device [Op:Relu]",
    "tensorflow_ptx": "W tensorflow/compiler/mlir/tools/kernel_gen/tf_gpu_runtime_wrappers.cc:40] "
    "'cuModuleLoadData(&module, data)' failed with 'CUDA_ERROR_UNSUPPORTED_PTX_VERSION'",
    "pytorch": "RuntimeError: CUDA error: no kernel image is available for execution on the device\nCUDA kernel "
    "errors might be asynchronously reported at some other API call",
    "pytorch_ptx": "RuntimeError: CUDA error: the provided PTX was compiled with an unsupported toolchain.",
}
# Failures another attempt may not meet: they must stay retried.
OTHER_FAILURES = [
    "RuntimeError: CUDA error: out of memory",
    "CUDA_ERROR_OUT_OF_MEMORY: out of memory",
    "NCCL error in: ProcessGroupNCCL.cpp:1333, unhandled system error",
    "horovod.common.exceptions.HorovodInternalError: ncclAllReduce failed",
    "error: run directory x does not lie inside results_dir y: not deleting it",
]


@pytest.mark.unit
@pytest.mark.parametrize("name", sorted(ARCH_FAILURES))
def test_framework_messages_of_a_gpu_without_code_are_named_and_permanent(name):
    from workflow_scripts.cluster import kernel_check
    from workflow_scripts.train import failure

    cause = kernel_check.classify(ARCH_FAILURES[name])
    assert cause is not None, ARCH_FAILURES[name]
    expected = "PTX cannot be JIT-compiled" if name.endswith("_ptx") else "no kernel image for this GPU"
    assert cause[0].startswith(expected)
    assert failure.permanent(f"0: some output\n0: {ARCH_FAILURES[name]}\n1: more") is not None


@pytest.mark.unit
@pytest.mark.parametrize("text", OTHER_FAILURES)
def test_other_failures_stay_retryable(text):
    from workflow_scripts.cluster import kernel_check
    from workflow_scripts.train import failure

    assert kernel_check.classify(text) is None and failure.permanent(text) is None


@pytest.mark.unit
def test_first_kernel_failure_names_the_gpu_the_build_and_the_container():
    from workflow_scripts.cluster import kernel_check
    from workflow_scripts.common.errors import PERMANENT_TAG, PermanentError

    def kernel():
        raise RuntimeError(ARCH_FAILURES["mxnet"])

    with pytest.raises(PermanentError) as err:
        kernel_check.first_kernel(
            kernel,
            "MXNet",
            ("NVIDIA H100 80GB HBM3", (9, 0)),
            "MXNet 1.9.1 (mxnet-cu117, CUDA 11.7)",
            "envs_gpu.mxnet",
            host="gpu07",
        )
    msg = str(err.value)
    for part in (
        PERMANENT_TAG,
        "NVIDIA H100 80GB HBM3 (sm_90) on gpu07",
        "no kernel image for this GPU",
        "MXNet 1.9.1 (mxnet-cu117, CUDA 11.7)",
        "config envs_gpu.mxnet",
        "nvcr.io/nvidia/mxnet:24.04-py3",
        "mxnet_generic_kernel ErrStr:no kernel image",
    ):
        assert part in msg, (part, msg)
    # any other failure is the framework's own, raised as it is
    with pytest.raises(ValueError):
        kernel_check.first_kernel(lambda: int("x"), "MXNet", ("GPU 0", None), "b", "")
    assert kernel_check.first_kernel(lambda: None, "PyTorch", ("GPU 0", None), "b", "") >= 0


# A stand-in trainer for job.py's retry decision: the real first_kernel and run_main of the
# trainers, given the kernel failure MXNet 1.9.1 meets on an H100.
STAND_IN = (
    "import sys; from workflow_scripts.common import errors; from workflow_scripts.cluster import kernel_check\n"
    "def kernel(): raise RuntimeError(sys.argv[1])\n"
    "errors.run_main(lambda: kernel_check.first_kernel(kernel, 'MXNet', ('NVIDIA H100 80GB HBM3', (9, 0)), "
    "'MXNet 1.9.1 (mxnet-cu117, CUDA 11.7)', 'envs_gpu.mxnet'))"
)


def run_job(tmp_path, message, attempt=1, retries=2, code=STAND_IN):
    run, log = tmp_path / "results" / "runs" / "gpu" / "mxnet_fp32_1gpu", tmp_path / "logs" / "mxnet.log"
    python = shlex.join([sys.executable, "-c", code, message])
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "workflow_scripts.train.training_job",
            "--run-dir",
            str(run),
            "--results-dir",
            str(tmp_path / "results"),
            "--log",
            str(log),
            f"--attempt={attempt}",
            "--cache-clear-command=true",  # not the host's page cache: not what is tested
            f"--cuda-cache-dir={tmp_path / 'cuda-jit'}",
            f"--retries={retries}",
            f"--python={python}",
            "--nproc-per-node=1",
            "--",
            TRAINERS["mxnet"],
        ],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    summary = run / "summary.json"
    return proc, (json.loads(summary.read_text()) if summary.exists() else None), log


@pytest.mark.stage
def test_a_build_without_code_for_the_gpu_is_recorded_at_once_not_retried(tmp_path):
    proc, summary, log = run_job(tmp_path, ARCH_FAILURES["mxnet"])
    # exit 0 with a result: Snakemake (retries: training.retries) does not resubmit the job
    assert proc.returncode == 0, (proc.stdout, proc.stderr, log.read_text())
    assert summary["status"] == "failed" and summary["permanent"] is True and summary["attempts"] == 1, summary
    for part in ("NVIDIA H100 80GB HBM3 (sm_90)", "mxnet-cu117, CUDA 11.7", "nvcr.io/nvidia/mxnet:24.04-py3"):
        assert part in summary["reason"], summary["reason"]
    assert "not retried (training.retries 2)" in log.read_text()


@pytest.mark.stage
def test_a_cuda_abort_without_the_guards_message_is_permanent_too(tmp_path):
    # a kernel that fails later than the check, in MXNet's engine, which aborts the process
    code = "import os, sys; print(sys.argv[1], file=sys.stderr, flush=True); os.abort()"
    proc, summary, _ = run_job(tmp_path, ARCH_FAILURES["mxnet_random"], code=code)
    assert proc.returncode == 0 and summary["permanent"] is True and "209 vs. 0" in summary["reason"], summary


@pytest.mark.stage
def test_other_failures_are_still_retried(tmp_path):
    proc, summary, _ = run_job(tmp_path, OTHER_FAILURES[0])
    assert proc.returncode != 0 and summary is None
    proc, summary, _ = run_job(tmp_path, OTHER_FAILURES[0], attempt=3, retries=2)  # the last attempt
    assert proc.returncode == 0 and summary["permanent"] is False and "out of memory" in summary["reason"]


@pytest.mark.stage
def test_a_local_runs_measuring_jobs_run_one_at_a_time(tmp_path):
    """Run locally, every job that measures, training, interconnect and preflight, takes all of
    snakemake's cores whatever its system, so no two run side by side: a CPU system's runs too (two
    1-process runs on the embedded default's two cores once measured each other)."""
    cpu_envs = {fw: interpreter(fw) for fw in CAUSE}
    write_config(
        tmp_path,
        systems={**GPU_SYSTEM, "local": {"gpus_per_node": 2, "max_nodes": 1}},
        training__systems=["gpu", "local"],
        training__gpus=[1, 2],
        envs_gpu=cpu_envs,
    )
    out = snakemake(tmp_path, "--cores", "5", "-n", "training", "interconnect", "preflight").stdout
    jobs = [
        j
        for j in out.split("\n\n")
        if re.search(r"^(local)?rule (train|interconnect_collectives|preflight_check)\b", j.strip(), re.M)
    ]
    threads = {}
    for job in jobs:
        system = re.search(r"system=(\w+)", job).group(1)
        gpus = int(re.search(r"gpus=(\d+)", job).group(1))
        found = re.search(r"^\s*threads: (\d+)", job, re.M)
        threads.setdefault(system, set()).add((gpus, int(found.group(1)) if found else 1))
    assert {t for _, t in threads["gpu"]} == {5}, threads
    assert {t for _, t in threads["local"]} == {5}, threads


@pytest.mark.unit
def test_a_stock_container_gets_nvidia_ml_py_bound_in():
    """nvidia-ml-py is one pure-Python module: bound from the host and put on the container's path,
    a stock NGC image records its GPUs' state and neighbours without being rebuilt."""
    c = {"container": "/shared/tf.sif", "bind": ["/scratch"]}
    w = interpreter_words.words(c, "/repo", extras=["/repo/.venv/lib/python3.11/site-packages/pynvml.py"])
    assert "--bind=/repo/.venv/lib/python3.11/site-packages/pynvml.py:/opt/dlscale-site/pynvml.py" in w
    assert "--env=PYTHONPATH=/repo:/opt/dlscale-site" in w and w[-2:] == ["/shared/tf.sif", "python3"]
    assert "--env=PYTHONPATH=/repo" in interpreter_words.words(c, "/repo", extras=[])
