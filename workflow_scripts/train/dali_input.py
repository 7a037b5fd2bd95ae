"""ImageNet batches read, decoded and augmented by NVIDIA DALI, for PyTorch training from the LMDB.

Why: the gpu path (gpu_input) decodes in a Python thread of the training process, whose host and
GPU work slows the step beside it (docs/decisions.md#input). DALI does the whole input in its own
C++ threads, without the interpreter lock. Where it decodes (`decoder`; the measurements behind the
default: docs/decisions.md#dali_decoder):

  cpu     libjpeg-turbo in DALI's CPU threads, only the crop's region; the crops are copied to the
          GPU, which resizes, flips and normalizes them: a few GPU operations a batch. The default:
          the closest to the synthetic rate.
  mixed   the hardware JPEG engine of an A100/H100 (share hw_decoder_load) and nvJPEG on the SMs
          (the rest; all of them on older GPUs). Its decoding costs the SMs little, but it issues
          a copy and a colour conversion per JPEG on a dozen streams, hundreds of small GPU
          operations a batch, each waiting behind the step's kernels.
  split   each JPEG to one of the two, drawn per image: `hw_share` of them to mixed, the rest to
          the CPU threads; for a rank whose threads alone decode too few (the share auto rule:
          pytorch_options.dali_hw_share).
  dual    two pipelines a rank, cpu and mixed, each with its own executor and threads (the GPU's
          `gpu_threads` of them). Every batch is `dual_parts` (k) equal parts, each from its own
          reader over shard k rank + j of k world_size (every record still once an epoch): the
          GPU's pipeline gives the last part, the CPU's the other k - 1, a reader each; the parts
          are joined on the GPU, a copy. DALI's iterators count every shard's epoch as the
          smallest shard's (shards differ by a record at most), so the parts give the same runs an
          epoch (should one pipeline's still end first, the other's rest is dropped).
Without a GPU the whole pipeline runs on the CPU (libjpeg-turbo): that is how the tests check it.

One pipeline per rank, prefetching `depth` runs with `threads` CPU threads; each run prepares
`run_batches` of the step's batches at once and hands them out one by one (views of the run's
output, nothing copied): DALI pays a fixed cost each run, whatever its size
(docs/decisions.md#dali_run_batches).

  readers.caffe2   the data stage's LMDB train split; shard `rank` of `world_size` (contiguous
                   ranges of records, each rank moving to the next range every epoch), shuffled
                   in a buffer of up to SHUFFLE_BUFFER records. The data stage stored the split
                   in a random order (conversion.shuffle_seed), so a contiguous range is a random
                   subset; DistributedSampler's new global permutation every epoch is what this
                   does not do. The last run of a shard's epoch is padded by the reader and
                   dropped by the iterator: no sample is seen twice in an epoch, as with
                   drop_last in the other paths (a run of several batches drops up to one run).
  decode + crop    decoders.image_random_crop: RandomResizedCrop's parameters (area 0.08-1 of
                   the image, aspect ratio log-uniform in 3/4-4/3, sides rounded, position
                   uniform over the whole pixels, up to 10 attempts), decoding only that region
                   where the decoder can. After 10 failed attempts DALI, like torchvision, takes
                   the largest crop whose aspect ratio is in range, but places it at a random
                   position where torchvision centres it; and it also rejects an attempt whose
                   rounded sides leave the ratio range, which torchvision accepts. For photos of
                   ordinary shape both cases are rare (tests/test_dali_input.py compares the
                   distributions). EXIF orientation is ignored, as Pillow's and nvJPEG's decodes
                   in the other paths ignore it. The mixed decoder's pixels differ from
                   libjpeg-turbo's by a few levels (chroma upsampling, IDCT), as the gpu path's
                   nvJPEG does; the cpu decoder's are libjpeg-turbo's, as Pillow's.
  resize           to image_size x image_size, bilinear with antialiasing when shrinking (the
                   triangle filter widened by the scale factor: torchvision's antialiased resize
                   and Pillow's bilinear), in float, so no 8-bit rounding before normalizing.
                   Inside the image the numbers are F.interpolate(antialias=True)'s (the gpu
                   path's); shrinking, DALI repeats the crop's edge pixels where the filter
                   reaches past them, where torchvision and Pillow shorten the filter, so the
                   outermost ring of output pixels differs (by up to ~16 levels of 255 on
                   photos). fn.random_resized_crop, the alternative, treats the edge the same way
                   (checked on whole-image crops) and needs the whole image decoded.
  flip, normalize  crop_mirror_normalize: a horizontal flip with probability 0.5, (x - 255 mean)
                   / (255 std), float32, CHW or, for channels_last, HWC (NHWC memory handed to
                   PyTorch as an NCHW-shaped channels_last tensor, with no copy).

Labels are the LMDB's int32 labels, cast to int64, on the training device. The pipeline's seed
(the reader's shuffle, the crops, the flips) is derived per rank by the caller.
"""

