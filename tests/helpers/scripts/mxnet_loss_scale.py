"""MXNet's fp16 loss scale (workflow_scripts/train/mxnet_loss_scale.py) on the CPU, with real
NDArrays and Horovod's DistributedTrainer (one process). Prints JSON:

  finite      the overflow check on float32/float16 gradients, with and without an inf or NaN
  schedule    the scale after overflows and after growth_interval good steps
  steps       a float16 weight (multi-precision SGD) whose gradient of 1 overflows float16 at the
              initial scale 2^16: per step, whether it was applied, the scale, the weight, the
              float16 gradient
  underflow   the float16 gradient of a loss whose true gradient is 1e-8 (below float16's smallest
              subnormal), with the float32 pieces (no scale) and the float16 ones
  pieces      what step_pieces gives per dtype
"""

import json
import os

os.environ.setdefault("MXNET_MKLDNN_ENABLED", "0")
import horovod.mxnet as hvd  # noqa: E402
import mxnet as mx  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402

from workflow_scripts.train.mxnet_loss_scale import DynamicLossScale, step_pieces  # noqa: E402

ctx = mx.cpu()
hvd.init()
out = {}

s = DynamicLossScale()
f16 = mx.nd.array([60000.0], dtype="float16")
out["finite"] = {
    "float32 finite": s.finite([mx.nd.ones((3,)), mx.nd.zeros((2, 2))]),
    "float32 with nan": s.finite([mx.nd.ones((3,)), mx.nd.array([1.0, float("nan")])]),
    "float16 finite": s.finite([f16]),
    "float16 overflowed": s.finite([f16 * 2]),  # 120000 > 65504: inf in float16
    "many arrays, one inf": s.finite([mx.nd.ones((1,))] * 450 + [mx.nd.array([float("inf")])]),
}

s = DynamicLossScale(growth_interval=3)
sched = [s.scale]
for overflow in (True, True, False, False, False, False):
    s.update(overflow)
    sched.append(s.scale)
out["schedule"] = {"scales": sched, "skipped": s.skipped}


class Weight(gluon.HybridBlock):
    """y = x * w: one float16 weight (MXNet's CPU has no float16 FullyConnected; element-wise ops it has)."""

    def __init__(self, weight):
        super().__init__()
        with self.name_scope():
            self.w = self.params.get("w", shape=(1,), init=mx.init.Constant(weight))

    def hybrid_forward(self, F, x, w):
        return F.broadcast_mul(x, w)


def one_weight_net(weight):
    net = Weight(weight)
    net.initialize(ctx=ctx)
    net.cast("float16")
    params = net.collect_params()
    trainer = hvd.DistributedTrainer(params, "sgd", {"learning_rate": 0.5, "multi_precision": True})
    return net, [p for p in params.values() if p.grad_req != "null"], trainer


def run_steps(dtype, loss_of, steps, weight=1.0):
    net, trainable, trainer = one_weight_net(weight)
    scaler, scale, apply = step_pieces(trainer, trainable, ctx, 1, dtype)
    x = mx.nd.ones((1, 1), dtype="float16")
    rows = []
    for _ in range(steps):
        used = scaler.scale if scaler else 1.0
        with autograd.record():
            scaled = scale(loss_of(net(x).astype("float32")))
        scaled.backward()
        grad = float(trainable[0].grad(ctx).astype("float32").asscalar())
        applied = apply()
        rows.append(
            {
                "applied": applied,
                "scale_used": used,
                "scale_after": scaler.scale if scaler else None,
                "grad_float16": grad,
                "weight": float(trainable[0].data(ctx).astype("float32").asscalar()),
            }
        )
    return scaler, rows


scaler, rows = run_steps("float16", lambda y: y.sum(), 3)
out["steps"] = {"rows": rows, "settings": scaler.settings()}
out["underflow"] = {
    dtype: run_steps(dtype, lambda y: y.sum() * 1e-8, 1)[1][0]["grad_float16"] for dtype in ("float32", "float16")
}
net, trainable, trainer = one_weight_net(1.0)
out["pieces"] = {d: type(step_pieces(trainer, trainable, ctx, 8, d)[0]).__name__ for d in ("float32", "float16")}
print(json.dumps(out))
