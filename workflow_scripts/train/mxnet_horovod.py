"""ResNet-50 v1 (Gluon model zoo) with Horovod, reading the data stage's RecordIO through
mx.io.ImageRecordIter (16 decode threads on a GPU node, as the study).

FP16 casts the network to float16 with multi-precision SGD on a GPU. MXNet 1.9 has no CPU
mixed precision that works with Horovod here (its bfloat16 AMP needs oneDNN, which has to be off
for Horovod on the CPU), so fp16 on a CPU fails with a message instead of silently running fp32.
"""
import os

# oneDNN tensors break Horovod's CPU allreduce in MXNet 1.9 ('Check failed: !IsMKLDNNData()').
os.environ.setdefault("MXNET_MKLDNN_ENABLED", "0")
os.environ.setdefault("MXNET_STORAGE_FALLBACK_LOG_VERBOSE", "0")

import mxnet as mx  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402
import numpy as np  # noqa: E402

from ..common.errors import StageError, run_main  # noqa: E402
from ..common.launch import setup_horovod  # noqa: E402
from . import harness  # noqa: E402

MEAN, STD = (123.68, 116.28, 103.53), (58.395, 57.12, 57.375)


def records(run, ctx_gpu, threads):
    a, launch = run.args, run.launch
    rec, idx = os.path.join(a.data, "train.rec"), os.path.join(a.data, "train.idx")
    if not os.path.isfile(rec):
        raise StageError(f"{rec} is missing: {a.data} is not the data stage's recordio output")
    return mx.io.ImageRecordIter(
        path_imgrec=rec, path_imgidx=idx, data_shape=(3, a.image_size, a.image_size),
        batch_size=a.batch_per_gpu, resize=int(a.image_size * 8 / 7), rand_crop=True, rand_mirror=True,
        shuffle=True, seed=a.seed, num_parts=launch.world_size, part_index=launch.rank,
        preprocess_threads=threads, prefetch_buffer=4, round_batch=True,
        mean_r=MEAN[0], mean_g=MEAN[1], mean_b=MEAN[2], std_r=STD[0], std_g=STD[1], std_b=STD[2])


def main():
    args = harness.arg_parser(__doc__.splitlines()[0]).parse_args()
    import horovod
    import horovod.mxnet as hvd

    run = harness.Run(args, "mxnet", {"mxnet": mx.__version__, "horovod": horovod.__version__})
    launch = run.launch
    gpu = mx.context.num_gpus() > 0
    if args.precision == "fp16" and not gpu:
        raise StageError("mxnet fp16 needs a GPU: MXNet 1.9 has no CPU mixed precision usable with Horovod "
                         "(set training.precisions to [fp32] for mxnet on a CPU)")
    setup_horovod(launch)
    hvd.init()
    ctx = mx.gpu(hvd.local_rank()) if gpu else mx.cpu()
    threads = args.decode_threads or (16 if gpu else max(1, (os.cpu_count() or 1) // launch.local_size))
    mx.random.seed(args.seed)
    if args.data_source == "synthetic":
        classes, train_images = args.classes or 1000, 0
        x = mx.nd.random.normal(shape=(args.batch_per_gpu, 3, args.image_size, args.image_size), ctx=ctx)
        y = mx.nd.random.randint(0, classes, shape=(args.batch_per_gpu,), ctx=ctx).astype("float32")
        it = None
    else:
        classes = harness.classes_of(args.data)
        train_images = harness.read_manifest(args.data)["splits"]["train"]["images"]
        it = records(run, gpu, threads)
    net = gluon.model_zoo.vision.resnet50_v1(classes=classes)
    net.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2), ctx=ctx)
    dtype = "float16" if args.precision == "fp16" else "float32"
    if dtype == "float16":
        net.cast("float16")
    net.hybridize(static_alloc=True, static_shape=True)
    net(mx.nd.zeros((1, 3, args.image_size, args.image_size), ctx=ctx, dtype=dtype))  # finish deferred init
    # Zero gamma in the last BN of each bottleneck (as torchvision's zero_init_residual): blocks
    # start as identity, which keeps the first steps from scratch stable.
    for stage in net.features:
        for block in getattr(stage, "_children", {}).values():
            body = getattr(block, "body", None)
            if body is not None and isinstance(body[-1], gluon.nn.BatchNorm):
                body[-1].gamma.set_data(mx.nd.zeros_like(body[-1].gamma.data(ctx)))
    params = net.collect_params()
    hvd.broadcast_parameters(params, root_rank=0)
    trainer = hvd.DistributedTrainer(params, "sgd", {"learning_rate": run.lr, "momentum": args.momentum,
                                                     "wd": args.weight_decay, "multi_precision": dtype == "float16"})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    trainable = [p for p in params.values() if p.grad_req != "null"]

    def next_batch():
        if it is None:
            return x, y
        try:
            b = it.next()
        except StopIteration:
            it.reset()
            b = it.next()
        return b.data[0].as_in_context(ctx).astype(dtype, copy=False), b.label[0].as_in_context(ctx)

    steps = run.total_steps(train_images)
    run.log.start()
    for i in range(steps):
        data, label = next_batch()
        with autograd.record():
            loss = loss_fn(net(data).astype("float32"), label)
        loss.backward()
        trainer.step(args.batch_per_gpu)
        mean_loss = hvd.allreduce(loss.mean(), average=True, name="loss").asscalar()  # waits for the step
        run.log.end(mean_loss)
        if i == 0:
            run.record_digest("after_step_1", harness.weights_digest(p.data(ctx).asnumpy() for p in trainable))
    run.record_digest("final", harness.weights_digest(p.data(ctx).asnumpy() for p in trainable))
    if launch.rank == 0:
        net.save_parameters(os.path.join(args.out, "weights.params"))
    # Horovod all-reduces each gradient in its parameter's dtype (float16 once the model is cast).
    wire = np.dtype(trainable[0].dtype)
    run.finish({"device": str(ctx), "classes": classes, "train_images": train_images, "decode_threads": threads,
                "gradients": harness.gradients(sum(int(np.prod(p.shape)) for p in trainable), wire.itemsize, wire.name),
                "dtype": dtype})


if __name__ == "__main__":
    run_main(main)
