"""The TensorFlow trainer's model, optimizer and step (tensorflow_horovod's own functions, one
process: the all-reduce is tf.identity) for a few steps per case, on the CPU, in whatever Keras
tf.keras is here; then what the trainer hands Horovod's broadcast, its final weights, its summary's
gradients, and preflight's kernel. Prints JSON.

    python tf_keras_step.py OUT_DIR CASE...     CASE: fp32 | bf16 | fp16_loss_scaled | preflight

fp16_loss_scaled is the GPU's fp16 (mixed_float16 in the LossScaleOptimizer) run on the CPU: its
first applied update is compared with the same step of an unscaled twin from the same weights.
Every case starts from the same weights (seed 0) and sees the same batches."""

import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from workflow_scripts.train import keras_compat
from workflow_scripts.train import tensorflow_horovod as tfh
from workflow_scripts.train.keras_compat import tf

SIZE, BATCH, CLASSES, STEPS = 32, 2, 10, 3
POLICY = {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16_loss_scaled": "mixed_float16"}
out, cases = Path(sys.argv[1]), sys.argv[2:]


def batch(seed):
    g = tf.random.Generator.from_seed(seed)
    return g.normal([BATCH, SIZE, SIZE, 3]), g.uniform([BATCH], 0, CLASSES, tf.int32)


def trainer(policy, loss_scaling, seed=0):
    tf.keras.mixed_precision.set_global_policy(policy)
    tf.keras.utils.set_random_seed(seed)
    model = tfh.resnet50(SIZE, CLASSES)
    opt = tfh.optimizer(0.01, 0.9, 5e-5, loss_scaling)
    return model, opt, tfh.make_step(model, opt, tf.identity, 1)


def weights(model):
    return [v.numpy().astype(np.float64) for v in model.trainable_variables]


def changed(before, after):
    return sum(int(not np.array_equal(a, b)) for a, b in zip(before, after))


def train(case):
    loss_scaling = case == "fp16_loss_scaled"
    t = time.perf_counter()
    model, opt, step = trainer(POLICY[case], loss_scaling)
    start = weights(model)
    result = {"build_s": time.perf_counter() - t}
    x, y = batch(1)
    losses = [float(step(x, y))]
    # A dynamic loss scale starts high: float16's first steps overflow and are skipped (the scale halves).
    while loss_scaling and not changed(start, weights(model)) and len(losses) < 20:
        losses.append(float(step(x, y)))
    result["skipped"] = len(losses) - 1
    first = weights(model)
    losses += [float(step(*batch(s))) for s in range(2, STEPS + 1)]
    result.update(
        losses=losses,
        variables=len(start),
        changed=changed(start, weights(model)),
        policy=tf.keras.mixed_precision.global_policy().name,
        optimizer=type(opt).__name__,
    )
    if loss_scaling:
        # The same step without loss scaling from the same weights: 1 if the loss was scaled and its
        # gradients unscaled exactly once (Keras 3 unscales in apply_gradients, Keras 2 asks for it).
        twin, _, twin_step = trainer(POLICY[case], False)
        twin_step(x, y)
        scaled, plain = (
            float(np.linalg.norm(np.concatenate([(a - b).ravel() for a, b in zip(after, start)])))
            for after in (first, weights(twin))
        )
        result["update_ratio"] = scaled / plain
    # What launch() broadcasts after step 0, and the long test's BatchNorm statistics (read_value).
    shared = keras_compat.tf_variables(model.variables) + keras_compat.optimizer_variables(opt)
    result["broadcast"] = {
        "count": len(shared),
        "all_tf_variables": all(isinstance(v, tf.Variable) for v in shared),
        "moving_read": all(
            np.isfinite(v.read_value().numpy()).all() for v in keras_compat.tf_variables(model.non_trainable_variables)
        ),
    }
    adapter = tfh.TensorFlow()
    adapter.model, adapter.opt, adapter.gpu, adapter.threads, adapter.decoding = model, opt, None, 1, False
    (out / case).mkdir(parents=True, exist_ok=True)
    adapter.save(out / case)
    result["saved"] = sorted(p.name for p in (out / case).iterdir())  # before the checkpoint
    result["gradients"] = adapter.summary(SimpleNamespace())["gradients"]
    # The long test's checkpoint: a fresh trainer (other weights) takes back every variable saved.
    adapter.save_state(out / case)
    other = tfh.TensorFlow()
    other.model, other.opt, _ = trainer(POLICY[case], loss_scaling, seed=1)
    differed = changed(weights(model), weights(other.model))
    other.load_state(out / case)
    result["checkpoint"] = {
        "differed": differed,
        "restored": not changed(weights(model), weights(other.model)),
        "optimizer": all(
            np.array_equal(a.numpy(), b.numpy())
            for a, b in zip(keras_compat.optimizer_variables(opt), keras_compat.optimizer_variables(other.opt))
        ),
    }
    result["seconds"] = time.perf_counter() - t
    return result


def preflight():
    t = time.perf_counter()
    from workflow_scripts.cluster.rank_env import Launch
    from workflow_scripts.preflight.fw_tensorflow import Framework

    tf.keras.mixed_precision.set_global_policy("float32")
    fw = Framework(Launch(), {"intra_op": 2})
    return {**{p: fw.kernel(p)[1] for p in ("fp32", "fp16")}, "seconds": time.perf_counter() - t}


report = {
    "keras": keras_compat.which(),
    "TF_USE_LEGACY_KERAS": os.environ.get(keras_compat.LEGACY),
    "tensorflow": tf.__version__,
}
# Preflight first: it sets TensorFlow's threads, which only a runtime not yet started takes.
for case in sorted(cases, key=lambda c: c != "preflight"):
    report[case] = preflight() if case == "preflight" else train(case)
print(json.dumps(report))
