"""Planning before the GPU environments are built: on docs/slurm.md's 8 x 8 H100 cluster (faked only
in its commands, helpers/dry_run.py), a system that runs TensorFlow and MXNet from envs_gpu, whose
interpreters `bash envs/setup.sh --gpu` has not made yet. The dry run and `snakemake price` plan the
whole sweep and name both in one line with the command that builds them; a run refuses them when
the workflow is parsed, naming both, before any job."""

import json
import subprocess

import pytest
import yaml
from helpers import REPO, SNAKEMAKE, interpreter
from helpers.dry_run import cluster, snakemake_slurm, submitted

pytestmark = pytest.mark.stage


@pytest.fixture(scope="module")
def unbuilt(tmp_path_factory):
    """The working directory and environment of the H100 sweep on envs_gpu, and {key: interpreter}
    of the two not built (a folder of this directory: whatever this checkout's .envs holds)."""
    work = tmp_path_factory.mktemp("unbuilt")
    env = cluster(work, "h100")
    config = yaml.safe_load((work / "cluster.yaml").read_text())
    del config["systems"]["h100"]["envs"]
    missing = {fw: str(work / "gpu-envs" / f"{fw}-gpu" / "bin" / "python") for fw in ("tensorflow", "mxnet")}
    config["envs_gpu"] = {**missing, "pytorch": interpreter("pytorch")}
    (work / "cluster.yaml").write_text(yaml.safe_dump(config))
    return work, env, {f"envs_gpu.{fw}": path for fw, path in missing.items()}


def to_build(said):
    return [line for line in said.splitlines() if "environments still to build" in line]


def test_a_dry_run_plans_the_sweep_and_names_what_is_still_to_build(unbuilt):
    work, env, missing = unbuilt
    said = snakemake_slurm(work, env, "-n", "all")
    (line,) = to_build(said)
    assert all(f"{key} ({path})" in line for key, path in missing.items()), line
    assert "'bash envs/setup.sh --gpu'" in line and "DLSCALE_ENVS_DIR" in line
    commands = [job["shell"] for group in submitted(said) for job in group if job["rule"] == "train"]
    for path in missing.values():
        assert any(path in c for c in commands), path


def test_the_price_is_written_before_the_gpu_environments_are_built(unbuilt):
    work, env, missing = unbuilt
    said = snakemake_slurm(work, env, "price")
    (line,) = to_build(said)
    assert all(key in line for key in missing)
    jobs = json.loads((work / "results" / "price.json").read_text())["jobs"]
    trained = {j["name"].split("/")[1].split("_")[0] for j in jobs if j["stage"] == "training"}
    assert {"tensorflow", "mxnet"} <= trained, trained


def test_a_run_refuses_them_when_parsed_naming_each(unbuilt):
    work, env, missing = unbuilt
    configs = [str(REPO / "config.yaml"), str(REPO / "presets" / "study.yaml"), str(work / "cluster.yaml")]
    proc = subprocess.run(
        [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(work), "all"]
        + ["--profile", str(REPO / "profiles" / "slurm"), "--configfile", *configs],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    for key, path in missing.items():
        assert f"config {key}: {path} does not exist" in out, out[-3000:]
    assert "run 'bash envs/setup.sh --gpu'" in out and not to_build(out)
    assert "Submitted" not in out and not (work / ".snakemake" / "slurm_logs").exists()
