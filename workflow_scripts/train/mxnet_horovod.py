"""ResNet-50 v1 (Gluon model zoo) with Horovod, reading the data stage's RecordIO through
mx.io.ImageRecordIter (16 decode threads per GPU, as the study, or fewer where the rank has fewer
CPUs: cluster.cpus; on a CPU host its share of the CPUs).

FP16 casts the network to float16 with multi-precision SGD on a GPU. MXNet 1.9's only CPU mixed
precision is its bfloat16 AMP, which this trainer does not wire, so fp16 on a CPU fails with a
message instead of silently running fp32. On a CPU the operators run through oneDNN, as the wheel
is built (MXNET_MKLDNN_ENABLED=0 in the environment turns it off; the summary's `onednn` says which
ran: docs/decisions.md#mxnet_onednn).

The long test (--mode accuracy) scores val.rec with ImageRecordIter: no random crop or mirror (the
shorter side resized to image_size x 256/224, then the centre crop), each rank its part of the
file (num_parts / part_index). The padding of a part's last batch is left out, and each image's
record number comes with its label: the iterator reads the labels from im2rec's list (val.lst)
given a second label column, the record number.
"""

import atexit
import json
import os
import shutil
import sys
import tempfile

os.environ.setdefault("MXNET_STORAGE_FALLBACK_LOG_VERBOSE", "0")

try:
    import mxnet as mx  # noqa: E402
except OSError as exc:  # an mxnet-cu* build loads the NVIDIA driver's libcuda.so.1 at import
    sys.exit(
        f"error: MXNet in {sys.executable} cannot load ({exc}): a CUDA build of MXNet needs the NVIDIA "
        f"driver; run it on a GPU node, or use a CPU build (config envs.mxnet)"
    )
import numpy as np  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402

from ..cluster import kernel_check  # noqa: E402
from ..common.errors import StageError, run_main  # noqa: E402
from . import harness, long_test, loop  # noqa: E402
from .input_capacity import Feed  # noqa: E402
from .mxnet_loss_scale import step_pieces  # noqa: E402

PREFETCH_BUFFER = 4  # train batches ImageRecordIter decodes ahead
MEAN, STD = (123.68, 116.28, 103.53), (58.395, 57.12, 57.375)
# ImageRecordIter's per-channel normalisation words, the same for train and val.
NORMALIZE = {f"{k}_{c}": v[i] for k, v in (("mean", MEAN), ("std", STD)) for i, c in enumerate("rgb")}


def onednn():
    """Whether MXNet's CPU operators ran through oneDNN: built in, and not turned off."""
    return mx.runtime.Features().is_enabled("MKLDNN") and os.environ.get("MXNET_MKLDNN_ENABLED", "1") != "0"


