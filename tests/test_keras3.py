"""The TensorFlow trainer under Keras 3 (issue 40, item 12). TensorFlow 2.16 and later, NGC's
containers among them, ship Keras 3 as tf.keras, where `opt.variables()`, the LossScaleOptimizer's
get_scaled_loss / get_unscaled_gradients, `read_value` and `save_weights("x.h5")` are gone
(workflow_scripts/train/keras_compat.py). The trainer's own model, optimizer and step
(tensorflow_horovod.resnet50, optimizer, make_step; one process, the all-reduce tf.identity: no
Horovod builds against these TensorFlows) run a few real steps on the CPU per precision, in:

- Keras 3: .envs/tf-keras3 (envs/tf-keras3.txt, TensorFlow 2.21), built here once, rebuilt when the
  requirements change;
- Keras 2 from tf_keras in the same TensorFlow: tf_keras installed (--no-deps) on a path of its own,
  which makes keras_compat set TF_USE_LEGACY_KERAS=1;
- Keras 2 built into TensorFlow 2.15: the project's .envs/tf-mxnet.

Each also runs preflight's kernel, which trains its tiny net with the same optimizer and step."""

import hashlib
import os
import shutil
import subprocess
import sys

import pytest
from helpers import REPO, interpreter, run_script

ENV = REPO / ".envs" / "tf-keras3"
REQUIREMENTS = REPO / "envs" / "tf-keras3.txt"
TF_KERAS = "tf-keras==2.21.0"  # Keras 2 for TensorFlow 2.21
ALL = ("fp32", "bf16", "fp16_loss_scaled", "preflight")


def _pip(*args):
    proc = subprocess.run(
        [str(ENV / "bin" / "python"), "-m", "pip", "install", "-q", *args], capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, f"pip install {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


@pytest.fixture(scope="module")
def keras3_env():
    """.envs/tf-keras3 and, beside it, a folder holding only tf_keras; made once (as envs/setup.sh's
    make_env: a stamp of the requirements, this test's tf_keras and the Python version)."""
    stamp = f"{hashlib.sha256(REQUIREMENTS.read_bytes() + TF_KERAS.encode()).hexdigest()[:16]} {sys.version.split()[0]}"
    stamp_file, tf_keras = ENV / ".dlscale-stamp", ENV / "tf_keras-only"
    if not (stamp_file.exists() and stamp_file.read_text() == stamp):
        shutil.rmtree(ENV, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(ENV)], check=True, timeout=300)
        _pip("-r", str(REQUIREMENTS))
        # --no-deps: tf_keras asks for the full tensorflow package (hundreds of MB) beside tensorflow-cpu.
        _pip("--no-deps", "--target", str(tf_keras), TF_KERAS)
        stamp_file.write_text(stamp)
    return str(ENV / "bin" / "python"), str(tf_keras)


def run_steps(python, *cases, path=(), tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    env.update(PYTHONPATH=os.pathsep.join([str(REPO), *path]), TF_CPP_MIN_LOG_LEVEL="2")
    return run_script(None, "tf_keras_step.py", tmp_path, *cases, python=python, environ=env, timeout=900)


def check_steps(got, cases):
    """What every Keras must give the trainer's step."""
    for case in cases:
        if case == "preflight":  # the tiny net's loss after one step, per precision
            assert all(0 < got[case][p] < 10 for p in ("fp32", "fp16")), got[case]
            continue
        r = got[case]
        assert all(0 < loss < 100 for loss in r["losses"]), r["losses"]
        # The weights moved (all but a few zero-initialised biases whose 16-bit gradients are zero).
        assert r["variables"] == 214 and r["changed"] >= 0.9 * 214, r
        # ResNet-50 with 10 classes; Horovod all-reduces its float32 gradients (mixed precision too).
        assert r["gradients"]["elements"] == 23_555_082 and r["gradients"]["dtype"] == "float32"
        # launch()'s broadcast gets TensorFlow's own variables: the model's and the optimizer's.
        assert r["broadcast"]["all_tf_variables"] and r["broadcast"]["count"] > 320 + 214, r["broadcast"]
        assert r["broadcast"]["moving_read"]  # the long test reads the BatchNorm statistics
        assert r["saved"] == ["weights.weights.h5"]
        # Resuming the long test: another trainer's weights and optimizer state all become the saved ones.
        assert r["checkpoint"]["differed"] > 100 and r["checkpoint"]["restored"] and r["checkpoint"]["optimizer"], r
    if "bf16" in cases:
        assert got["bf16"]["policy"] == "mixed_bfloat16" and got["bf16"]["optimizer"] == "SGD"
    if "fp16_loss_scaled" in cases:
        r = got["fp16_loss_scaled"]
        assert r["policy"] == "mixed_float16" and "LossScaleOptimizer" in r["optimizer"]
        # The first update applied equals the unscaled step's: the loss was scaled and the gradients
        # unscaled exactly once (Keras 3 unscales in apply_gradients; unscaled loss there: 1/32768).
        assert abs(r["update_ratio"] - 1) < 0.01, r["update_ratio"]
        # The initial scale (2^15) overflows float16 at first: those steps were skipped, not applied.
        assert r["skipped"] >= 1 and len(set(r["losses"][: r["skipped"] + 1])) == 1


@pytest.mark.stage
def test_the_trainers_step_runs_under_keras_3(keras3_env, tmp_path):
    got = run_steps(keras3_env[0], *ALL, tmp_path=tmp_path)
    assert got["keras"][0] == "keras 3" and got["TF_USE_LEGACY_KERAS"] is None
    check_steps(got, ALL)


@pytest.mark.stage
def test_where_tf_keras_is_installed_the_trainer_runs_on_it(keras3_env, tmp_path):
    python, tf_keras = keras3_env
    got = run_steps(python, "fp32", "preflight", path=[tf_keras], tmp_path=tmp_path)
    assert got["TF_USE_LEGACY_KERAS"] == "1"  # set by keras_compat before TensorFlow was imported
    assert got["keras"] == ["keras 2 (tf_keras)", "2.21.0"] and got["tensorflow"] == "2.21.0"
    check_steps(got, ("fp32", "preflight"))


@pytest.mark.stage
def test_the_trainers_step_runs_under_tensorflow_2_15s_keras_2(tmp_path):
    got = run_steps(interpreter("tensorflow"), *ALL, tmp_path=tmp_path)
    assert got["keras"][0] == "keras 2 (built in)" and got["TF_USE_LEGACY_KERAS"] is None
    check_steps(got, ALL)


@pytest.mark.unit
def test_the_trainer_and_preflight_take_tensorflow_from_keras_compat():
    """TF_USE_LEGACY_KERAS only counts before TensorFlow is imported: neither imports it itself."""
    for module in ("train/tensorflow_horovod.py", "preflight/fw_tensorflow.py"):
        src = (REPO / "workflow_scripts" / module).read_text()
        assert "import tensorflow" not in src and "keras_compat import tf" in src, module
