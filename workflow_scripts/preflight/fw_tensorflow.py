"""TensorFlow's side of a preflight task: the tiny net (Keras, mixed precision as the trainer)
trained one step by the trainer's own optimizer, loss scaling and step (Keras 2 or 3:
train/keras_compat.py), Horovod's all-reduce (NCCL on GPUs, Gloo on the CPU), as
tensorflow_horovod uses them."""

import time

from ..train import keras_compat
from ..train.keras_compat import tf  # TensorFlow, imported once TF_USE_LEGACY_KERAS is settled
from ..train.tensorflow_horovod import make_step, optimizer
from .horovod_ranks import HorovodRanks


class Framework(HorovodRanks):
    horovod_module = "horovod.tensorflow"
    name = "TensorFlow"

    def __init__(self, launch, threads):
        self.launch, self.gpu, self.hvd, self.calls = launch, False, None, 0
        # before TensorFlow starts its runtime, as the trainer does
        tf.config.threading.set_intra_op_parallelism_threads(threads["intra_op"])
        self.gpus = tf.config.list_physical_devices("GPU")

    def devices(self):
        import horovod.tensorflow as hvd

        names = []
        for g in self.gpus:
            d = tf.config.experimental.get_device_details(g)
            cc = "".join(map(str, d.get("compute_capability", ()))) or "?"
            names.append(f"{d.get('device_name', g.name)} (sm_{cc})")
        return {
            "cuda_build": tf.test.is_built_with_cuda(),
            "count": len(self.gpus),
            "names": names,
            "nccl": (hvd.nccl_built(), "Horovod was built without NCCL (HOROVOD_GPU_OPERATIONS=NCCL)"),
        }

    def use_gpu(self, index=None):
        """The task's GPU: `index` as CUDA numbers them (rank.py's gpu_choice), else its local rank's."""
        g = self.gpus[self.launch.local_rank if index is None else index]
        tf.config.set_visible_devices(g, "GPU")
        tf.config.experimental.set_memory_growth(g, True)
        self.gpu = True

    def kernel(self, precision):
        start = time.perf_counter()
        policy = ("mixed_float16" if self.gpu else "mixed_bfloat16") if precision == "fp16" else "float32"
        tf.random.set_seed(0)
        net = tf.keras.Sequential(
            [
                tf.keras.layers.Conv2D(8, 3, padding="same", dtype=policy),
                tf.keras.layers.BatchNormalization(dtype=policy),
                tf.keras.layers.ReLU(dtype=policy),
                tf.keras.layers.GlobalAveragePooling2D(dtype=policy),
                tf.keras.layers.Dense(10, dtype="float32"),
            ]
        )
        x, y = tf.random.normal([8, 32, 32, 3]), tf.random.uniform([8], 0, 10, tf.int32)
        net.build(x.shape)
        # The trainer's optimizer and step (float16: in its LossScaleOptimizer, as on a GPU), one process:
        # Horovod starts later in preflight (the all-reduce check).
        opt = optimizer(0.1, 0.9, 5e-5, policy == "mixed_float16")
        step = make_step(net, opt, tf.identity, 1)
        loss = float(step(x, y))  # waits for the device
        # What the trainer gives Horovod's broadcast after its first step: TensorFlow's own variables.
        shared = keras_compat.tf_variables(net.variables) + keras_compat.optimizer_variables(opt)
        if not all(isinstance(v, tf.Variable) for v in shared):
            raise TypeError("the trainer's variables for Horovod's broadcast are not all tf.Variables")
        return time.perf_counter() - start, loss

    def allreduce(self, elements, value):
        t = tf.fill([elements], tf.constant(value, tf.float32))
        start = time.perf_counter()
        self.calls += 1  # every rank names the same call alike
        out = self.hvd.allreduce(t, op=self.hvd.Sum, name=f"preflight{self.calls}")
        lo, hi = float(tf.reduce_min(out)), float(tf.reduce_max(out))
        return lo, hi, time.perf_counter() - start
