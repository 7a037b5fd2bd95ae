"""MXNet's thread rule (train/mxnet_horovod.py runs by it): the study's 16 decode threads a GPU,
of which its record parser starts at most half its CPUs less one. Preflight reads it through the
framework registry (common/frameworks.py)."""

SPARE_ON_GPU = 0  # MXNet's 16 a GPU decode beside its training threads, none kept


def counts(mine, gpu):
    """{name: count} of the threads a rank starts on `mine` (cpus.of)."""
    return {"decode": mine.mxnet_threads_run(mine.mxnet_decode_threads(gpu))}


def decode(mine, path, gpu, decode=0, workers=0):
    """Its decode threads as started: config training.decode_threads, or the rule's, capped by the parser."""
    return mine.mxnet_threads_run(decode or mine.mxnet_decode_threads(gpu))