import json
import statistics
import time
from pathlib import Path

import torch
from nvidia.dali import backend, fn, pipeline_def, types
from nvidia.dali.plugin.base_iterator import LastBatchPolicy
from nvidia.dali.plugin.pytorch import DALIGenericIterator

from ..common import schema
from ..common.errors import StageError
from .augment import MEAN, RATIO, SCALE, STD

DECODERS = tuple(d for d in schema.section("training.pytorch")["dali_decoder"]["enum"] if d != "auto")
PIPELINES = ("cpu", "mixed", "split")  # the decoders of one pipeline (pipeline()); dual runs two

READER = "lmdb"  # the reader's name: the iterator reads the epoch size from it
SHUFFLE_BUFFER = 4096  # records held for shuffling: about 450 MB of ILSVRC JPEGs per rank
CROP_ATTEMPTS = 10  # torchvision's RandomResizedCrop tries 10 times
DUAL_SEED_STEP = 1 << 20  # dual: the GPU half's seed, apart from the CPU half's and the other ranks'


def read(path, shard=0, shards=1, shuffle=True, name=READER, fill=SHUFFLE_BUFFER):
    """(encoded JPEGs, int32 labels) of one shard of a Caffe2 LMDB, `path` being train/ or val/;
    name: the reader's, which an iterator reads the epoch size from; fill: records held for
    shuffling."""
    jpegs, labels = fn.readers.caffe2(
        path=str(path),
        shard_id=shard,
        num_shards=shards,
        random_shuffle=shuffle,
        initial_fill=fill,
        pad_last_batch=True,
        name=name,
    )
    return jpegs, labels


def decode_crop(jpegs, device, hw_decoder_load=None, size_hint=(0, 0), fast_idct=False):
    """The RandomResizedCrop region of each JPEG, decoded to RGB (HWC uint8). device: 'mixed'
    (GPU) or 'cpu'; hw_decoder_load None: DALI's own share for the hardware decoder; size_hint:
    (width, height) the hardware decoder allocates for up front, (0, 0) DALI's own; fast_idct:
    libjpeg-turbo's faster, less exact integer IDCT where the CPU decodes."""
    extra = {"use_fast_idct": True} if fast_idct else {}
    if device == "mixed":
        if hw_decoder_load is not None:
            extra["hw_decoder_load"] = hw_decoder_load
        if size_hint[0] and size_hint[1]:
            extra.update(preallocate_width_hint=size_hint[0], preallocate_height_hint=size_hint[1])
    return fn.decoders.image_random_crop(
        jpegs,
        device=device,
        output_type=types.RGB,
        adjust_orientation=False,
        random_area=list(SCALE),
        random_aspect_ratio=list(RATIO),
        num_attempts=CROP_ATTEMPTS,
        **extra,
    )


def finish(images, size, mirror, channels_last=False):
    """Resize to size x size (antialiased bilinear), flip where `mirror` is 1, normalize ->
    float32 CHW (HWC if channels_last)."""
    images = fn.resize(images, size=[size, size], interp_type=types.INTERP_LINEAR, antialias=True, dtype=types.FLOAT)
    return fn.crop_mirror_normalize(
        images,
        mirror=mirror,
        mean=[255 * m for m in MEAN],
        std=[255 * s for s in STD],
        dtype=types.FLOAT,
        output_layout="HWC" if channels_last else "CHW",
    )


