"""TensorFlow's side of a preflight task: the tiny net (Keras, mixed precision as the trainer),
Horovod's all-reduce (NCCL on GPUs, Gloo on the CPU), as tensorflow_horovod uses them."""

import time

import tensorflow as tf

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

    def use_gpu(self):
        g = self.gpus[self.launch.local_rank]
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
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(
                tf.keras.losses.sparse_categorical_crossentropy(y, net(x, training=True), from_logits=True)
            )
        grads = tape.gradient(loss, net.trainable_variables)
        float(tf.add_n([tf.reduce_sum(tf.cast(g, tf.float32)) for g in grads]))  # waits for the device
        return time.perf_counter() - start, float(loss)

    def allreduce(self, elements, value):
        t = tf.fill([elements], tf.constant(value, tf.float32))
        start = time.perf_counter()
        self.calls += 1  # every rank names the same call alike
        out = self.hvd.allreduce(t, op=self.hvd.Sum, name=f"preflight{self.calls}")
        lo, hi = float(tf.reduce_min(out)), float(tf.reduce_max(out))
        return lo, hi, time.perf_counter() - start
