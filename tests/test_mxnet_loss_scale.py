"""MXNet fp16 trains with a dynamic loss scale (issue 27, item 7): on this CPU machine MXNet's
fp16 training refuses to run, so the scale is shown on real MXNet NDArrays and Horovod's
DistributedTrainer with one float16 weight (tests/helpers/scripts/mxnet_loss_scale.py), and the trainer's
fp32 path is run to show the step's pieces leave it as it was."""

import json
import subprocess

import pytest
from helpers import REPO, run_script, trainer_command

pytestmark = pytest.mark.stage


def test_overflow_skips_the_step_and_halves_the_scale_and_growth_doubles_it():
    got = run_script("mxnet", "mxnet_loss_scale.py")
    assert got["finite"] == {
        "float32 finite": True,
        "float32 with nan": False,
        "float16 finite": True,
        "float16 overflowed": False,
        "many arrays, one inf": False,
    }
    # growth_interval 3: two overflows halve twice; three good steps in a row double once
    assert got["schedule"] == {"scales": [2.0**16, 2.0**15, 2.0**14, 2.0**14, 2.0**14, 2.0**15, 2.0**15], "skipped": 2}
    first, second, third = got["steps"]["rows"]
    # a gradient of 1 times 2^16 is beyond float16 (65504): skipped, the weight kept, the scale halved
    assert first["grad_float16"] == float("inf") and not first["applied"] and first["weight"] == 1.0
    assert first["scale_after"] == 2.0**15
    # then applied with the scale undone: lr 0.5 x the true gradient 1 per step
    assert second["applied"] and second["grad_float16"] == 2.0**15 and second["weight"] == 0.5
    assert third["applied"] and third["weight"] == 0.0
    assert got["steps"]["settings"]["skipped_steps"] == 1 and got["steps"]["settings"]["initial"] == 2.0**16


def test_a_gradient_below_float16s_range_survives_only_with_the_scale():
    got = run_script("mxnet", "mxnet_loss_scale.py")
    assert got["underflow"]["float32"] == 0.0  # the pieces without a scale: 1e-8 is 0 in float16
    assert abs(got["underflow"]["float16"] - 1e-8 * 2**16) < 1e-6
    assert got["pieces"] == {"float32": "NoneType", "float16": "DynamicLossScale"}


def test_the_trainer_steps_through_the_pieces_and_records_the_scale(tmp_path):
    cmd = trainer_command("mxnet", data_source="synthetic", classes=4, batch_per_gpu=2, out=tmp_path)
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["timed_steps"] == 2
    assert summary["loss_scale"] is None and summary["first_kernel"] is None  # fp32 on a CPU: neither
