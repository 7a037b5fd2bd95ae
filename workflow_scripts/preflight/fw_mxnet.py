"""MXNet's side of a preflight task: the tiny net (Gluon), Horovod's all-reduce (NCCL on GPUs, Gloo
on the CPU), as mxnet_horovod uses them."""

import os
import time

os.environ.setdefault("MXNET_STORAGE_FALLBACK_LOG_VERBOSE", "0")

import mxnet as mx  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402

from ..common.errors import StageError  # noqa: E402
from .horovod_ranks import HorovodRanks  # noqa: E402


class Framework(HorovodRanks):
    horovod_module = "horovod.mxnet"
    name = "MXNet"

    def __init__(self, launch, threads):
        self.launch, self.gpu, self.ctx, self.hvd, self.calls = launch, False, mx.cpu(), None, 0

    def devices(self):
        import horovod.mxnet as hvd

        count = mx.context.num_gpus()
        # MXNet names no GPU model; the kernel check shows whether its build runs on this one.
        return {
            "cuda_build": mx.runtime.Features().is_enabled("CUDA"),
            "count": count,
            "names": [],
            "nccl": (hvd.nccl_built(), "Horovod was built without NCCL (HOROVOD_GPU_OPERATIONS=NCCL)"),
        }

    def use_gpu(self, index=None):
        """The task's GPU: `index` as CUDA numbers them (rank.py's gpu_choice), else its local rank's."""
        self.gpu, self.ctx = True, mx.gpu(self.launch.local_rank if index is None else index)

    def kernel(self, precision):
        if precision == "fp16" and not self.gpu:
            raise StageError(
                "the trainer does not wire MXNet 1.9's CPU mixed precision (bfloat16 AMP) and refuses fp16 "
                "on a CPU (set training.precisions to [fp32] for mxnet on a CPU)"
            )
        start = time.perf_counter()
        mx.random.seed(0)
        net = gluon.nn.HybridSequential()
        net.add(
            gluon.nn.Conv2D(8, 3, padding=1),
            gluon.nn.BatchNorm(),
            gluon.nn.Activation("relu"),
            gluon.nn.GlobalAvgPool2D(),
            gluon.nn.Dense(10),
        )
        net.initialize(mx.init.Xavier(), ctx=self.ctx)
        dtype = "float16" if precision == "fp16" else "float32"
        if dtype == "float16":
            net.cast(dtype)
        net.hybridize()
        x = mx.nd.random.normal(shape=(8, 3, 32, 32), ctx=self.ctx).astype(dtype)
        y = mx.nd.array([i % 10 for i in range(8)], ctx=self.ctx)
        with autograd.record():
            loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(x).astype("float32"), y).mean()
        loss.backward()
        mx.nd.waitall()
        return time.perf_counter() - start, float(loss.asscalar())

    def allreduce(self, elements, value):
        t = mx.nd.full((elements,), value, ctx=self.ctx, dtype="float32")
        mx.nd.waitall()
        start = time.perf_counter()
        self.calls += 1  # every rank names the same call alike
        out = self.hvd.allreduce(t, average=False, name=f"preflight{self.calls}")
        lo, hi = float(out.min().asscalar()), float(out.max().asscalar())
        return lo, hi, time.perf_counter() - start
