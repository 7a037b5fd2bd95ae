"""ResNet-50 (tf.keras.applications) with Horovod, reading the data stage's TFRecords with
tf.data; decode threads = physical cores - 4 per GPU, as the study, counted per rank on the CPUs
it may run on (cluster.cpus; on a CPU host: all of its share's cores).

FP16 is Keras mixed precision: mixed_float16 with loss scaling on a GPU, mixed_bfloat16 on a CPU.
Keras 2 or 3, whichever tf.keras is (keras_compat: Keras 2 from tf_keras where it is installed).

The long test (--mode accuracy) scores the validation-* shards with tf.data: each rank reads only
the records of its share (the shards' DALI index files give their record counts), decodes, resizes
the shorter side to image_size x 256/224 and centre-crops.
"""

import contextlib
import functools
import glob
import os
import sys

from ..common.errors import PermanentError, StageError, run_main
from . import harness, keras_compat, long_test, loop
from .input_capacity import Feed
from .keras_compat import tf  # TensorFlow, imported once TF_USE_LEGACY_KERAS is settled (keras_compat)

MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
}


@contextlib.contextmanager
def damaged_records(data):
    """TensorFlow's own words for a damaged shard (DataLossError: "corrupted record at <byte>", no
    file named) or a JPEG that does not decode, as a PermanentError that says where and what to do:
    the same records fail every attempt until the copy is remade."""
    try:
        yield
    except tf.errors.DataLossError as exc:
        said = exc.message.splitlines()[0]
        raise PermanentError(
            f"{data}: a TFRecord shard is damaged (TensorFlow: {said}); `python -m workflow_scripts.data.verify "
            f"--data {data} --level full` names it. Fix: snakemake --forcerun tfrecord"
        ) from None
    except tf.errors.InvalidArgumentError as exc:
        said = exc.message.splitlines()[0]
        if "jpeg" not in said.lower():
            raise
        raise PermanentError(
            f"{data}: a record's JPEG does not decode (TensorFlow: {said}); `python -m workflow_scripts.data.verify "
            f"--data {data} --level full` names its shard. Fix: snakemake --forcerun tfrecord"
        ) from None


def decode_threads(run, gpu):
    if run.args.decode_threads:
        return run.args.decode_threads
    return run.cpus.tf_decode_threads(gpu)


