"""ImageNet batches decoded and augmented on the GPU, for PyTorch training from the LMDB.

Why: the CPU path (LMDBImageNet + Pillow in DataLoader workers) decodes and resizes every JPEG on a
CPU core, and the cores of a node feed one GPU far fewer images/s than it trains ResNet-50 at (the
figures: docs/decisions.md#input and docs/history/pytorch-gpu-runs.md). Here the DataLoader workers
only read each record's JPEG bytes (an LMDB lookup and a protobuf parse, microseconds), and the
training process, in a background thread on its own CUDA stream, one or more batches ahead:

  1. decodes the whole batch with nvJPEG: torchvision.io.decode_jpeg on CUDA (its batched call
     sends baseline JPEGs to the hardware JPEG engines of an A100/H100), or nvImageCodec's
     decoder (decoder="nvimgcodec": hardware engine first, CUDA nvJPEG for the rest), which
     works on the lane's own CUDA stream where torchvision's uses a stream of its own;
  2. crops each image as RandomResizedCrop does (the same parameter distribution, from its own
     seeded generator), resizes the crop to image_size with antialiased bilinear interpolation
     (the filter of torchvision's tensor resize and of Pillow), flips half, normalizes with the
     ImageNet mean and std, in channels_last when asked: for the whole batch at once, as two
     batched matrix products (a per-image resize costs the host a few launches per image, time
     the training step's own launches need).

The data stage stores every image as an RGB JPEG (CMYK, grayscale and PNG files re-encoded), and
decoding asks for RGB anyway, so a 1-channel JPEG would still come out with 3 channels.
The same functions run on CPU tensors (decode_jpeg on the CPU), which is how the tests compare
this path with the CPU loader's preprocessing.
"""

import collections
import contextlib
import itertools
import math
import queue
import random
import threading
import time
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from torchvision.io import ImageReadMode, decode_jpeg

from ..common import schema
from .augment import MEAN, RATIO, SCALE, STD

DECODERS = tuple(schema.section("training.pytorch")["jpeg_decoder"]["enum"])

# The strided nested tensor used for padding is a stable, tested path; its prototype notice is noise.
warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors is in prototype stage")


class RawJPEGs(torch.utils.data.Dataset):
    """(JPEG bytes, label) per record of an LMDBImageNet: no decoding in the workers."""

    def __init__(self, lmdb_dataset):
        self.ds = lmdb_dataset

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, index):
        return self.ds.raw(index)


def collate_raw(items):
    """A batch as three tensors (all JPEG bytes back to back, their lengths, the labels): one
    shared-memory transfer per batch from a worker, not one per image."""
    sizes = [len(jpeg) for jpeg, _ in items]
    flat = torch.empty(sum(sizes), dtype=torch.uint8)
    view, pos = flat.numpy(), 0
    for (jpeg, _), n in zip(items, sizes):
        view[pos : pos + n] = np.frombuffer(jpeg, dtype=np.uint8)
        pos += n
    return flat, torch.tensor(sizes, dtype=torch.int64), torch.tensor([y for _, y in items], dtype=torch.int64)


