"""PyTorch's inputs: the train batches of its three paths (--input cpu, gpu, dali; or
synthetic data) and the long test's val loader, with the same augmentation in every path
(augment: RandomResizedCrop, flip, normalize).

  cpu   LMDBImageNet + Pillow in DataLoader workers.
  gpu   the workers only read JPEG bytes; gpu_input decodes and augments whole batches on the GPU
        (nvJPEG) in a thread, ahead of the step.
  dali  an NVIDIA DALI pipeline reads the LMDB and decodes in its own threads (dali_input).
Which one 'auto' picks, and why, is pytorch_options' and docs/decisions.md's.

The val loader (--mode accuracy) scores the LMDB's val split with LMDBImageNet + Pillow in
DataLoader workers (shorter side to image_size x 256/224, centre crop), each rank a contiguous
share of its records: no DistributedSampler, whose padding would score some images twice.
"""

import os
from dataclasses import dataclass

import torch
from torchvision.transforms import v2 as T

from ..cluster import cpus
from ..common.errors import PermanentError, StageError, global_batch_problem
from ..data.lmdb_dataset import LMDBImageNet
from . import gpu_input, long_test
from .augment import MEAN, RATIO, SCALE, STD
from .pytorch_options import dali_decoder, dali_gpu_threads, dali_hw_share, loader_workers

LOADER_PREFETCH = 4  # batches each DataLoader worker prepares ahead


def cpu_transform(image_size):
    return T.Compose(
        [
            T.RandomResizedCrop(image_size, scale=SCALE, ratio=RATIO, antialias=True),
            T.RandomHorizontalFlip(),
            T.PILToTensor(),
            T.ToDtype(torch.float32, scale=True),
            T.Normalize(MEAN, STD),
        ]
    )


def _forever(loader, sampler):
    """The loader's batches over epoch after epoch (a new shuffle each). The first iterator is
    made here, in the calling thread: that is where the worker processes are forked."""
    sampler.set_epoch(0)
    first = iter(loader)

    def batches():
        it, epoch = first, 0
        while True:
            yield from it
            epoch += 1
            sampler.set_epoch(epoch)
            it = iter(loader)

    return batches()


def input_seed(seed, rank):
    """The seed of a rank's GPU or DALI input (its crops, flips and, for DALI, its shuffle): every
    rank draws differently, and the same run draws the same."""
    return seed * 100003 + rank


def dali_input_module():
    """dali_input, imported only for --input dali: the other paths must run where DALI is not
    installed."""
    try:
        from . import dali_input
    except ImportError as exc:
        raise StageError(
            f"--input dali needs NVIDIA DALI, which could not be imported ({exc}); install "
            f"nvidia-dali-cuda130 (envs/torch.txt) or choose --input cpu or gpu"
        ) from exc
    return dali_input


@dataclass
class Input:
    classes: int
    train_images: int
    workers: int
    next_batch: object  # () -> (x, y) on the device
    close: object = lambda: None
    stats: object = lambda skip: {}  # input gpu: per-stage seconds per batch; dali: its settings


