"""The trainer's command lines (workflow_scripts/plan/commands.py) as plain Python: what each run
is told, and only what its framework and precision use. No Snakemake runs here."""

import pytest
from helpers import CONFIG, validated, with_overrides

from workflow_scripts.plan.commands import TrainerCommands
from workflow_scripts.plan.sweep import Sweep

pytestmark = pytest.mark.unit

GPU = {"gpus_per_node": 2, "max_nodes": 2, "gpu_request": "gpus-per-node", "cpus_per_task": 8, "srun_mpi": "pmix"}


def commands(**overrides):
    config = validated(with_overrides(CONFIG, systems={"local": CONFIG["systems"]["local"], "g": GPU}, **overrides))
    keys = {(s, f): f"envs_gpu.{f}" for s in config["systems"] for f in ("tensorflow", "mxnet", "pytorch")}
    return TrainerCommands(config, Sweep(config, embedded=True), keys)


def value(args, flag):
    return args[args.index(flag) + 1]


def test_fp16_doubles_the_batch_and_only_pytorch_gets_its_own_flags():
    c = commands()
    tf32, tf16 = c.sweep_run("local", "tensorflow", "fp32", "cpu"), c.sweep_run("local", "tensorflow", "fp16", "cpu")
    batch = CONFIG["training"]["batch_per_gpu"]["tensorflow"]
    assert value(tf32, "--batch-per-gpu") == str(batch) and value(tf16, "--batch-per-gpu") == str(2 * batch)
    assert "--input" not in tf32 and "--compile" not in tf32
    torch = c.sweep_run("local", "pytorch", "fp32", "synthetic")
    assert value(torch, "--data-source") == "synthetic" and value(torch, "--input") == "auto" and "--compile" in torch
    assert value(c.sweep_run("local", "pytorch", "fp32", "cpu"), "--data-source") == "real"
    # the default fp32 math adds no word (a run made before the key is not rerun)
    assert "--fp32-math" not in torch
    assert (
        value(commands(training__fp32_math="strict").sweep_run("local", "mxnet", "fp32", "cpu"), "--fp32-math")
        == "strict"
    )


def test_loss_lag_reaches_pytorchs_runs_only_where_set():
    """training.pytorch.loss_lag is newer than runs on disk: at its default (auto) no word, so those
    runs keep their params; set, every PyTorch run (and preflight's check, from the same words) is
    told it, and no other framework is."""
    assert "--loss-lag" not in commands().sweep_run("g", "pytorch", "fp16", "dali")
    c = commands(training__pytorch__loss_lag=1)
    assert value(c.sweep_run("g", "pytorch", "fp16", "dali"), "--loss-lag") == "1"
    assert value(c.sweep_run("g", "pytorch", "fp32", "synthetic"), "--loss-lag") == "1"
    assert "--loss-lag" not in c.sweep_run("g", "mxnet", "fp16", "cpu")


def test_a_gpu_systems_runs_must_find_a_gpu_and_name_their_interpreter_key():
    args = commands().sweep_run("g", "mxnet", "fp16", "cpu")
    assert "--require-gpu" in args and value(args, "--env-key") == "envs_gpu.mxnet"
    assert "--require-gpu" not in commands().sweep_run("local", "mxnet", "fp16", "cpu")


def test_the_long_test_is_told_its_schedule_and_checkpoints_never_the_sweeps_steps():
    c = commands(training__long_test__target_top1=None, training__long_test__milestones=[1, 2])
    args = c.long_test_run("g", "pytorch", "fp16", 4)
    assert value(args, "--mode") == "accuracy" and "--steps" not in args and "--target-top1" not in args
    assert args[args.index("--milestones") + 1 : args.index("--milestones") + 3] == ["1", "2"]
    assert value(args, "--checkpoint-dir") == "results/checkpoints/g/accuracy/pytorch_fp16_4gpu"
    assert value(args, "--input") == "dali"  # the framework's default path on a GPU system


def test_horovods_controller_flags():
    assert commands().horovod_args("g") == ["--gloo-timeout-s=300", "--horovod"]
    mpi = commands(training__horovod_controller="mpi").horovod_args("g")
    assert mpi == ["--horovod-controller=mpi", "--srun-mpi=pmix", "--horovod"]