@pipeline_def
def training_pipeline(
    path,
    shard,
    shards,
    size,
    channels_last,
    hw_decoder_load,
    gpu,
    shuffle=True,
    decoder="cpu",
    size_hint=(0, 0),
    fast_idct=False,
):
    jpegs, labels = read(path, shard, shards, shuffle)
    images = decode_crop(jpegs, decoder, hw_decoder_load, size_hint, fast_idct)
    if gpu and decoder == "cpu":
        images = images.gpu()  # the crops, before resizing: fewer bytes than the 224 px floats
    x = finish(images, size, fn.random.coin_flip(probability=0.5), channels_last)
    y = fn.cast(labels, dtype=types.INT64)
    return x, (y.gpu() if gpu else y)


@pipeline_def
def parts_pipeline(path, first, count, shards, size, channels_last, gpu, shuffle=True, fast_idct=False):
    """dual's CPU pipeline: `count` readers, shards first .. first + count - 1 of `shards`, each
    decoded by libjpeg-turbo in the pipeline's threads and finished where training_pipeline finishes
    them; outputs x0, y0, x1, y1, ... The readers share the one shuffle buffer's worth of records."""
    outputs = []
    for j in range(count):
        jpegs, labels = read(path, first + j, shards, shuffle, part_reader(j), max(1, SHUFFLE_BUFFER // count))
        images = decode_crop(jpegs, "cpu", fast_idct=fast_idct)
        x = finish(images.gpu() if gpu else images, size, fn.random.coin_flip(probability=0.5), channels_last)
        y = fn.cast(labels, dtype=types.INT64)
        outputs += [x, y.gpu() if gpu else y]
    return tuple(outputs)


def part_reader(j):
    """The name of a parts_pipeline's j-th reader: the first is READER, which the iterator reads."""
    return READER if j == 0 else f"{READER}{j}"


@pipeline_def(enable_conditionals=True)
def split_pipeline(
    path, shard, shards, size, channels_last, hw_decoder_load, hw_share, shuffle=True, size_hint=(0, 0), fast_idct=False
):
    """Decoder split, on a GPU: each image's JPEG to the GPU's decoder with probability hw_share,
    else to the CPU threads; both branches' crops meet on the GPU before resizing."""
    jpegs, labels = read(path, shard, shards, shuffle)
    if fn.random.coin_flip(probability=hw_share, dtype=types.BOOL):
        images = decode_crop(jpegs, "mixed", hw_decoder_load, size_hint)
    else:
        images = decode_crop(jpegs, "cpu", fast_idct=fast_idct).gpu()
    x = finish(images, size, fn.random.coin_flip(probability=0.5), channels_last)
    return x, fn.cast(labels, dtype=types.INT64).gpu()


def pipeline(
    path, rank, world_size, size, channels_last, gpu, decoder, hw_decoder_load, hw_share, shuffle, hint, fast_idct, **kw
):
    """The rank's pipeline for `decoder` as it runs on this device (kw: DALI's own arguments)."""
    if decoder == "split":
        return split_pipeline(
            path, rank, world_size, size, channels_last, hw_decoder_load, hw_share, shuffle, hint, fast_idct, **kw
        )
    return training_pipeline(
        path, rank, world_size, size, channels_last, hw_decoder_load, gpu, shuffle, decoder, hint, fast_idct, **kw
    )


def hint_sides(hint, path):
    """(width, height) for the hardware decoder's buffers: hint an integer (both sides; 0: none) or
    'largest', the widest and tallest image of the split, as the data stage's manifest (beside
    the split's folder) records them."""
    if hint != "largest":
        return int(hint), int(hint)
    manifest = Path(path).parent / "manifest.json"
    largest = json.loads(manifest.read_text())["splits"][Path(path).name].get("largest") if manifest.is_file() else None
    if not largest:
        raise StageError(
            f"dali_size_hint largest: {manifest} records no largest image (a copy converted before the field "
            f"existed): convert it again, or set training.pytorch.dali_size_hint to a number of pixels"
        )
    return largest["width"], largest["height"]


def preallocate(pinned_mb, device_mb, device_id):
    """Grows DALI's pinned host and device memory pools now (0: left to grow as batches need it).
    Grown during training, each growth waits for the device (DALI's docs: 'Memory Pool
    Preallocation'), and a pause longer than the batches queued holds the step up. The trainer's
    default (pytorch_options.DALI_POOLS_MB: 1 GiB pinned and 2 GiB on the device at batch 256) is
    part of the setting measured steady on an H100 (docs/decisions.md#dali_pools)."""
    if pinned_mb:
        backend.PreallocatePinnedMemory(pinned_mb << 20)
    if device_mb:
        backend.PreallocateDeviceMemory(device_mb << 20, device_id)


def aligned(pipe, shards, run, parts):
    """A pipeline of several readers runs them in step, and its iterator ends an epoch by the first
    (READER) alone: each reader's shard must make as many runs of `run` images (the last padded),
    or their epochs would drift apart. Shards differ by a record at most, so they do unless a shard
    size and the next straddle a multiple of `run`; every reader meets every shard (they move on each
    epoch), so all of them are checked."""
    n = pipe.reader_meta(READER)["epoch_size"]
    sizes = [(s + 1) * n // shards - s * n // shards for s in range(shards)]
    if len({-(-size // run) for size in sizes}) > 1:
        raise StageError(
            f"training.pytorch.dali_dual_parts {parts}: {n} records in {shards} shards of {min(sizes)} and "
            f"{max(sizes)}, runs of {run} images: the shards give different numbers of runs, so the readers "
            f"of one pipeline would drift apart. Fix: another dali_dual_parts, batch or dali_run_batches"
        )


class DALIBatches:
    """Training batches (images, labels) on `device` from the LMDB split at `path`, as
    gpu_input.GPUBatches gives them: next() -> (x, y), x float32 (N, 3, size, size) (channels_last
    memory when asked), y int64 (N,); epoch after epoch for as long as asked. The tensors are
    views of DALI's output buffers, handed over without a copy and ordered on the caller's current
    CUDA stream; a run's buffers live until its last batch is handed over and dropped. copy (the
    trainer's --dali-copy, benchmarks only): views of a copy made on that stream instead, DALI's
    buffers let go at once (measured no faster: docs/benchmarks.md, the fourth series)."""

    def __init__(
        self,
        path,
        device,
        size,
        batch,
        seed,
        rank=0,
        world_size=1,
        channels_last=False,
        depth=2,
        threads=4,
        hw_decoder_load=None,
        shuffle=True,
        decoder="cpu",
        pinned_mb=0,
        device_mb=0,
        size_hint=0,
        run_batches=1,
        copy=False,
        hw_share=0.0,
        fast_idct=False,
        gpu_threads=1,
        dual_parts=2,
    ):
        self.device = torch.device(device)
        gpu = self.device.type == "cuda"
        self.channels_last = channels_last
        if decoder not in DECODERS:
            raise ValueError(f"decoder {decoder!r}: one of {', '.join(DECODERS)}")
        # split at a share of 0 or 1 is one decoder, without DALI's conditional branches
        if decoder == "split" and hw_share in (0, 1):
            decoder = "mixed" if hw_share else "cpu"
        dual = decoder == "dual"
        decoder = decoder if gpu or dual else "cpu"  # mixed and split need a GPU (dual: both halves on the CPU)
        mixed = gpu and decoder != "cpu"
        self.config = {
            "decoder": decoder,
            "hw_share": hw_share if decoder == "split" else None,
            "threads": threads,
            "prefetch": depth,
            "run_batches": run_batches,
            "copy": copy,
            "fast_idct": fast_idct,
            "hw_decoder_load": hw_decoder_load if mixed else None,
            "size_hint": list(hint_sides(size_hint, path)) if mixed else None,
        }
        index = self.device.index if self.device.index is not None else (torch.cuda.current_device() if gpu else None)
        if gpu:
            preallocate(pinned_mb, device_mb, index)
            self.config.update(pinned_mb=pinned_mb, device_mb=device_mb)
        # (decoder, first shard, readers, shards, threads, seed) of each pipeline
        pipes = [(decoder, rank, 1, world_size, threads, seed)]
        if dual:
            k = dual_parts
            if k < 2 or batch % k:
                raise StageError(
                    f"training.pytorch.dali_dual_parts {k}: the batch ({batch} a GPU) must be a multiple of it, "
                    f"2 or more, a part of every batch from each reader"
                )
            cpu_threads = max(1, threads - gpu_threads)
            self.config.update(hw_share=1 / k, dual_parts=k, dual_threads=[cpu_threads, gpu_threads])
            pipes = [
                ("parts", k * rank, k - 1, k * world_size, cpu_threads, seed),
                ("mixed" if gpu else "cpu", k * rank + k - 1, 1, k * world_size, gpu_threads, seed + DUAL_SEED_STEP),
            ]
        self.part = batch // sum(p[2] for p in pipes)  # images of a batch from each reader
        kw = {"batch_size": self.part * run_batches, "device_id": index, "prefetch_queue_depth": depth}
        self.pipes, self.readers = [], []
        for part_decoder, shard, readers, shards, part_threads, part_seed in pipes:
            if part_decoder == "parts":
                made = parts_pipeline(
                    str(path), shard, readers, shards, size, channels_last, gpu, shuffle, fast_idct,
                    num_threads=part_threads, seed=part_seed, **kw,
                )  # fmt: skip
            else:
                made = pipeline(
                    str(path), shard, shards, size, channels_last, gpu, part_decoder, hw_decoder_load, hw_share,
                    shuffle, tuple(self.config["size_hint"] or (0, 0)), fast_idct,
                    num_threads=part_threads, seed=part_seed, **kw,
                )  # fmt: skip
            self.pipes.append(made)
            self.readers.append(readers)
        self.its = []
        for pipe, readers in zip(self.pipes, self.readers):
            pipe.build()
            if readers > 1:
                aligned(pipe, pipes[0][3], self.part * run_batches, dual_parts)
            names = [f"{k}{j}" for j in range(readers) for k in ("x", "y")]
            self.its.append(
                DALIGenericIterator(
                    [pipe], names, reader_name=READER, last_batch_policy=LastBatchPolicy.DROP, auto_reset=True
                )
            )
        self.batch, self.run_batches, self.queued = batch, run_batches, []
        self.epochs, self.times = 0, []

    def __next__(self):
        t = time.perf_counter()
        if not self.queued:
            self.queued = self._run()
        x, y = self.queued.pop(0)
        self.times.append(time.perf_counter() - t)
        return x, y

    def _outputs(self):
        """Each pipeline's next run; where one's epoch has ended (auto_reset has started its next),
        the others' runs of the old epoch are dropped and every pipeline starts the next together."""
        outs = []
        for it in self.its:
            try:
                outs.append(next(it)[0])
            except StopIteration:
                outs.append(None)
        if all(out is not None for out in outs):
            return outs
        self.epochs += 1
        for it, out in zip(self.its, outs):
            if out is not None:
                for _ in it:  # the rest of its epoch, at most a run
                    pass
        return [next(it)[0] for it in self.its]

    def _run(self):
        """The next run's output as the step's batches, in order."""
        outs = self._outputs()
        parts = [(o[f"x{j}"], o[f"y{j}"]) for o, readers in zip(outs, self.readers) for j in range(readers)]
        b, h = self.batch, self.part
        if len(parts) == 1:
            x, y = parts[0][0], parts[0][1].view(-1)
            if self.config["copy"]:  # on the current stream, behind DALI's output; DALI's buffers go now
                x, y = x.clone(), y.clone()
                del outs, parts
            batches = [(x[i * b : (i + 1) * b], y[i * b : (i + 1) * b]) for i in range(self.run_batches)]
        else:  # each step's parts joined (NHWC before the view below, so the join keeps its layout)
            batches = [
                tuple(torch.cat([part[k][i * h : (i + 1) * h] for part in parts]) for k in (0, 1))
                for i in range(self.run_batches)
            ]
            batches = [(x, y.view(-1)) for x, y in batches]
        if self.channels_last:  # NHWC memory seen as NCHW: PyTorch's channels_last
            batches = [(x.permute(0, 3, 1, 2), y) for x, y in batches]
        return batches

    def __iter__(self):
        return self

    def stats(self, skip=0):
        """The pipeline's settings, and the mean seconds a next() call (one step's batch) took after
        `skip` batches."""
        times = self.times[skip:]
        return {
            **self.config,
            "batches": len(self.times),
            "epochs_completed": self.epochs,
            **({"next_s": statistics.fmean(times)} if times else {}),
        }

    def close(self):
        self.its = self.pipes = []
        self.queued = []