def build_input(args, s, launch, classes, per_rank=None):
    """The rank's train input as --input and the device ask (s: pytorch_options.Settings);
    per_rank: CPUs of the rank's share (cluster.cpus; None: read here)."""
    device = s.device
    layout = torch.channels_last if s.channels_last else torch.contiguous_format
    if args.data_source == "synthetic":
        g = torch.Generator().manual_seed(args.seed + launch.rank)
        x = torch.randn(args.batch_per_gpu, 3, args.image_size, args.image_size, generator=g)
        x = x.to(device).contiguous(memory_format=layout)
        y = torch.randint(0, classes, (args.batch_per_gpu,), generator=g).to(device)
        return Input(classes, 0, 0, lambda: (x, y))
    raw = s.input == "gpu"  # the workers read JPEG bytes only
    train = os.path.join(args.data, "train")
    lmdb = LMDBImageNet(train, transform=cpu_transform(args.image_size) if s.input == "cpu" else None)
    if len(lmdb) < args.batch_per_gpu * launch.world_size:
        raise PermanentError(global_batch_problem(train, len(lmdb), args.batch_per_gpu, launch.world_size))
    share = per_rank or cpus.of(launch).per_rank
    workers = loader_workers(args, s, share)
    seed = input_seed(args.seed, launch.rank)
    if s.input == "dali":
        # a run no larger than the rank's shard holds (else its epoch would hold no run)
        shard_batches = len(lmdb) // (args.batch_per_gpu * launch.world_size)
        dali = dali_input_module().DALIBatches(
            train,
            device,
            args.image_size,
            args.batch_per_gpu,
            seed,
            rank=launch.rank,
            world_size=launch.world_size,
            channels_last=s.channels_last,
            depth=s.prefetch,
            threads=workers,
            hw_decoder_load=s.hw_decoder_load,
            decoder=dali_decoder(s.dali_decoder, share),
            hw_share=dali_hw_share(s.dali_hw_share),
            size_hint=s.dali_size_hint,
            run_batches=max(1, min(s.dali_run_batches, shard_batches)),
            pinned_mb=s.dali_pools_mb[0],
            device_mb=s.dali_pools_mb[1],
            copy=getattr(args, "dali_copy", False),
            fast_idct=getattr(args, "dali_fast_idct", False),
            gpu_threads=dali_gpu_threads(s.dali_gpu_threads, workers),
            dual_parts=s.dali_dual_parts,
        )
        return Input(classes, len(lmdb), workers, lambda: next(dali), dali.close, dali.stats)
    ds = gpu_input.RawJPEGs(lmdb) if raw else lmdb
    sampler = torch.utils.data.distributed.DistributedSampler(
        ds, num_replicas=launch.world_size, rank=launch.rank, shuffle=True, seed=args.seed, drop_last=True
    )
    loader = torch.utils.data.DataLoader(
        ds,
        batch_size=args.batch_per_gpu,
        sampler=sampler,
        num_workers=workers,
        drop_last=True,
        collate_fn=gpu_input.collate_raw if raw else None,
        pin_memory=device.type == "cuda" and not raw,
        persistent_workers=True,
        prefetch_factor=LOADER_PREFETCH,
    )
    batches = _forever(loader, sampler)
    if raw:
        gpu = gpu_input.GPUBatches(
            batches,
            device,
            args.image_size,
            seed=seed,
            channels_last=s.channels_last,
            depth=s.prefetch,
            lanes=s.input_lanes,
            decoder=s.jpeg_decoder,
        )
        return Input(classes, len(ds), workers, lambda: next(gpu), gpu.close, gpu.stats)

    def next_batch():
        x, y = next(batches)
        x = x.to(device, non_blocking=True).contiguous(memory_format=layout)
        return x, y.to(device, non_blocking=True)

    return Input(classes, len(ds), workers, next_batch)


class _Numbered(torch.utils.data.Dataset):
    """The records of one rank's share, each item with its record number."""

    def __init__(self, ds, records):
        self.ds, self.records = ds, records

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        x, y = self.ds[self.records[i]]
        return x, y, self.records[i]


def val_loader(args, launch, workers):
    size = args.image_size
    transform = T.Compose(
        [
            T.Resize(long_test.resize_shorter(size), antialias=True),
            T.CenterCrop(size),
            T.PILToTensor(),
            T.ToDtype(torch.float32, scale=True),
            T.Normalize(MEAN, STD),
        ]
    )
    ds = LMDBImageNet(os.path.join(args.data, "val"), transform=transform)
    share = _Numbered(ds, long_test.val_share(len(ds), launch.rank, launch.world_size))
    return torch.utils.data.DataLoader(
        share, batch_size=args.batch_per_gpu, num_workers=workers, persistent_workers=workers > 0
    )
