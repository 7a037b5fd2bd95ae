"""Read an lmdb output dir's train split through the GPU input path (gpu_input, here on CPU
tensors) and through the CPU loader's Pillow transform with the same crop boxes and flips, and
compare; also compare gpu_input's crop-box sampler with torchvision's RandomResizedCrop.
Prints JSON:  gpu_preprocess.py LMDB_DIR IMAGE_SIZE"""

import io
import json
import random
import statistics
import sys

import torch
from PIL import Image
from torchvision.transforms import v2 as T
from torchvision.transforms.v2 import functional as TF

from workflow_scripts.data.lmdb_dataset import LMDBImageNet
from workflow_scripts.train import augment, gpu_input

size = int(sys.argv[2])
torch.manual_seed(0)  # torchvision's crop sampler draws from torch's generator
ds = LMDBImageNet(f"{sys.argv[1]}/train")
items = [ds.raw(i) for i in range(len(ds))]
rng = random.Random(0)

# The GPU path, batched, on CPU tensors: the DataLoader's collate, then decode + augment.
flat, sizes, labels = gpu_input.collate_raw(items)
images = gpu_input.decode(gpu_input.split_batch(flat, sizes), "cpu")
boxes = [gpu_input.crop_box(im.shape[1], im.shape[2], rng) for im in images]
flips = [i % 2 == 1 for i in range(len(images))]
fast = gpu_input.augment(images, boxes, flips, size, channels_last=True)

# The CPU loader's transform with the same parameters (RandomResizedCrop = resized_crop with
# its drawn box; RandomHorizontalFlip = hflip), on the Pillow image the CPU path decodes.
post = T.Compose([T.PILToTensor(), T.ToDtype(torch.float32, scale=True), T.Normalize(augment.MEAN, augment.STD)])
ref = []
for (jpeg, _), (t, l, h, w), f in zip(items, boxes, flips):
    im = TF.resized_crop(Image.open(io.BytesIO(jpeg)).convert("RGB"), t, l, h, w, [size, size], antialias=True)
    ref.append(post(TF.horizontal_flip(im) if f else im))
ref = torch.stack(ref)
std = torch.tensor(augment.STD).view(1, 3, 1, 1)
levels = ((fast - ref) * std * 255).abs()  # differences in 8-bit pixel levels

# The batched resize against F.interpolate(antialias=True) image by image, on random images of
# ImageNet's shapes, one larger than BATCHED_MAX_SIDE (resized on its own), one upscaled.
g = torch.Generator().manual_seed(0)
rand = [
    torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=g)
    for h, w in [(375, 500), (500, 375), (333, 500), (700, 600), (40, 50)]
]
rboxes = [gpu_input.crop_box(im.shape[1], im.shape[2], rng) for im in rand]
rflips = [True, False, True, False, True]
batched = gpu_input.augment(rand, rboxes, rflips, size)
single = torch.cat([gpu_input._resize_one(im, b, f, size) for im, b, f in zip(rand, rboxes, rflips)])
resize_levels = ((batched * std + torch.tensor(augment.MEAN).view(1, 3, 1, 1)) * 255 - single).abs()

# Crop boxes: gpu_input's sampler against torchvision's on one ImageNet-sized image.
pil = Image.new("RGB", (500, 375))
ours = [gpu_input.crop_box(375, 500, rng) for _ in range(4000)]
theirs = [T.RandomResizedCrop.get_params(pil, list(gpu_input.SCALE), list(gpu_input.RATIO)) for _ in range(4000)]


def stats(bs):
    return {
        "area": statistics.fmean(h * w / (375 * 500) for _, _, h, w in bs),
        "aspect": statistics.fmean(w / h for _, _, h, w in bs),
        "centre_x": statistics.fmean((l + w / 2) / 500 for _, l, _, w in bs),
    }


print(
    json.dumps(
        {
            "images": len(items),
            "shape": list(fast.shape),
            "channels_last": fast.is_contiguous(memory_format=torch.channels_last),
            "labels_equal": labels.tolist() == [y for _, y in items],
            "mean_abs_levels": levels.mean().item(),
            "p99_abs_levels": levels.flatten().quantile(0.99).item(),
            "max_abs_levels": levels.max().item(),
            "batched_resize_max_levels": resize_levels.max().item(),
            "ours": stats(ours),
            "torchvision": stats(theirs),
        }
    )
)
