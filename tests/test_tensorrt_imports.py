"""No INT8 GPU job is submitted that cannot import its engine (issue 62, item 3): with
inference.engine: tensorrt the route interpreter of inference.system is asked, when the workflow is
parsed, whether tensorrt (>= 10) and pycuda import (plan/tensorrt_check.py, int8/engine_imports.py).
TensorRT cannot be installed here, so the interpreters asked are stand-ins (helpers/stand_in.py)
with and without a `tensorrt` module: what is tested is the check, never TensorRT."""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from helpers import REPO
from helpers.dry_run import cluster, resource, snakemake_slurm, submitted
from helpers.stand_in import route

from workflow_scripts.int8 import engine_imports
from workflow_scripts.plan import tensorrt_check
from workflow_scripts.plan.sweep import ConfigProblem

KEY = "systems.a100.envs.pytorch"


def check(python, value=None):
    return tensorrt_check.check("tensorrt", KEY, value or python, [python], REPO)


@pytest.mark.stage
def test_a_route_that_imports_tensorrt_10_and_pycuda_passes(tmp_path):
    assert check(route(tmp_path / "trt", torch_cuda="12.6")) is None


@pytest.mark.stage
def test_a_cuda_12_route_without_tensorrt_is_refused_naming_the_key_and_the_cuda_12_install(tmp_path):
    python = route(tmp_path / "torch-cu126", tensorrt=None, torch_cuda="12.6")
    with pytest.raises(ConfigProblem) as e:
        check(python, ".envs/torch-cu126/bin/python")
    said = str(e.value)
    assert said.startswith(f"config {KEY} = '.envs/torch-cu126/bin/python'") and python in said, said
    assert "tensorrt does not import" in said and "pycuda" not in said.split(";")[0], said
    assert "bash envs/tensorrt.sh .envs/torch-cu126/bin/python" in said and "tensorrt-cu12" in said, said
    assert "tensorrt-cu13" not in said and "R525" in said, said


@pytest.mark.stage
def test_a_cuda_13_route_is_told_the_cuda_13_build(tmp_path):
    with pytest.raises(ConfigProblem, match=r"CUDA 13\.0.*R580 or newer.*tensorrt-cu13 and pycuda"):
        check(route(tmp_path / "torch", tensorrt=None, torch_cuda="13.0"))


@pytest.mark.stage
def test_tensorrt_older_than_10_and_a_missing_pycuda_are_refused(tmp_path):
    with pytest.raises(ConfigProblem, match=r"tensorrt is 8\.6\.1, the engine needs >= 10"):
        check(route(tmp_path / "old", tensorrt="8.6.1", torch_cuda="12.6"))
    with pytest.raises(ConfigProblem, match=r"pycuda does not import"):
        check(route(tmp_path / "nocuda", pycuda=False, torch_cuda="12.6"))


@pytest.mark.unit
def test_onnx_runtime_and_a_container_are_not_asked_here(tmp_path):
    missing = str(tmp_path / "nowhere" / "python")
    assert tensorrt_check.check("onnxruntime", KEY, missing, [missing], REPO) is None
    assert tensorrt_check.check("tensorrt", KEY, {"container": "x.sif"}, ["apptainer", "exec"], REPO) is None


@pytest.mark.stage
def test_an_interpreter_that_does_not_run_is_refused_naming_the_key(tmp_path):
    missing = str(tmp_path / "nowhere" / "python")
    with pytest.raises(ConfigProblem, match=rf"config {KEY} = .*does not run here"):
        check(missing)


@pytest.mark.stage
def test_the_faked_a100_r535_cluster_submits_nothing_when_its_route_lacks_tensorrt(tmp_path):
    """A run stops when the workflow is parsed, before any job is submitted, naming the route and
    the install that fits its driver; a dry run (a plan, as `snakemake price`) names the same and
    plans on, as it does for environments still to build (plan/unbuilt_envs.py)."""
    env = cluster(tmp_path, "a100_r535", tensorrt=None)
    code, planned = snakemake_slurm(tmp_path, env, "-n", "all", check=False)
    assert code == 0 and "tensorrt does not import" in planned and "the plan goes on" in planned, planned[-2000:]
    code, said = snakemake_slurm(tmp_path, env, "all", check=False)
    assert code != 0 and not submitted(said), said[-2000:]
    assert "config systems.a100_r535.envs.pytorch" in said and "tensorrt does not import" in said, said[-2000:]
    assert "bash envs/tensorrt.sh" in said and "tensorrt-cu12" in said and "tensorrt-cu13" not in said, said[-2000:]
    assert str(tmp_path / ".envs" / "torch-cu126" / "bin" / "python") in said, said[-2000:]


