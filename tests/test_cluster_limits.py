"""A shared cluster's limits read when the workflow is parsed (workflow_scripts/cluster/slurm.py,
plan/cluster_checks.py), against a fake `sinfo` that answers as a partition of two 4-GPU nodes
with a 12-hour MaxTime would: a time limit over MaxTime refused naming the key, and a drained
node that leaves the 2-node point waiting (or skipped) while preflight and the 1-node points plan."""

import os
import re
import subprocess

import pytest
from helpers import REPO, SNAKEMAKE, interpreter, write_config

from workflow_scripts.cluster import slurm

pytestmark = pytest.mark.stage


def fake_sinfo(folder, states=("idle", "idle"), max_time="12:00:00"):
    """sinfo for partition gpu: its nodes (-N ... %N|%c|%m|%G|%T) or its time limit (%l)."""
    folder.mkdir(exist_ok=True)
    nodes = "".join(f"g{i}|80|180000|gpu:h100:4|{s}\\n" for i, s in enumerate(states, 1))
    script = folder / "sinfo"
    script.write_text(
        "#!/bin/sh\n"
        'case " $* " in *" -p gpu "*) ;; *) exit 0 ;; esac\n'
        f'case " $* " in *"%l"*) printf "{max_time}\\n" ;; *) printf "{nodes}" ;; esac\n'
    )
    script.chmod(0o755)
    return folder


def plan(tmp_path, bin_dir, target="preflight", *args, **system):
    sysc = {
        "gpus_per_node": 4,
        "max_nodes": 2,
        "gpu_request": "gpus-per-node",
        "partition": "gpu",
        "cpus_per_task": 20,
        "time_min": 60,
        "envs": {fw: interpreter(fw) for fw in ("tensorflow", "mxnet", "pytorch")},
        **system,
    }
    write_config(tmp_path, systems={"h100": sysc}, training__systems=["h100"], training__gpus=[4, 8])
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    proc = subprocess.run(
        [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path), "-n", target, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_a_time_limit_over_the_partitions_max_time_is_refused_naming_the_key(tmp_path):
    rc, out = plan(tmp_path, fake_sinfo(tmp_path / "bin"), time_min=800)
    assert rc != 0 and "config systems.h100.time_min = 800" in out and "at most 720 minutes" in out, out[-3000:]
    assert "Fix: set systems.h100.time_min to 720 or less" in out and "Traceback" not in out


def test_a_drained_node_leaves_the_two_node_point_waiting_and_plans_the_rest(tmp_path):
    bin_dir = fake_sinfo(tmp_path / "bin", states=("idle", "drained"))
    rc, out = plan(tmp_path, bin_dir, "preflight")
    assert rc == 0, out[-3000:]
    assert "h100 at 8 GPUs planned, waiting in SLURM's queue for its nodes" in out, out[-3000:]
    # preflight checks one node only: its two-node check would wait for the drained node
    assert "preflight/h100/pytorch/4gpu.json" in out and "8gpu.json" not in out, out[-3000:]
    rc, out = plan(tmp_path, bin_dir, "training")
    assert rc == 0 and "pytorch_fp32_8gpu" in out and "pytorch_fp32_4gpu" in out, out[-3000:]
    rc, out = plan(tmp_path, bin_dir, "training", nodes_down="skip")
    assert rc == 0 and "h100 at 8 GPUs skipped" in out, out[-3000:]
    assert "pytorch_fp32_8gpu" not in out and "pytorch_fp32_4gpu" in out, out[-3000:]


def test_a_point_the_partition_could_never_hold_is_still_refused(tmp_path):
    rc, out = plan(tmp_path, fake_sinfo(tmp_path / "bin", states=("idle",)))
    assert rc != 0 and "config systems.h100 (training.gpus = 8)" in out and "has 1 usable node" in out, out[-3000:]


@pytest.mark.parametrize(
    "text, minutes",
    [("infinite", None), ("30:00", 30), ("12:00:00", 720), ("1-00:00:00", 1440), ("2-12", 3600), ("1-06:30", 1830)],
)
def test_sinfo_time_limits_in_minutes(text, minutes):
    assert slurm.parse_time_limit(text) == minutes


def test_a_points_repeats_share_jobs_that_fit_the_partitions_max_time(tmp_path):
    """MaxTime 2.5 h at time_min 60: each point's 3 repeats run as two SLURM jobs, of 2 runs and 1
    (Snakemake groups, in turn), never one of 3 h that SLURM would not start."""
    profile = ["--profile", str(REPO / "profiles" / "slurm")]
    rc, out = plan(tmp_path, fake_sinfo(tmp_path / "bin", max_time="2:30:00"), "training", *profile)
    assert rc == 0, out[-3000:]
    groups = re.findall(r"Group job (train_h100_pytorch_fp32_4gpu\S*) ", out)
    assert sorted(groups) == ["train_h100_pytorch_fp32_4gpu_part1", "train_h100_pytorch_fp32_4gpu_part2"], out[-3000:]