def crop_box(height, width, rng, scale=SCALE, ratio=RATIO):
    """RandomResizedCrop's parameters, torchvision's algorithm (ten tries of a random area and
    log-uniform aspect ratio, then the centre crop of the clamped ratio), drawn from `rng` (a
    random.Random) -> (top, left, h, w)."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, height - h), rng.randint(0, width - w), h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        h, w = height, int(round(height * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def decode(jpegs, device):
    """List of 1-D uint8 CPU tensors (JPEG files) -> list of 3 x H x W uint8 tensors on `device`
    (one batched nvJPEG call on CUDA)."""
    return decode_jpeg(jpegs, mode=ImageReadMode.RGB, device=device)


class NvImgCodec:
    """nvImageCodec's batched decoder as a `decode`: on CUDA the hardware JPEG engine first and
    CUDA nvJPEG for what the engine cannot take (progressive files), ordered on the calling
    thread's current stream; on a CPU device libjpeg-turbo (how the tests compare it). Planar RGB
    out, as torchvision's decode_jpeg, EXIF orientation ignored as it does."""

    def __init__(self, device, keep=2):
        try:
            from nvidia import nvimgcodec
        except ImportError as exc:
            raise RuntimeError(
                "training.pytorch.jpeg_decoder is nvimgcodec, but nvImageCodec is not installed "
                "(pip install nvidia-nvimgcodec-cu13 nvidia-nvjpeg)"
            ) from exc
        self.nv, self.device = nvimgcodec, torch.device(device)
        cuda = self.device.type == "cuda"
        kinds = (nvimgcodec.HW_GPU_ONLY, nvimgcodec.GPU_ONLY) if cuda else (nvimgcodec.CPU_ONLY,)
        if not cuda:
            index = nvimgcodec.NVIMGCODEC_DEVICE_CPU_ONLY
        else:
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        self.decoder = nvimgcodec.Decoder(device_id=index, backends=[nvimgcodec.Backend(k) for k in kinds])
        self.params = nvimgcodec.DecodeParams(
            color_spec=nvimgcodec.ColorSpec.SRGB,
            apply_exif_orientation=False,
            sample_format=nvimgcodec.SampleFormat.P_RGB,
        )
        # Decoded buffers belong to nvImageCodec; the last batches' stay referenced until the
        # lane's stream has certainly moved past the kernels that read them.
        self.kept = collections.deque(maxlen=keep)

    def __call__(self, jpegs, device=None):  # device: decode()'s signature; this decoder has its own
        srcs = [self.nv.CodeStream(j.numpy()) for j in jpegs]
        if self.device.type == "cuda":
            stream = torch.cuda.current_stream(self.device).cuda_stream
            images = self.decoder.decode(srcs, params=self.params, cuda_stream=stream)
        else:
            images = self.decoder.decode(srcs, params=self.params)
        bad = [i for i, im in enumerate(images) if im is None]
        if bad:
            raise RuntimeError(f"nvImageCodec could not decode {len(bad)} of {len(images)} JPEGs (first: #{bad[0]})")
        self.kept.append(images)
        if self.device.type == "cuda":
            return [torch.as_tensor(im, device=self.device) for im in images]
        return [torch.from_numpy(np.asarray(im)) for im in images]


def make_decoder(name, device):
    """A `decode(jpegs, device)` by name (training.pytorch.jpeg_decoder)."""
    if name == "nvimgcodec":
        return NvImgCodec(device)
    if name != "torchvision":
        raise ValueError(f"unknown JPEG decoder {name!r} (one of {', '.join(DECODERS)})")
    return decode


# Images whose longer side is at most this are resized together (padded to the batch's largest);
# the rare larger ones (a few in ILSVRC2012 run to thousands of pixels) one by one, so one
# outlier does not inflate the whole batch's padding.
BATCHED_MAX_SIDE = 512


def resize_weights(starts, lengths, size, span):
    """(N, size, span) weights of an antialiased bilinear resize of image n's positions
    starts[n] .. starts[n] + lengths[n] - 1 (of an axis `span` long) to `size` outputs: the
    triangle filter widened by the downscale factor and normalized, as F.interpolate(...,
    antialias=True) and Pillow compute it. starts, lengths: float tensors (N,) on the device."""
    device = starts.device
    scale = (lengths / size).view(-1, 1, 1)
    support = scale.clamp(min=1.0)  # the filter's half-width in input pixels
    centre = scale * (torch.arange(size, device=device, dtype=torch.float32).view(1, -1, 1) + 0.5)
    pos = torch.arange(span, device=device, dtype=torch.float32).view(1, 1, -1) - starts.view(-1, 1, 1)
    w = (1 - ((pos + 0.5 - centre) / support).abs()).clamp(min=0)
    w = w * ((pos >= 0) & (pos < lengths.view(-1, 1, 1)))
    return w / w.sum(-1, keepdim=True)


def _pad(images, dtype):
    """The images in one (N, 3, Hmax, Wmax) tensor of `dtype`, zero-padded (three kernels
    through a nested tensor, where a per-image copy would be N launches)."""
    return torch.nested.as_nested_tensor(images).to(dtype).to_padded_tensor(0.0)


