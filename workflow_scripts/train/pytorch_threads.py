"""PyTorch's thread rule (pytorch_options.loader_workers): DataLoader workers or DALI's threads on
the rank's share of the node. Preflight reads it through the framework registry
(common/frameworks.py); it imports torch, so only in PyTorch's environment."""

from types import SimpleNamespace

from .pytorch_options import DALI_TRAINER_CORES, loader_workers

SPARE_ON_GPU = DALI_TRAINER_CORES  # preflight's PyTorch path on a GPU is DALI (counts)


def counts(mine, gpu):
    """{name: count} of what a rank starts on `mine` (cpus.of): its input path's workers, and
    torch's intra-op threads on a CPU."""
    path = "dali" if gpu else "cpu"
    found = {"loader_workers": decode(mine, path, gpu), "input": path}
    return found if gpu else {"torch": mine.per_rank, **found}


def decode(mine, path, gpu, decode=0, workers=0):
    """Its decode workers: training.pytorch.loader_workers or training.decode_threads, else the rule's."""
    return loader_workers(
        SimpleNamespace(loader_workers=workers, decode_threads=decode), SimpleNamespace(input=path), mine.per_rank
    )
