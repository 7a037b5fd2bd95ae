"""The embedded default dataset: a small, learnable ImageNet stand-in in the exact raw layout.

Each class is a coloured shape (shape x hue) on a noisy, cluttered background, drawn at a random
place, size and angle, so a ResNet reaches high top-1 in minutes on a CPU yet has to learn shape
and colour rather than a constant. Images are ImageNet-sized JPEGs (about 400-500 x 300-375).
Like the real set, a few train files are CMYK JPEGs, a PNG named .JPEG, or grayscale.
Everything is seeded per image, so the same config gives byte-identical files.
"""

import argparse
import colorsys
import csv
import io
import math
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from ..common.atomic import atomic_dir
from ..common.errors import StageError, run_main
from ..common.schema import default as config_default
from .layout import record_generated

SHAPES = ("disc", "square", "triangle", "cross", "ring", "bar")
HUES = {"red": 0.0, "yellow": 0.16, "green": 0.33, "cyan": 0.5, "blue": 0.64, "magenta": 0.83}
MAX_CLASSES = len(SHAPES) * len(HUES)
VAL_LAYOUTS = ("synset-list", "kaggle-csv", "folders")


def class_spec(c):
    """Class c -> (wnid, shape, hue name). wnids sort in class order, as real ones do."""
    shape = SHAPES[c % len(SHAPES)]
    hue = list(HUES)[(c // len(SHAPES) + c) % len(HUES)]
    return f"n{10000000 + c:08d}", shape, hue


def _polygon(shape, cx, cy, r, angle):
    def rot(points):
        ca, sa = math.cos(angle), math.sin(angle)
        return [(cx + x * ca - y * sa, cy + x * sa + y * ca) for x, y in points]

    if shape == "square":
        return rot([(-r, -r), (r, -r), (r, r), (-r, r)])
    if shape == "triangle":
        return rot([(r * math.cos(a), r * math.sin(a)) for a in (-math.pi / 2, math.pi / 6, 5 * math.pi / 6)])
    if shape == "cross":
        t = r / 3
        return rot(
            [(-t, -r), (t, -r), (t, -t), (r, -t), (r, t), (t, t), (t, r), (-t, r), (-t, t), (-r, t), (-r, -t), (-t, -t)]
        )
    if shape == "bar":
        return rot([(-r, -r / 4), (r, -r / 4), (r, r / 4), (-r, r / 4)])
    raise ValueError(shape)


def render(c, rng, size=None):
    """One image of class c as an RGB PIL image (of `size` (w, h), or a random ImageNet-like one)."""
    _, shape, hue = class_spec(c)
    w, h = int(rng.integers(400, 501)), int(rng.integers(300, 376))
    if rng.random() < 0.2:
        w, h = h, w
    if size:
        w, h = size
    # Low-frequency coloured background plus grain: the grain gives realistic JPEG sizes.
    coarse = rng.integers(40, 200, size=(6, 8, 3), dtype=np.uint8)
    bg = Image.fromarray(coarse).resize((w, h), Image.Resampling.BICUBIC)
    arr = np.asarray(bg, dtype=np.int16) + rng.normal(0, 30, size=(h, w, 3)).astype(np.int16)
    im = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(im)
    for _ in range(int(rng.integers(2, 5))):  # grey clutter the model must learn to ignore
        g = int(rng.integers(60, 200))
        x, y, s = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(10, 40)
        draw.ellipse((x - s, y - s, x + s, y + s), fill=(g, g, g))
    r = rng.uniform(0.18, 0.3) * min(w, h)
    cx, cy = rng.uniform(r, w - r), rng.uniform(r, h - r)
    rgb = colorsys.hsv_to_rgb(
        (HUES[hue] + rng.uniform(-0.02, 0.02)) % 1.0, rng.uniform(0.75, 1.0), rng.uniform(0.75, 1.0)
    )
    fill = tuple(int(255 * v) for v in rgb)
    if shape == "disc":
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=fill)
    elif shape == "ring":
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), outline=fill, width=max(4, int(r / 3)))
    else:
        draw.polygon(_polygon(shape, cx, cy, r, rng.uniform(0, math.pi)), fill=fill)
    return im


def _save(im, path, kind, quality=90):
    """Write the image as ImageNet stores it: RGB JPEG, or one of its quirks (still named .JPEG)."""
    buf = io.BytesIO()
    if kind == "cmyk":
        im.convert("CMYK").save(buf, format="JPEG", quality=quality)
    elif kind == "gray":
        im.convert("L").save(buf, format="JPEG", quality=quality)
    elif kind == "png":
        im.save(buf, format="PNG", compress_level=1)
    else:
        im.save(buf, format="JPEG", quality=quality)
    path.write_bytes(buf.getvalue())


