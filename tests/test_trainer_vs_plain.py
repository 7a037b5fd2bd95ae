"""benchmarks/trainer_vs_plain.py at several GPUs of a node, without a GPU: an item's GPU count, the
commands it runs (the sweep's launcher geometry for the trainer, torchrun and DDP for the plain
loop, a node's share of CPUs per GPU), and the plain loop itself as DDP over two CPU processes."""

import json
import os
import subprocess

import pytest
from helpers import REPO, interpreter

from benchmarks.study_points import parse_item


@pytest.mark.unit
def test_an_item_names_its_gpus():
    item = parse_item("real-preset-fp16x4@12+dual")
    assert (item["kind"], item["point"], item["gpus"], item["cpus"], item["variants"]) == (
        "real",
        "preset-fp16",
        4,
        12,
        ("dual",),
    )
    assert parse_item("preset-fp32")["gpus"] is None
    with pytest.raises(SystemExit, match="xGPUS"):
        parse_item("preset-fp16x0")


def _dry_run(items):
    proc = subprocess.run(
        [interpreter("pytorch"), "-m", "benchmarks.trainer_vs_plain", "--dry-run", "--items", items],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.strip())


@pytest.mark.stage
def test_four_gpus_run_through_the_launcher_and_torchrun():
    cmds = _dry_run("preset-fp16x4@12,plain-preset-fp16x4@12,check-preset-fp16x4,preset-fp16@12")
    trainer, plain = cmds["preset-fp16x4@12"].split(), cmds["plain-preset-fp16x4@12"].split()
    assert trainer[:3] == ["taskset", "-c", "0-47"]  # 12 CPUs a GPU, 4 GPUs
    assert "workflow_scripts.cluster.launcher" in trainer and "--nproc-per-node=4" in trainer
    assert trainer.index("--") < trainer.index("workflow_scripts.train.pytorch_ddp")
    assert plain[:3] == ["taskset", "-c", "0-47"]
    assert "torch.distributed.run" in plain and "--nproc-per-node=4" in plain
    # the plain loop's DDP graph is the one the trainer's words resolve to
    graph = trainer[trainer.index("--ddp-graph") + 1]
    assert plain[plain.index("--ddp-graph") + 1] == graph
    assert "--nproc-per-node=4" in cmds["check-preset-fp16x4"].split()
    one = cmds["preset-fp16@12"].split()  # no xGPUS: one GPU, the trainer started directly
    assert one[:3] == ["taskset", "-c", "0-11"] and "workflow_scripts.cluster.launcher" not in one


@pytest.mark.stage
def test_the_plain_loop_as_ddp_of_two_processes(tmp_path):
    out = tmp_path / "plain.json"
    cmd = [interpreter("pytorch"), "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    cmd += ["-m", "benchmarks.plain_loop", "--batch", "2", "--image-size", "32", "--precision", "fp32"]
    cmd += ["--compile", "off", "--warmup", "1", "--steps", "4", "--window", "2", "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(out.read_text())
    assert (got["gpus"], got["timed_steps"], got["ddp_graph"]) == (2, 4, "whole")
    assert got["images_per_s"] > 0