def _resize_batched(images, boxes, flips, size):
    """Crop + antialiased resize + flip of many images as two batched matrix products:
    out_n = Wy_n @ image_n @ Wx_n^T, the crop being where the weights are non-zero and the flip
    the order of Wx's rows. On a GPU in float16 (exact for 0..255; the weights carry about 0.1
    of a level of rounding) on the tensor cores; on a CPU in float32."""
    device = images[0].device
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    padded = _pad(images, dtype)
    box = torch.tensor(boxes, dtype=torch.float32).to(device)  # (N, 4): top, left, h, w
    wy = resize_weights(box[:, 0], box[:, 2], size, padded.shape[2]).to(dtype)
    wx = resize_weights(box[:, 1], box[:, 3], size, padded.shape[3])
    flip = torch.tensor(flips, dtype=torch.bool).to(device).view(-1, 1, 1)
    wx = torch.where(flip, wx.flip(1), wx).to(dtype)
    rows = torch.matmul(wy.unsqueeze(1), padded)  # (N, 3, size, Wmax)
    return torch.matmul(rows, wx.transpose(1, 2).unsqueeze(1))  # (N, 3, size, size)


def _resize_one(image, box, flip, size):
    t, l, h, w = box
    x = F.interpolate(
        image[:, t : t + h, l : l + w].unsqueeze(0).float(),
        size=(size, size),
        mode="bilinear",
        align_corners=False,
        antialias=True,
    )
    return x.flip(-1) if flip else x


def augment(images, boxes, flips, size, channels_last=False, dtype=torch.float32):
    """Crop, resize to size x size, flip and normalize a list of 3 x H x W uint8 images on one
    device -> (N, 3, size, size) `dtype`. boxes: (top, left, h, w) per image; flips: bool each.
    About fifteen kernel launches for the whole batch, whatever its size."""
    device = images[0].device
    small = [i for i, im in enumerate(images) if max(im.shape[1:]) <= BATCHED_MAX_SIDE]
    if len(small) == len(images):
        x = _resize_batched(images, boxes, flips, size)
    else:
        x = torch.empty((len(images), 3, size, size), device=device)
        if small:
            x[torch.tensor(small, device=device)] = _resize_batched(
                [images[i] for i in small], [boxes[i] for i in small], [flips[i] for i in small], size
            ).float()
        for i in sorted(set(range(len(images))) - set(small)):
            x[i] = _resize_one(images[i], boxes[i], flips[i], size)[0]
    # (x / 255 - mean) / std as one multiply-add, written straight into the output layout.
    scale = torch.tensor([1 / (255 * s) for s in STD], device=device).view(1, 3, 1, 1)
    shift = torch.tensor([-m / s for m, s in zip(MEAN, STD)], device=device).view(1, 3, 1, 1)
    out = torch.empty(
        x.shape,
        dtype=dtype,
        device=device,
        memory_format=torch.channels_last if channels_last else torch.contiguous_format,
    )
    return torch.addcmul(shift, x, scale, out=out)


def split_batch(flat, sizes):
    return list(torch.split(flat, sizes.tolist()))