def installer(*args, path="/usr/bin:/bin"):
    """envs/tensorrt.sh run with `args` on a PATH of the system's tools only (no nvcc)."""
    return subprocess.run(
        ["bash", str(REPO / "envs" / "tensorrt.sh"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": path, "HOME": os.environ.get("HOME", "/root")},
    )


@pytest.mark.stage
def test_the_installer_picks_tensorrts_build_by_the_routes_cuda_and_says_what_it_lacks(tmp_path):
    cu12 = route(tmp_path / "torch-cu126", tensorrt=None, torch_cuda="12.6")
    proc = installer(cu12)  # no CUDA toolkit here: pycuda could not build, so nothing is installed
    assert proc.returncode == 1 and "pycuda is built against the CUDA toolkit" in proc.stderr, proc.stderr
    assert "module load cuda/12" in proc.stderr, proc.stderr
    cu13 = route(tmp_path / "torch", tensorrt=None, torch_cuda="13.0")
    proc = installer(cu13, "--volta")
    assert proc.returncode == 1 and "--volta" in proc.stderr and "CUDA 12 builds" in proc.stderr, proc.stderr
    cpu = route(tmp_path / "cpu", tensorrt=None)
    torch = Path(cpu).parents[1] / "stand-in" / "torch"  # a CPU build's version file
    torch.mkdir(parents=True)
    (torch / "__init__.py").write_text("")
    (torch / "version.py").write_text("cuda = None\n")
    proc = installer(cpu)
    assert proc.returncode == 1 and "no CUDA build" in proc.stderr, proc.stderr
    proc = installer(str(tmp_path / "nowhere" / "python"))
    assert proc.returncode == 1 and "no such interpreter" in proc.stderr, proc.stderr
    # each build's requirements pin TensorRT's build of that CUDA, beside pycuda
    for cuda in ("12", "13"):
        pins = (REPO / "envs" / f"tensorrt-cu{cuda}.txt").read_text()
        assert f"tensorrt-cu{cuda}==" in pins and "pycuda==" in pins, cuda


@pytest.mark.stage
def test_the_node_check_writes_its_gate_only_where_the_route_imports_both(tmp_path):
    """int8_engine_check's command (a container's python on a node), with stand-ins for the python."""
    out = tmp_path / "gate.json"
    bad = route(tmp_path / "bad", tensorrt=None, torch_cuda="12.6")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = ["-m", "workflow_scripts.int8.engine_imports", "--require", "--key", KEY, "--out", str(out)]
    proc = subprocess.run([bad, *args], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 1 and not out.exists(), proc.stderr
    assert proc.stderr.startswith(f"config {KEY} = {bad}") and "tensorrt does not import" in proc.stderr, proc.stderr
    assert "tensorrt-cu12" in proc.stderr, proc.stderr
    good = route(tmp_path / "good", torch_cuda="12.6")
    proc = subprocess.run([good, *args], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0 and json.loads(out.read_text())["tensorrt"] == "10.3.0", proc.stderr


@pytest.mark.unit
def test_a_cuda_13_route_on_an_older_driver_is_told_the_cuda_12_route(tmp_path):
    said = engine_imports.fix(".envs/torch/bin/python", "13.0", 535)
    assert "R535" in said and ".envs/torch-cu126/bin/python" in said and "tensorrt-cu13" not in said, said
    assert "tensorrt-cu13" in engine_imports.fix(".envs/torch/bin/python", "13.0", 580)
    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n")
    assert engine_imports.driver(version) == 535
    version.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build\n")
    assert engine_imports.driver(version) == 580
    assert engine_imports.driver(tmp_path / "none") is None


@pytest.mark.stage
def test_a_container_route_is_checked_on_a_node_before_any_engine_job(tmp_path):
    image = tmp_path / "pytorch.sif"
    image.write_bytes(b"")
    env = cluster(tmp_path, "a100_r535", pytorch={"container": str(image)})
    said = snakemake_slurm(tmp_path, env, "-n", "all")
    jobs = [j for g in submitted(said) for j in g]
    (check,) = [j for j in jobs if j["rule"] == "int8_engine_check"]
    assert check["outputs"] == ["results/preflight/int8/a100_r535.engine.json"], check
    assert resource(check, "gres") == "gpu:a100:1" and resource(check, "runtime") == "10", check["resources"]
    assert check["shell"].startswith("apptainer exec") and "engine_imports --require" in check["shell"], check
    assert "--key systems.a100_r535.envs.pytorch" in check["shell"], check["shell"]
    # every engine build waits for it
    builds = re.findall(r"rule int8_engine:\n\s+input: ([^\n]*)", said)
    assert len(builds) == 14 and all("results/preflight/int8/a100_r535.engine.json" in b for b in builds), builds[:2]
    # and priced, as a GPU job of minutes
    snakemake_slurm(tmp_path, env, "price", "--slurm-init-seconds-before-status-checks", "1")
    priced = json.loads((tmp_path / "results" / "price.json").read_text())["jobs"]
    (job,) = [p for p in priced if p["rule"] == "int8_engine_check"]
    assert (job["gpu_job"], job["time_min"], job["outputs"]) == (True, 10, check["outputs"]), job


@pytest.mark.unit
def test_a_route_not_built_yet_is_left_to_the_unbuilt_environments_line(tmp_path):
    from workflow_scripts.plan.unbuilt_envs import Unbuilt

    missing = str(tmp_path / ".envs" / "torch-cu126" / "bin" / "python")
    unbuilt = Unbuilt(planning=True)
    unbuilt.note(KEY, missing, "does not exist", "bash envs/setup.sh --gpu")
    assert tensorrt_check.check("tensorrt", KEY, missing, [missing], REPO, unbuilt=unbuilt) is None


@pytest.mark.stage
def test_a_dry_run_before_the_route_is_built_plans_and_names_it(tmp_path):
    route_python = tmp_path / "scratch-envs" / "torch-cu126" / "bin" / "python"  # not built yet
    env = cluster(tmp_path, "a100_r535", pytorch=str(route_python))
    said = snakemake_slurm(tmp_path, env, "-n", "all")
    assert any(j["rule"] == "int8_engine" for g in submitted(said) for j in g), said[-2000:]
    assert "systems.a100_r535.envs.pytorch" in said and "bash envs/setup.sh --gpu" in said, said[-2000:]
    assert "tensorrt does not import" not in said and "does not run here" not in said, said[-2000:]
