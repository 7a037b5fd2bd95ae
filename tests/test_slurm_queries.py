"""What the pipeline asks SLURM's commands (workflow_scripts/cluster/slurm.py), against fake `sinfo`
and `squeue` on PATH that answer as a cluster would, or fail as they do when the controller cannot
be reached: the GRES types of a partition checked against systems.<name>.gpu_type when the workflow
is parsed, and `pending`'s answer without a controller. The real commands on a real cluster:
tests/test_slurm.py."""

import os
import subprocess
import sys

import pytest
from helpers import REPO, SNAKEMAKE, interpreter, write_config

from workflow_scripts.cluster import slurm

pytestmark = pytest.mark.stage

# sinfo -h -N -p gpu -o '%N|%c|%m|%G|%T' on a partition of two 4 x V100 nodes (sockets in the GRES).
SINFO_V100 = "g1|80|180000|gpu:v100:4(S:0-1)|idle\ng2|80|180000|gpu:v100:4(S:0-1)|mixed\n"
UNREACHABLE = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"


def fake_command(folder, name, stdout="", stderr="", rc=0, partition="gpu"):
    """A `name` in `folder` that prints `stdout` for `-p <partition>` (nothing for another), `stderr`,
    and exits `rc`."""
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.out").write_text(stdout)
    (folder / f"{name}.err").write_text(stderr)
    script = folder / name
    script.write_text(
        "#!/bin/sh\n"
        f'cat "{folder}/{name}.err" >&2\n'
        f'case " $* " in *" -p {partition} "*|*" -u "*) cat "{folder}/{name}.out" ;; esac\n'
        f"exit {rc}\n"
    )
    script.chmod(0o755)
    return folder


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    """PATH with tmp_path/bin first, and sinfo's answers not cached from another test."""
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    slurm.partition_nodes.cache_clear()
    yield tmp_path / "bin"
    slurm.partition_nodes.cache_clear()


def test_a_gpu_type_the_partition_does_not_list_is_named_with_the_types_it_does(on_path):
    fake_command(on_path, "sinfo", SINFO_V100)
    assert slurm.gpu_type_problem("gpu", "v100") is None
    assert slurm.gpu_type_problem("gpu", "V100") is None
    problem = slurm.gpu_type_problem("gpu", "a100")
    assert "partition 'gpu'" in problem and "'a100'" in problem and problem.endswith("are: v100"), problem
    # an unknown partition is placement_problem's to name; no gpu_type asks for any GPU
    assert slurm.gpu_type_problem("other", "a100") is None and slurm.gpu_type_problem("gpu", "") is None
    assert "does not exist" in slurm.placement_problem("other", 1, 4, 20, 4, 0)


def test_untyped_gres_lists_no_type(on_path):
    fake_command(on_path, "sinfo", "g1|80|180000|gpu:4|idle\n")
    problem = slurm.gpu_type_problem("gpu", "v100")
    assert problem and "are: none (GRES: gpu:4)" in problem, problem


def test_without_a_controller_or_sinfo_nothing_is_checked(on_path, monkeypatch):
    fake_command(on_path, "sinfo", stderr="slurm_load_partitions: Unable to contact slurm controller", rc=1)
    assert slurm.gpu_type_problem("gpu", "a100") is None
    slurm.partition_nodes.cache_clear()
    monkeypatch.setenv("PATH", str(on_path / "none"))  # a laptop: no sinfo at all
    assert slurm.gpu_type_problem("gpu", "a100") is None


def parse(work, bin_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    proc = subprocess.run(
        [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(work), "-n", "--quiet", "rules"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_a_wrong_gpu_type_stops_the_workflow_at_parse_time(tmp_path):
    bin_dir = fake_command(tmp_path / "bin", "sinfo", SINFO_V100)
    system = {
        "gpus_per_node": 4,
        "max_nodes": 2,
        "gpu_request": "gpus-per-node",
        "gpu_type": "a100",
        "partition": "gpu",
        "cpus_per_task": 20,
        # interpreters that exist here, so that nothing but the GPU type can stop the parse
        "envs": {fw: interpreter(fw) for fw in ("tensorflow", "mxnet", "pytorch")},
    }
    write_config(tmp_path, systems={"sxm2": system}, training__systems=["sxm2"], training__gpus=[4])
    rc, out = parse(tmp_path, bin_dir)
    assert rc != 0 and "config systems.sxm2.gpu_type = 'a100'" in out, out[-3000:]
    assert "partition 'gpu'" in out and "are: v100" in out and "Fix: set systems.sxm2.gpu_type" in out, out[-3000:]


def test_pending_without_a_controller_prints_squeues_own_words(tmp_path):
    bin_dir = fake_command(tmp_path / "bin", "squeue", stderr=UNREACHABLE + "\n", rc=1)
    proc = subprocess.run(
        [sys.executable, "-m", "workflow_scripts.cluster.slurm", "pending"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and proc.stderr.strip() == f"squeue failed: {UNREACHABLE}", proc.stderr
