"""What a job at a sweep point asks SLURM for (workflow_scripts/plan/slurm_job.py), as plain
Python: its task geometry, GPU flags for sbatch and srun, and the executor plugin's resources, for
each way a system asks for GPUs. No Snakemake runs here."""

import pytest
from helpers import CONFIG, validated, with_overrides
from helpers.systems import EXTRA, SYSTEMS

from workflow_scripts.plan.slurm_job import JobShape
from workflow_scripts.plan.sweep import Sweep

pytestmark = pytest.mark.unit


def shape(**overrides):
    config = validated(with_overrides(CONFIG, systems=SYSTEMS, training__systems=list(SYSTEMS), **overrides))
    return JobShape(config, Sweep(config, embedded=True), EXTRA)


def test_gpus_per_node_goes_to_sbatch_and_srun_per_node():
    s = shape()
    r = s.point_resources("pernode", 8)
    assert (r["nodes"], r["tasks"], r["mpi"], r["cpus_per_task"], r["runtime"]) == (2, 8, "srun", 8, 60)
    assert r["slurm_extra"] == "--ntasks-per-node=4 --exclusive --gpus-per-node=a100:4" and r["gres"] is None
    assert r["tasks_per_gpu"] == 0 and r["slurm_partition"] == "gpu" and r["slurm_account"] is None
    assert s.geometry_args("pernode", 8)[:4] == [
        "--nproc-per-node=4",
        "--nodes=2",
        "--cpus-per-task=8",
        "--srun-args=--gpus-per-node=a100:4",
    ]


def test_gres_goes_through_the_plugins_own_resource_and_extras_are_quoted():
    r = shape().point_resources("gres", 4)
    assert r["gres"] == "gpu:v100:2" and "--gres" not in r["slurm_extra"]
    # exclusive: false (a site without whole-node jobs); sbatch_extra's words quoted for the plugin's shell line
    assert r["slurm_extra"] == "--ntasks-per-node=2 --comment 'a b'" and r["slurm_account"] == "acct"


def test_a_system_without_gpu_requests_asks_for_none():
    s = shape()
    r = s.point_resources("cpu", 1)
    assert r["mpi"] is None and r["gres"] is None and r["slurm_extra"] == "--ntasks-per-node=1 --exclusive"
    assert s.geometry_args("cpu", 1)[3] == "--srun-args="


def test_the_long_test_takes_its_own_time_limit_else_the_systems():
    assert shape().long_test_resources("pernode", 4)["runtime"] == 60
    assert shape(training__long_test__time_min=600).long_test_resources("pernode", 4)["runtime"] == 600


def test_nccl_env_and_a_named_interface_reach_every_rank():
    s = shape(nccl_env={"NCCL_IB_HCA": "mlx5_0"}, training__network_interface="ib0")
    assert s.comm_args() == ["--env=NCCL_IB_HCA=mlx5_0", "--network-interface=ib0"]
    assert shape().comm_args() == []