def dataset(run, label_offset, threads):
    a, launch = run.args, run.launch
    files = sorted(glob.glob(os.path.join(a.data, "train-*-of-*")))
    if not files:
        raise StageError(f"{a.data} holds no train-*-of-* TFRecord shards")
    ds = tf.data.Dataset.from_tensor_slices(files)
    # Each rank reads its own files where there are enough of them, else every rank reads all
    # and keeps its share of the records.
    if len(files) >= launch.world_size:
        ds = ds.shard(launch.world_size, launch.rank)
    ds = ds.shuffle(len(files), seed=a.seed).interleave(
        tf.data.TFRecordDataset, cycle_length=min(8, len(files)), num_parallel_calls=tf.data.AUTOTUNE
    )
    if len(files) < launch.world_size:
        ds = ds.shard(launch.world_size, launch.rank)

    def parse(record):
        ex = tf.io.parse_single_example(record, FEATURES)
        shape = tf.image.extract_jpeg_shape(ex["image/encoded"])
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            shape,
            tf.zeros([0, 0, 4]),
            min_object_covered=0.1,
            aspect_ratio_range=(3 / 4, 4 / 3),
            area_range=(0.08, 1.0),
            max_attempts=10,
            use_image_if_no_bounding_boxes=True,
        )
        crop = tf.stack([begin[0], begin[1], size[0], size[1]])
        img = tf.io.decode_and_crop_jpeg(ex["image/encoded"], crop, channels=3)
        img = tf.image.resize(img, [a.image_size, a.image_size])
        img = (tf.image.random_flip_left_right(img) - MEAN) / STD
        return img, tf.cast(ex["image/class/label"], tf.int32) - label_offset

    return (
        ds.shuffle(10 * a.batch_per_gpu, seed=a.seed + launch.rank)
        .repeat()
        .map(parse, num_parallel_calls=threads)
        .batch(a.batch_per_gpu, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )


def _records_in(shard):
    idx = os.path.join(os.path.dirname(shard), "idx", os.path.basename(shard) + ".idx")
    if not os.path.isfile(idx):
        raise StageError(f"{idx} is missing: the data stage writes one index per TFRecord shard")
    with open(idx) as f:
        return sum(1 for _ in f)


def val_dataset(run, label_offset, threads):
    """(record number, image, label) batches of this rank's share of the validation split, or
    None for a rank without one; record number = position in the split (shards in order)."""
    a, launch = run.args, run.launch
    files = sorted(glob.glob(os.path.join(a.data, "validation-*-of-*")))
    if not files:
        raise StageError(f"{a.data} holds no validation-*-of-* TFRecord shards")
    counts = [_records_in(f) for f in files]
    share = long_test.val_share(sum(counts), launch.rank, launch.world_size)
    pieces, first = [], 0
    for f, n in zip(files, counts):
        lo, hi = max(share.start, first), min(share.stop, first + n)
        if lo < hi:
            records = tf.data.TFRecordDataset(f).skip(lo - first).take(hi - lo)
            pieces.append(tf.data.Dataset.zip((tf.data.Dataset.range(lo, hi), records)))
        first += n
    if not pieces:
        return None
    size, shorter = a.image_size, long_test.resize_shorter(a.image_size)

    def parse(number, record):
        ex = tf.io.parse_single_example(record, FEATURES)
        img = tf.io.decode_jpeg(ex["image/encoded"], channels=3)
        hw = tf.cast(tf.shape(img)[:2], tf.float32)
        new = tf.cast(tf.round(hw * shorter / tf.reduce_min(hw)), tf.int32)
        img = tf.image.resize(img, new)
        top, left = (new[0] - size) // 2, (new[1] - size) // 2
        img = (img[top : top + size, left : left + size] - MEAN) / STD
        return number, img, tf.cast(ex["image/class/label"], tf.int32) - label_offset

    return (
        functools.reduce(tf.data.Dataset.concatenate, pieces)
        .map(parse, num_parallel_calls=threads)
        .batch(a.batch_per_gpu)
        .prefetch(tf.data.AUTOTUNE)
    )


def first_kernel():
    """TensorFlow's own element-wise and reduction kernels (not only cuBLAS's), read back on the host."""
    with tf.device("/GPU:0"):
        x = tf.fill([64, 64], 0.5)
        return tf.reduce_sum(tf.nn.relu(tf.matmul(x, x) - 1.0)).numpy()


def gpu_of(device):
    details = tf.config.experimental.get_device_details(device)
    return details.get("device_name", device.name), details.get("compute_capability")


def build():
    info = tf.sysconfig.get_build_info()
    return (
        f"TensorFlow {tf.__version__} for CUDA {info.get('cuda_version', '?')}, code for "
        f"{' '.join(info.get('cuda_compute_capabilities', [])) or '?'}"
    )


def resnet50(image_size, classes):
    """The trainer's ResNet-50 (in the global mixed-precision policy), its residual blocks starting
    as identity (loop.Adapter.build_model)."""
    model = tf.keras.applications.ResNet50(
        weights=None, classes=classes, classifier_activation=None, input_shape=(image_size, image_size, 3)
    )
    for layer in model.layers:
        if layer.name.endswith("_3_bn"):  # zero-init residual (loop.Adapter.build_model)
            layer.gamma.assign(tf.zeros_like(layer.gamma))
        # Keras' BatchNormalization keeps 0.99 of its moving statistics per step (Gluon and torch:
        # 0.9): after the few hundred steps of a short long test they would still be mostly their
        # initial values, and the evaluation would score a network other than the one trained.
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            layer.momentum = 0.9
    return model


def optimizer(lr, momentum, weight_decay, loss_scaling):
    """SGD with momentum and weight decay, in a LossScaleOptimizer where loss_scaling (fp16 on a
    GPU: float16; a CPU's bfloat16 needs none)."""
    return keras_compat.sgd(lr, momentum, weight_decay, loss_scaling)


def make_step(model, opt, allreduce, size):
    """The training step, a tf.function (x, y) -> the loss averaged over the ranks. allreduce(t): the
    mean of a tensor over the `size` ranks (the trainer's: Horovod's; one process: tf.identity).
    Builds the optimizer's variables now."""
    ce = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    # The slots exist before the step is traced: a tf.function that creates variables on its first
    # call is traced twice, and ResNet-50's step with Horovod's all-reduces takes seconds to trace.
    # No AutoGraph either (here and in the long test's functions): nothing in them branches or loops
    # on a tensor's value. The gradients are all-reduced one by one, as hvd.DistributedGradientTape
    # does, so each starts when its gradient is ready; but the run's size is fixed, so whether to
    # all-reduce is decided here, not by the tape's tf.cond per gradient, which traces both branches
    # of every one of them. With loss scaling the scaled gradients are all-reduced: every rank then
    # unscales the same sums and skips the same non-finite steps.
    opt.build(model.trainable_variables)

    @tf.function(autograph=False)
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = ce(y, tf.cast(model(x, training=True), tf.float32))
            scaled = keras_compat.scale_loss(opt, loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        if size > 1:
            grads = [allreduce(g) for g in grads]
        opt.apply_gradients(zip(keras_compat.unscale_gradients(opt, grads), model.trainable_variables))
        return allreduce(loss)

    return step


class TensorFlow(loop.HorovodAdapter):
    framework, name, description = "tensorflow", "TensorFlow", __doc__.splitlines()[0]
    package = tf

    def versions(self):
        keras, version = keras_compat.which()
        return {**super().versions(), "keras": keras, "keras_version": version}

    def gpus(self, run):
        # The rank's share of its CPUs (set before TensorFlow initialises its runtime).
        tf.config.threading.set_intra_op_parallelism_threads(run.cpus.per_rank)
        self.gpu_list = tf.config.list_physical_devices("GPU")
        return len(self.gpu_list), tf.test.is_built_with_cuda(), self.nccl(run)

    def start(self, run):
        super().start(run)
        gpus = self.gpu_list
        # the GPU next to the rank's CPUs (cluster/gpu_choice.py), else its local rank's
        self.gpu = gpus[run.choose_gpu(len(gpus))] if gpus else None
        if self.gpu:
            tf.config.set_visible_devices(self.gpu, "GPU")
            tf.config.experimental.set_memory_growth(self.gpu, True)
            run.check_kernel(first_kernel, gpu_of(self.gpu), build())
        if run.args.fp32_math == "strict":
            tf.config.experimental.enable_tensor_float_32_execution(False)
        if run.args.precision == "fp16":
            tf.keras.mixed_precision.set_global_policy("mixed_float16" if gpus else "mixed_bfloat16")
        tf.random.set_seed(run.args.seed)

    def build_input(self, run, classes, manifest):
        args = run.args
        self.threads = decode_threads(run, bool(self.gpu))
        run.record_threads(intra_op=run.cpus.per_rank, **({"decode": self.threads} if manifest else {}))
        self.label_offset = (manifest or {}).get("label_offset", 0)
        self.decoding = bool(manifest)
        self.data = args.data
        if manifest:
            self.batches = iter(dataset(run, self.label_offset, self.threads))
            return
        x = tf.random.normal([args.batch_per_gpu, args.image_size, args.image_size, 3], seed=args.seed)
        y = tf.random.uniform([args.batch_per_gpu], 0, classes, tf.int32, seed=args.seed + run.launch.rank)
        self.batches = iter(tf.data.Dataset.from_tensors((x, y)).repeat())

    def build_model(self, run, classes):
        args, hvd = run.args, self.hvd
        self.model = resnet50(args.image_size, classes)
        self.opt = optimizer(run.lr, args.momentum, args.weight_decay, args.precision == "fp16" and bool(self.gpu))
        self.step = make_step(self.model, self.opt, lambda t: hvd.allreduce(t, op=hvd.Average), hvd.size())

    def next_batch(self):
        with damaged_records(self.data):
            return next(self.batches)

    def input_alone(self, run, gpu):
        """The train input as build_input makes it for a rank on a GPU (gpu) or the CPU, with no
        Horovod, model or run directory: what input_capacity times. Its batches stay on the host,
        where the step takes them from."""
        # As gpus() sets it, before TensorFlow starts its runtime; fixed for the process after that.
        if tf.config.threading.get_intra_op_parallelism_threads() != run.cpus.per_rank:
            tf.config.threading.set_intra_op_parallelism_threads(run.cpus.per_rank)
        if gpu and not tf.config.list_physical_devices("GPU"):
            raise StageError(f"TensorFlow in {sys.executable} sees no GPU: measure its input with --device cpu")
        tf.random.set_seed(run.args.seed)
        self.gpu = gpu
        self.build_input(run, 0, harness.read_manifest(run.args.data))
        return Feed(
            self.next_batch,
            path="tf.data",
            decoder="tf.io.decode_and_crop_jpeg",
            threads=self.threads,
            ahead=None,  # tf.data's prefetch is autotuned, and its threads start at the first batch taken
            versions={"tensorflow": tf.__version__},
        )

    def launch(self, batch, step):
        loss = self.step(*batch)
        if step == 0:  # everyone continues from rank 0's weights and optimizer state (eagerly: one trace)
            self.hvd.broadcast_variables(keras_compat.tf_variables(self.model.variables), root_rank=0)
            self.hvd.broadcast_variables(keras_compat.optimizer_variables(self.opt), root_rank=0)
        return lambda: (float(loss), None)

    def digest(self):
        return harness.weights_digest(v.numpy() for v in self.model.trainable_variables)

    def long_test_parts(self, run, classes):
        return long_test_parts(run, self.model, self.opt, self.hvd, self.label_offset, self.threads, classes)

    def save(self, out):
        self.model.save_weights(keras_compat.weights_file(out))

    def save_state(self, directory):
        tf.train.Checkpoint(model=self.model, optimizer=self.opt).write(os.path.join(directory, "state"))

    def load_state(self, directory):
        # Every variable the run built must take a saved value (the optimizer's slots exist: built
        # in build_model), or the run would go on from a half-restored state.
        saved = tf.train.Checkpoint(model=self.model, optimizer=self.opt).read(os.path.join(directory, "state"))
        saved.assert_existing_objects_matched()

    def summary(self, run):
        # Horovod all-reduces each gradient in its variable's dtype (mixed precision keeps float32 variables).
        variables = self.model.trainable_variables
        wire = keras_compat.dtype(variables[0])
        return {
            "device": self.gpu.name if self.gpu else "cpu",
            "device_type": "gpu" if self.gpu else "cpu",
            "gradients": harness.gradients(
                sum(tf.TensorShape(v.shape).num_elements() for v in variables), wire.size, wire.name
            ),
            "decode_threads": self.threads if self.decoding else None,
            "policy": tf.keras.mixed_precision.global_policy().name,
        }

    def math(self, run):
        return tf.keras.mixed_precision.global_policy().compute_dtype, "matrix products and convolutions"

    def finish(self, run):
        # Everything the run writes is written. Destroying the train iterator waits for tf.data's
        # autotuning thread to sleep out its optimisation period, seconds that count against the
        # job and measure nothing (docs/benchmarks.md#the-quick-start-on-the-cpu), so the rank ends
        # here, Horovod shut down on every rank first, without running destructors.
        self.hvd.shutdown()
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(0)


def long_test_parts(run, model, opt, hvd, label_offset, threads, classes):
    """--mode accuracy: long_test.LongTest's learning rate, evaluation and count all-reduce in TensorFlow."""
    size, k = run.args.image_size, min(5, classes)
    val = val_dataset(run, label_offset, threads)
    moving = keras_compat.tf_variables(model.non_trainable_variables)  # BatchNorm's moving means and variances

    @tf.function(input_signature=[tf.TensorSpec([None, size, size, 3], tf.float32)], autograph=False)
    def top_k(x):
        return tf.math.top_k(tf.cast(model(x, training=False), tf.float32), k).indices

    @tf.function(autograph=False)
    def average_moving_statistics():
        for v, mean in zip(moving, hvd.grouped_allreduce([v.read_value() for v in moving], op=hvd.Average)):
            v.assign(mean)

    def set_lr(lr):
        opt.learning_rate = lr

    def evaluate():
        # Each rank has its own BatchNorm statistics (only gradients are averaged): the ranks
        # score one model, whose statistics are the ranks' mean.
        if run.launch.world_size > 1:
            average_moving_statistics()
        numbers, labels, top = [tf.zeros([0], tf.int64)], [tf.zeros([0], tf.int32)], [tf.zeros([0, k], tf.int32)]
        with damaged_records(run.args.data):
            for n, x, y in val if val is not None else ():
                numbers.append(n), labels.append(y), top.append(top_k(x))
        return (tf.concat(numbers, 0).numpy(), tf.concat(labels, 0).numpy(), tf.concat(top, 0).numpy())

    def allreduce_sum(counts):
        return hvd.allreduce(tf.constant(counts), op=hvd.Sum, name="long_test_counts").numpy()

    return set_lr, evaluate, allreduce_sum


if __name__ == "__main__":
    run_main(lambda: loop.main(TensorFlow()))