def dmlc_path(folder):
    """A name for `folder` that MXNet's readers take as it is: dmlc-core splits a file name at ';'
    (a list of files) and reads '?' and '#' as parts of a URI, so a folder whose path holds them
    is given to MXNet as a symlink in a temporary directory."""
    if not set(str(folder)) & set(";?#"):
        return str(folder)
    tmp = tempfile.mkdtemp(prefix="dlscale-recordio-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    alias = os.path.join(tmp, "recordio")
    os.symlink(os.path.abspath(folder), alias)
    return alias


def records(run, ctx_gpu, threads):
    a, launch = run.args, run.launch
    if not os.path.isfile(os.path.join(a.data, "train.rec")):
        raise StageError(
            f"{os.path.join(a.data, 'train.rec')} is missing: {a.data} is not the data stage's recordio output"
        )
    folder = dmlc_path(a.data)
    rec, idx = os.path.join(folder, "train.rec"), os.path.join(folder, "train.idx")
    return mx.io.ImageRecordIter(
        path_imgrec=rec,
        path_imgidx=idx,
        data_shape=(3, a.image_size, a.image_size),
        batch_size=a.batch_per_gpu,
        resize=int(a.image_size * 8 / 7),
        rand_crop=True,
        rand_mirror=True,
        shuffle=True,
        seed=a.seed,
        num_parts=launch.world_size,
        part_index=launch.rank,
        preprocess_threads=threads,
        prefetch_buffer=PREFETCH_BUFFER,
        round_batch=True,
        **NORMALIZE,
    )


def val_records(run, threads, numbered_list):
    """A new iterator for each evaluation: one with round_batch carries the records that filled
    its last batch over into the next pass."""
    a, launch = run.args, run.launch
    return mx.io.ImageRecordIter(
        path_imgrec=os.path.join(a.data, "val.rec"),
        path_imgidx=os.path.join(a.data, "val.idx"),
        path_imglist=numbered_list,
        label_width=2,
        data_shape=(3, a.image_size, a.image_size),
        batch_size=a.batch_per_gpu,
        resize=long_test.resize_shorter(a.image_size),
        rand_crop=False,
        rand_mirror=False,
        shuffle=False,
        num_parts=launch.world_size,
        part_index=launch.rank,
        preprocess_threads=threads,
        round_batch=True,  # without it, MXNet 1.9 reports no padding and fills the last batch with garbage
        **NORMALIZE,
    )


def numbered_val_list(data, directory):
    """val.lst (record number, label, path) with the record number added as a second label."""
    src = os.path.join(data, "val.lst")
    if not os.path.isfile(src):
        raise StageError(f"{src} is missing: {data} is not the data stage's recordio output")
    dst = os.path.join(directory, "val-numbered.lst")
    with open(src) as f, open(dst, "w") as out:
        for line in f:
            number, label, path = line.rstrip("\n").split("\t")
            out.write(f"{number}\t{label}\t{number}\t{path}\n")
    return dst


def build():
    """MXNet's version and, from its wheel's name (mxnet-cu117), the CUDA it was built for."""
    from importlib.metadata import packages_distributions

    wheel = next(iter(packages_distributions().get("mxnet", [])), "mxnet")
    cuda = wheel.rpartition("-cu")[2] if "-cu" in wheel else ""
    return (
        f"MXNet {mx.__version__} ({wheel}"
        + (f", CUDA {cuda[:-1]}.{cuda[-1]}" if cuda.isdigit() else "")
        + ("; the registry's MXNet 1.9.1 CUDA wheels hold code for sm_50-86 only)" if cuda else ")")
    )


class MXNet(loop.HorovodAdapter):
    framework, name, description = "mxnet", "MXNet", __doc__.splitlines()[0]
    package = mx

    def gpus(self, run):
        self.gpu = mx.context.num_gpus() > 0
        return mx.context.num_gpus(), mx.runtime.Features().is_enabled("CUDA"), self.nccl(run)

    def start(self, run):
        if run.args.precision == "fp16" and not self.gpu:
            raise StageError(
                "mxnet fp16 needs a GPU: the trainer does not wire MXNet 1.9's CPU mixed precision (bfloat16 AMP) "
                "(set training.precisions to [fp32] for mxnet on a CPU)"
            )
        super().start(run)
        # the GPU next to the rank's CPUs (cluster/gpu_choice.py), else its local rank's
        index = run.choose_gpu(mx.context.num_gpus()) if self.gpu else None
        if self.gpu:
            run.check_kernel(
                lambda: (mx.nd.ones((64, 64), ctx=mx.gpu(index)) * 0.5).relu().sum().asnumpy(),
                kernel_check.nvml_gpu(index),
                build(),
            )
        self.ctx = mx.gpu(index) if self.gpu else mx.cpu()
        self.dtype = "float16" if run.args.precision == "fp16" else "float32"
        mx.random.seed(run.args.seed)

    def build_input(self, run, classes, manifest):
        args, ctx = run.args, self.ctx
        self.asked = args.decode_threads or run.cpus.mxnet_decode_threads(self.gpu)
        self.threads = run.cpus.mxnet_threads_run(self.asked)  # what its parser starts of them
        if manifest:
            run.record_threads(decode=self.threads, decode_asked=self.asked)
            self.it = records(run, self.gpu, self.asked)
            return
        self.it = None
        self.x = mx.nd.random.normal(shape=(args.batch_per_gpu, 3, args.image_size, args.image_size), ctx=ctx)
        self.y = mx.nd.random.randint(0, classes, shape=(args.batch_per_gpu,), ctx=ctx).astype("float32")

    def build_model(self, run, classes):
        args, ctx, dtype = run.args, self.ctx, self.dtype
        net = gluon.model_zoo.vision.resnet50_v1(classes=classes)
        net.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2), ctx=ctx)
        if dtype == "float16":
            net.cast("float16")
        net.hybridize(static_alloc=True, static_shape=True)
        net(mx.nd.zeros((1, 3, args.image_size, args.image_size), ctx=ctx, dtype=dtype))  # finish deferred init
        for stage in net.features:  # zero-init residual (loop.Adapter.build_model)
            for block in getattr(stage, "_children", {}).values():
                body = getattr(block, "body", None)
                if body is not None and isinstance(body[-1], gluon.nn.BatchNorm):
                    body[-1].gamma.set_data(mx.nd.zeros_like(body[-1].gamma.data(ctx)))
        params = net.collect_params()
        self.hvd.broadcast_parameters(params, root_rank=0)
        trainer = self.hvd.DistributedTrainer(
            params,
            "sgd",
            {
                "learning_rate": run.lr,
                "momentum": args.momentum,
                "wd": args.weight_decay,
                "multi_precision": dtype == "float16",
            },
        )
        trainable = [p for p in params.values() if p.grad_req != "null"]
        # fp16: a dynamic loss scale (mxnet_loss_scale), so small gradients do not underflow to zero
        pieces = step_pieces(trainer, trainable, ctx, args.batch_per_gpu, dtype)
        self.loss_scaler, self.scale_loss, self.apply_step = pieces
        self.net, self.params, self.trainer, self.trainable = net, params, trainer, trainable
        self.loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def next_batch(self):
        if self.it is None:
            return self.x, self.y
        try:
            b = self.it.next()
        except StopIteration:
            self.it.reset()
            b = self.it.next()
        return b.data[0].as_in_context(self.ctx).astype(self.dtype, copy=False), b.label[0].as_in_context(self.ctx)

    def input_alone(self, run, gpu):
        """The train input as build_input and next_batch make it for a rank on a GPU (gpu: the
        first one it sees) or the CPU, with no Horovod, model or run directory: what input_capacity
        times. Its batches are on the step's device, in float32."""
        if gpu and not mx.context.num_gpus():
            raise StageError(f"MXNet in {sys.executable} sees no GPU: measure its input with --device cpu")
        self.gpu, self.ctx, self.dtype = gpu, mx.gpu(0) if gpu else mx.cpu(), "float32"
        mx.random.seed(run.args.seed)
        self.build_input(run, 0, harness.read_manifest(run.args.data))
        ran = self.threads  # build_input: what MXNet's parser starts of the threads asked
        return Feed(
            self.next_batch,
            ready=lambda batch: batch[0].wait_to_read(),  # MXNet's engine copies and casts asynchronously
            path="ImageRecordIter",
            decoder="OpenCV",  # cv::imdecode: the registry's wheels are built without MXNet's own libjpeg-turbo decoder
            threads=ran,
            note=f"{self.asked} preprocess threads asked, {ran} run (MXNet's cap)" if ran < self.asked else "",
            ahead=PREFETCH_BUFFER,
            versions={"mxnet": mx.__version__},
        )

    def launch(self, batch, step):
        data, label = batch
        with autograd.record():
            loss = self.loss_fn(self.net(data).astype("float32"), label)
            scaled = self.scale_loss(loss)  # recorded: the backward pass starts from the scaled loss
        scaled.backward()
        self.apply_step()
        mean = self.hvd.allreduce(loss.mean(), average=True, name="loss")
        return lambda: (mean.asscalar(), None)  # asscalar waits for the step

    def digest(self):
        return harness.weights_digest(p.data(self.ctx).asnumpy() for p in self.trainable)

    def long_test_parts(self, run, classes):
        self.tmp = tempfile.TemporaryDirectory()
        return long_test_parts(
            run,
            self.net,
            self.trainer,
            self.params,
            self.ctx,
            self.dtype,
            self.hvd,
            self.asked,
            classes,
            numbered_val_list(run.args.data, self.tmp.name),
        )

    def save_state(self, directory):
        self.net.save_parameters(os.path.join(directory, "net.params"))
        self.trainer.save_states(os.path.join(directory, "trainer.states"))
        if self.loss_scaler:
            s = self.loss_scaler
            with open(os.path.join(directory, "loss_scale.json"), "w") as f:
                json.dump({"scale": s.scale, "good_steps": s.good_steps, "skipped": s.skipped}, f)

    def load_state(self, directory):
        self.net.load_parameters(os.path.join(directory, "net.params"), ctx=self.ctx)
        self.trainer.load_states(os.path.join(directory, "trainer.states"))
        if self.loss_scaler:
            with open(os.path.join(directory, "loss_scale.json")) as f:
                saved = json.load(f)
            s = self.loss_scaler
            s.scale, s.good_steps, s.skipped = saved["scale"], saved["good_steps"], saved["skipped"]

    def close(self):
        if getattr(self, "tmp", None):
            self.tmp.cleanup()

    def save(self, out):
        self.net.save_parameters(os.path.join(out, "weights.params"))

    def summary(self, run):
        # Horovod all-reduces each gradient in its parameter's dtype (float16 once the model is cast).
        wire = np.dtype(self.trainable[0].dtype)
        return {
            "device": str(self.ctx),
            "device_type": "gpu" if self.gpu else "cpu",
            "decode_threads": self.threads if self.it is not None else None,
            "decode_threads_asked": self.asked if self.it is not None else None,
            "gradients": harness.gradients(
                sum(int(np.prod(p.shape)) for p in self.trainable), wire.itemsize, wire.name
            ),
            "dtype": self.dtype,
            "onednn": onednn(),
            "loss_scale": self.loss_scaler.settings() if self.loss_scaler else None,
        }

    def math(self, run):
        # MXNet has no TF32 switch of its own: cuDNN's default math takes TF32 for convolutions on such
        # GPUs; NVIDIA_TF32_OVERRIDE=0 (harness.apply_fp32_math) turns it off.
        return self.dtype, "cuDNN's convolutions"