def _broken_bytes(kind, rng):
    if kind == "empty":
        return b""
    if kind == "text":
        return b"<html><body>404 Not Found</body></html>\n"
    buf = io.BytesIO()  # truncated: a real JPEG cut in half
    render(0, rng).save(buf, format="JPEG", quality=90)
    return buf.getvalue()[: len(buf.getvalue()) // 2]


def make(
    out,
    classes=16,
    train_per_class=30,
    val_per_class=20,
    seed=2018,
    val_layout="synset-list",
    quirks=True,
    broken=False,
    size=None,
    quality=90,
):
    if not 2 <= classes <= MAX_CLASSES:
        raise StageError(f"dataset.embedded.classes must be 2..{MAX_CLASSES}, got {classes}")
    if val_layout not in VAL_LAYOUTS:
        raise StageError(f"dataset.embedded.val_layout must be one of {VAL_LAYOUTS}, got {val_layout!r}")
    with atomic_dir(out) as root:
        wnids = [class_spec(c)[0] for c in range(classes)]
        with open(root / "LOC_synset_mapping.txt", "w") as f:
            for c in range(classes):
                wnid, shape, hue = class_spec(c)
                f.write(f"{wnid} {hue} {shape}\n")
        # Real ILSVRC2012 quirks on fixed train images of the first classes.
        quirk_of = {(1, 0): "cmyk", (2, 0): "png", (3, 0): "gray", (4, 1): "gray"} if quirks else {}
        for c, wnid in enumerate(wnids):
            d = root / "train" / wnid
            d.mkdir(parents=True)
            for i in range(train_per_class):
                rng = np.random.default_rng([seed, 0, c, i])
                _save(render(c, rng, size), d / f"{wnid}_{i + 1}.JPEG", quirk_of.get((c, i), "rgb"), quality)
        # Val images are numbered in an interleaved class order, as in the real set.
        order = [(c, i) for i in range(val_per_class) for c in range(classes)]
        np.random.default_rng([seed, 1]).shuffle(order)
        val_dir = root / "val"
        val_dir.mkdir()
        labels = []
        for n, (c, i) in enumerate(order, start=1):
            rng = np.random.default_rng([seed, 2, c, i])
            name = f"ILSVRC2012_val_{n:08d}.JPEG"
            if val_layout == "folders":
                (val_dir / wnids[c]).mkdir(exist_ok=True)
                path = val_dir / wnids[c] / name
            else:
                path = val_dir / name
            _save(render(c, rng, size), path, "cmyk" if quirks and n == 1 else "rgb", quality)
            labels.append((n, wnids[c]))
        if broken:
            for k, kind in enumerate(("truncated", "empty", "text")):
                rng = np.random.default_rng([seed, 3, k])
                (root / "train" / wnids[k] / f"{wnids[k]}_broken_{kind}.JPEG").write_bytes(_broken_bytes(kind, rng))
                n = len(labels) + 1
                vdir = val_dir / wnids[k] if val_layout == "folders" else val_dir
                vdir.mkdir(exist_ok=True)
                (vdir / f"ILSVRC2012_val_{n:08d}.JPEG").write_bytes(_broken_bytes(kind, rng))
                labels.append((n, wnids[k]))
        if val_layout == "synset-list":
            synset_list = root / "imagenet_2012_validation_synset_labels.txt"
            synset_list.write_text("".join(f"{wnid}\n" for _, wnid in labels))
            # one line per image of this small val set, not the full set's 50,000: said beside it
            record_generated(synset_list, "workflow_scripts.data.embedded")
        elif val_layout == "kaggle-csv":
            with open(root / "LOC_val_solution.csv", "w", newline="") as f:
                wr = csv.writer(f)
                wr.writerow(["ImageId", "PredictionString"])
                for n, wnid in labels:
                    wr.writerow([f"ILSVRC2012_val_{n:08d}", f"{wnid} 0 0 10 10"])
    return Path(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--classes", type=int, default=config_default("dataset.embedded.classes"))
    ap.add_argument("--train-per-class", type=int, default=config_default("dataset.embedded.train_per_class"))
    ap.add_argument("--val-per-class", type=int, default=config_default("dataset.embedded.val_per_class"))
    ap.add_argument("--seed", type=int, default=config_default("dataset.embedded.seed"))
    ap.add_argument("--val-layout", default=config_default("dataset.embedded.val_layout"), choices=VAL_LAYOUTS)
    ap.add_argument("--no-quirks", action="store_true")
    ap.add_argument("--broken", action="store_true", help="add truncated, empty and non-image files")
    a = ap.parse_args()
    make(
        a.out,
        a.classes,
        a.train_per_class,
        a.val_per_class,
        a.seed,
        a.val_layout,
        quirks=not a.no_quirks,
        broken=a.broken,
    )


if __name__ == "__main__":
    run_main(main)