class GPUBatches:
    """Training batches (images, labels) on `device`, decoded and augmented ahead of the
    consumer by `lanes` background threads, each on its own CUDA stream.

    `batches` yields collate_raw batches forever (the caller handles epochs). A dealer thread
    hands them round-robin to the lanes; each lane decodes and augments its batches one after
    another (the nvJPEG call holds its thread until the batch is decoded), up to `depth` batches
    ahead; the consumer takes them round-robin again, so the order and each batch's crops (a
    seeded generator per lane) do not depend on thread timing. Two lanes overlap one batch's
    decode with another's augmentation, which one serial thread cannot (docs/decisions.md#input_lanes).
    A lane's work is ordered before the consumer's use of a batch by an event the consumer's
    stream waits on; the tensors are marked as used on the consumer's stream so the caching
    allocator does not hand their memory back to the lane while a step still reads them.

    Per batch each lane records how long it waited for the workers' bytes, for the
    nvJPEG call and for launching the augmentation (stats()). `decoder`: one of DECODERS, made
    per lane in the lane's thread."""

    def __init__(self, batches, device, size, seed, channels_last=False, depth=2, lanes=1, decoder="torchvision"):
        self.device, self.size, self.channels_last = torch.device(device), size, channels_last
        self.decoder = decoder
        self.batches = batches
        self.stop = threading.Event()
        n = max(1, lanes)
        self.inboxes = [queue.Queue(maxsize=1) for _ in range(n)]
        self.outboxes = [queue.Queue(maxsize=max(1, -(-depth // n))) for _ in range(n)]
        self.rngs = [random.Random(seed + 7919 * lane) for lane in range(n)]
        self.times = [[] for _ in range(n)]  # per lane: (fetch, decode, augment launch) seconds per batch
        self.turn = 0
        self.threads = [threading.Thread(target=self._deal, name="gpu-input-dealer", daemon=True)]
        self.threads += [
            threading.Thread(target=self._lane, args=(k,), name=f"gpu-input-{k}", daemon=True) for k in range(n)
        ]
        for t in self.threads:
            t.start()

    def _deal(self):
        try:
            batches = iter(self.batches)
            for k in itertools.cycle(range(len(self.inboxes))):
                t0 = time.perf_counter()
                item = next(batches)
                if not self._put(self.inboxes[k], (item, time.perf_counter() - t0)):
                    return
        except BaseException as exc:  # handed on to the consumer, which raises it
            for box in self.inboxes:
                self._put(box, exc)

    def _lane(self, k):
        cuda = self.device.type == "cuda"
        rng, out = self.rngs[k], self.outboxes[k]
        try:
            if cuda:  # the current device and stream are per thread
                torch.cuda.set_device(self.device)
                stream = torch.cuda.Stream(self.device)
            decode_batch = make_decoder(self.decoder, self.device)
            while not self.stop.is_set():
                item = self._get(self.inboxes[k])
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                (flat, sizes, labels), fetch = item
                t1 = time.perf_counter()
                with torch.cuda.stream(stream) if cuda else contextlib.nullcontext():
                    images = decode_batch(split_batch(flat, sizes), self.device)
                    t2 = time.perf_counter()
                    boxes = [crop_box(img.shape[1], img.shape[2], rng) for img in images]
                    flips = [rng.random() < 0.5 for _ in images]
                    x = augment(images, boxes, flips, self.size, self.channels_last)
                    y = labels.to(self.device, non_blocking=False)
                    ready = None
                    if cuda:
                        ready = torch.cuda.Event()
                        ready.record(stream)
                self.times[k].append((fetch, t2 - t1, time.perf_counter() - t2))
                if not self._put(out, (x, y, ready)):
                    return
        except BaseException as exc:
            self._put(out, exc)

    def stats(self, skip=0):
        """Mean seconds per batch of each stage of a lane, over the batches after `skip`."""
        per_lane = -(-skip // len(self.times))
        times = [t for lane in self.times for t in lane[per_lane:]]
        if not times:
            return {}
        return {
            name: sum(t[k] for t in times) / len(times)
            for k, name in enumerate(("fetch_s", "decode_s", "augment_launch_s"))
        } | {"batches": len(times), "lanes": len(self.times)}

    def _put(self, box, item):
        while not self.stop.is_set():
            try:
                box.put(item, timeout=0.5)
                return True
            except queue.Full:
                continue
        return False

    def _get(self, box):
        while not self.stop.is_set():
            try:
                return box.get(timeout=0.5)
            except queue.Empty:
                continue
        return None

    def __next__(self):
        item = self.outboxes[self.turn].get()
        self.turn = (self.turn + 1) % len(self.outboxes)
        if isinstance(item, BaseException):
            raise RuntimeError("GPU input pipeline failed") from item
        x, y, ready = item
        if ready is not None:
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(ready)
            x.record_stream(stream)
            y.record_stream(stream)
        return x, y

    def __iter__(self):
        return self

    def close(self):
        self.stop.set()
        for box in self.inboxes + self.outboxes:  # unblock a put waiting on a full queue
            while True:
                try:
                    box.get_nowait()
                except queue.Empty:
                    break
        for t in self.threads:
            t.join(timeout=10)
