"""TensorFlow's thread rule (train/tensorflow_horovod.py runs by it): inter- and intra-op threads on
the rank's share of the node, tf.data's decode threads on all but SPARE_PER_GPU of its cores on a
GPU. Preflight reads it through the framework registry (common/frameworks.py)."""

from .cpus import SPARE_PER_GPU

SPARE_ON_GPU = SPARE_PER_GPU  # cores of a GPU rank kept from decoding


def counts(mine, gpu):
    """{name: count} of the threads a rank starts on `mine` (cpus.of)."""
    return {"intra_op": mine.per_rank, "decode": mine.tf_decode_threads(gpu)}


def decode(mine, path, gpu, decode=0, workers=0):
    """Its decode threads: config training.decode_threads, or the rule's."""
    return decode or mine.tf_decode_threads(gpu)