def long_test_parts(run, net, trainer, params, ctx, dtype, hvd, threads, classes, numbered):
    """--mode accuracy: long_test.LongTest's learning rate, evaluation and count all-reduce in MXNet."""
    k = min(5, classes)
    moving = [p for p in params.values() if p.grad_req == "null"]  # BatchNorm's running means and variances

    def evaluate():
        # Each rank has its own BatchNorm statistics (only gradients are averaged): the ranks
        # score one model, whose statistics are the ranks' mean.
        if run.launch.world_size > 1:
            for p in moving:
                hvd.allreduce_(p.data(ctx), average=True, name=f"moving.{p.name}")
        numbers, labels, top = [], [], []
        for b in val_records(run, threads, numbered):
            n = b.data[0].shape[0] - b.pad
            out = net(b.data[0].as_in_context(ctx).astype(dtype, copy=False)).astype("float32")
            top.append(mx.nd.topk(out, k=k, axis=1, ret_typ="indices").asnumpy()[:n])
            label = b.label[0].asnumpy()[:n]
            labels.append(label[:, 0]), numbers.append(label[:, 1])
        return np.concatenate(numbers), np.concatenate(labels), np.concatenate(top)

    def allreduce_sum(counts):
        return hvd.allreduce(mx.nd.array(counts, dtype="float64"), average=False, name="long_test_counts").asnumpy()

    return trainer.set_learning_rate, evaluate, allreduce_sum


if __name__ == "__main__":
    run_main(lambda: loop.main(MXNet()))
