"""An ImageNet-like benchmark set: natural photographs at ILSVRC2012's sizes, in its raw layout.

The embedded default's rendered shapes decode faster than photographs, so an input path tuned on
them can starve real GPUs. This set is made of the photographs that registry packages ship
(scikit-image's and scikit-learn's sample photos, matplotlib's Grace Hopper): each image is a
crop of one of them, or a mosaic of several, rescaled, flipped and colour-jittered, with a little
sensor-like noise, then saved at a JPEG quality drawn per image. Sizes follow ILSVRC2012 train
(docs/history/imagenet-input.md#an-imagenet-like-set states both sets' statistics): most images 500 x 375 or
500 x 333 either way up, some smaller, a few small ones, and a tail of 1.5-4 megapixel photos; and
ILSVRC's quirks: grayscale JPEGs, CMYK JPEGs and a PNG named .JPEG.

    python -m benchmarks.imagenet_like --out DIR                    # photos from the registry
    python -m benchmarks.imagenet_like --save-sources SRC          # the photos alone, to carry
    python -m benchmarks.imagenet_like --out DIR --sources SRC     # where nothing can be fetched

Every image is seeded on its own, so the same arguments give byte-identical files on any number of
processes.
"""

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import zipfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image, ImageEnhance

from workflow_scripts.common.atomic import atomic_dir
from workflow_scripts.common.errors import StageError, run_main
from workflow_scripts.data import layout

# (package pinned, path inside its wheel): photographs only, no rendered test patterns.
WHEEL_PHOTOS = {
    "scikit-image==0.26.0": [
        f"skimage/data/{n}"
        for n in (
            "astronaut.png",
            "brick.png",
            "camera.png",
            "chelsea.png",
            "coffee.png",
            "coins.png",
            "grass.png",
            "gravel.png",
            "hubble_deep_field.jpg",
            "ihc.png",
            "moon.png",
            "motorcycle_left.png",
            "motorcycle_right.png",
            "retina.jpg",
            "rocket.jpg",
        )
    ],
    "scikit-learn==1.9.1": ["sklearn/datasets/images/china.jpg", "sklearn/datasets/images/flower.jpg"],
}
MATPLOTLIB_PHOTO = "sample_data/grace_hopper.jpg"  # inside matplotlib's mpl-data, installed with it
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dlscale" / "photo-wheels"

# Image sizes as (share, kind). ILSVRC2012 train's own mix is summarized in docs/history/imagenet-input.md;
# these shares are this set's, chosen to follow it.
SIZE_MIX = (
    (0.46, "500x375"),
    (0.20, "500x333"),
    (0.20, "other"),  # longer side 300-500, shorter side 0.5-1 of it
    (0.12, "small"),  # longer side 80-300
    (0.02, "large"),  # 1.5-4 megapixels
)
PORTRAIT = 0.2  # share of images stood on end
QUALITY = (92, 98)  # JPEG quality, uniform; Pillow's 4:2:0 chroma, as most camera and web JPEGs
GRAY_SHARE = 0.01  # grayscale JPEGs
CMYK_COUNT, PNG_COUNT = 2, 1  # fixed counts in train, the first classes' first images


def _fetch_wheel(spec):
    CACHE.mkdir(parents=True, exist_ok=True)
    name = spec.split("==")[0].replace("-", "_")
    found = sorted(CACHE.glob(f"{name}-{spec.split('==')[1]}-*.whl"))
    if found:
        return found[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(CACHE), spec]
    done = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(CACHE.glob(f"{name}-*.whl"))
    if done.returncode or not found:
        raise StageError(
            f"could not download {spec}'s wheel for its sample photos ({done.stderr.strip()[-300:]}); "
            "on a machine without the registry, save them elsewhere with --save-sources and pass --sources"
        )
    return found[0]


def registry_photos():
    """{name: encoded bytes} of the sample photos, from the pinned wheels and matplotlib."""
    photos = {}
    for spec, members in WHEEL_PHOTOS.items():
        with zipfile.ZipFile(_fetch_wheel(spec)) as z:
            for m in members:
                photos[Path(m).name] = z.read(m)
    import matplotlib

    photos["grace_hopper.jpg"] = (Path(matplotlib.get_data_path()) / MATPLOTLIB_PHOTO).read_bytes()
    return photos


def folder_photos(folder):
    folder = Path(folder)
    photos = {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.suffix.lower() in (".png", ".jpg")}
    if not photos:
        raise StageError(f"--sources {folder}: no .png or .jpg photographs in it")
    return photos


def load(photos):
    """The photos as RGB arrays (grayscale ones repeated over three channels), and how often each
    is drawn: a third of the sources are grayscale, against a small share of ILSVRC's photos, so a
    colour photo is drawn three times as often."""
    arrays = [np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for _, b in sorted(photos.items())]
    weights = np.array([3.0 if np.ptp(a.astype(np.int16), axis=2).max() > 8 else 1.0 for a in arrays])
    return arrays, weights / weights.sum()


def draw_size(rng):
    kind = rng.choice([k for _, k in SIZE_MIX], p=[s for s, _ in SIZE_MIX])
    if kind == "500x375":
        w, h = 500, 375
    elif kind == "500x333":
        w, h = 500, 333
    elif kind == "other":
        w = int(rng.integers(300, 501))
        h = int(w * rng.uniform(0.5, 1.0))
    elif kind == "small":
        w = int(rng.integers(80, 301))
        h = max(int(w * rng.uniform(0.6, 1.0)), 40)
    else:
        pixels = rng.uniform(1.5e6, 4e6)
        aspect = rng.choice([4 / 3, 3 / 2])
        w = int((pixels * aspect) ** 0.5)
        h = int(w / aspect)
    return (h, w) if rng.random() < PORTRAIT else (w, h)


def _jitter(im, rng):
    im = ImageEnhance.Color(im).enhance(rng.uniform(0.6, 1.4))
    im = ImageEnhance.Contrast(im).enhance(rng.uniform(0.75, 1.25))
    return ImageEnhance.Brightness(im).enhance(rng.uniform(0.75, 1.25))


def crop(photos, rng, w, h):
    """A w x h picture from a region of one photo, shrunk to 0.3-0.9 of its size where the photo is
    large enough (so detail is as dense as in a photo taken at that size), flipped and
    colour-jittered."""
    arrays, p = photos
    src = arrays[int(rng.choice(len(arrays), p=p))]
    sh, sw = src.shape[:2]
    scale = max(rng.uniform(0.3, 0.9), w / sw, h / sh)  # at least as large as the photo asks
    cw, ch = min(sw, round(w / scale)), min(sh, round(h / scale))
    x, y = int(rng.integers(sw - cw + 1)), int(rng.integers(sh - ch + 1))
    im = Image.fromarray(src[y : y + ch, x : x + cw]).resize((w, h), Image.Resampling.BICUBIC)
    if rng.random() < 0.5:
        im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return _jitter(im, rng)


def picture(photos, rng, w, h):
    """One photo's crop, or for large or some ordinary images a mosaic of crops whose tiles are
    near the photos' own scale."""
    tiles = max(1, round(max(w, h) / 600)) if w * h > 1e6 else (2 if rng.random() < 0.3 else 1)
    if tiles == 1:
        im = crop(photos, rng, w, h)
    else:
        im = Image.new("RGB", (w, h))
        xs, ys = np.linspace(0, w, tiles + 1).astype(int), np.linspace(0, h, tiles + 1).astype(int)
        for i in range(tiles):
            for j in range(tiles):
                tw, th = xs[i + 1] - xs[i], ys[j + 1] - ys[j]
                im.paste(crop(photos, rng, int(tw), int(th)), (int(xs[i]), int(ys[j])))
    pixels = np.asarray(im, dtype=np.float32)
    pixels += rng.normal(0, rng.uniform(2, 7), pixels.shape).astype(np.float32)  # sensor grain
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def encode(im, kind, quality):
    buf = io.BytesIO()
    if kind == "png":
        im.save(buf, format="PNG", compress_level=1)
    else:
        mode = {"gray": "L", "cmyk": "CMYK"}.get(kind, "RGB")
        im.convert(mode).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


_PHOTOS = None


def _init(photo_bytes):
    global _PHOTOS
    _PHOTOS = load(photo_bytes)


def _make_one(job):
    path, key, kind = job
    rng = np.random.default_rng(key)
    w, h = draw_size(rng)
    quality = int(rng.integers(QUALITY[0], QUALITY[1] + 1))
    if kind == "rgb" and rng.random() < GRAY_SHARE:
        kind = "gray"
    data = encode(picture(_PHOTOS, rng, w, h), kind, quality)
    Path(path).write_bytes(data)
    return {"bytes": len(data), "w": w, "h": h, "kind": kind}


def wnid(c):
    return f"n{90000000 + c:08d}"  # ImageNet's form; numbers no real synset has


def make(out, photo_bytes, classes, train_per_class, val_per_class, seed, workers=None):
    """Writes the set at `out` (whole or not at all); returns its statistics."""
    jobs = {"train": [], "val": []}
    with atomic_dir(out) as root:
        (root / "LOC_synset_mapping.txt").write_text("".join(f"{wnid(c)} photo mix {c}\n" for c in range(classes)))
        for c in range(classes):
            (root / "train" / wnid(c)).mkdir(parents=True)
            for i in range(train_per_class):
                kind = "cmyk" if c < CMYK_COUNT and i == 0 else "png" if c == CMYK_COUNT and i == 0 else "rgb"
                path = root / "train" / wnid(c) / f"{wnid(c)}_{i + 1}.JPEG"
                jobs["train"].append((str(path), [seed, 0, c, i], kind))
        order = [(c, i) for i in range(val_per_class) for c in range(classes)]
        np.random.default_rng([seed, 1]).shuffle(order)
        (root / "val").mkdir()
        for n, (c, i) in enumerate(order, start=1):
            jobs["val"].append((str(root / "val" / f"ILSVRC2012_val_{n:08d}.JPEG"), [seed, 2, c, i], "rgb"))
        synset_list = root / "imagenet_2012_validation_synset_labels.txt"
        synset_list.write_text("".join(f"{wnid(c)}\n" for c, _ in order))
        # one line per image of this val set, not the full set's 50,000: said beside it
        layout.record_generated(synset_list, "benchmarks.imagenet_like")
        with ProcessPoolExecutor(workers or os.cpu_count(), initializer=_init, initargs=(photo_bytes,)) as pool:
            rows = {split: list(pool.map(_make_one, js, chunksize=32)) for split, js in jobs.items()}
        stats = {split: statistics_of(r) for split, r in rows.items()}
        stats["sources"] = sorted(photo_bytes)
        (root / "set_statistics.json").write_text(json.dumps(stats, indent=1) + "\n")
    return stats


def statistics_of(rows):
    kb = [r["bytes"] / 1000 for r in rows]
    mp = [r["w"] * r["h"] / 1e6 for r in rows]
    shape = [(max(r["w"], r["h"]), min(r["w"], r["h"])) for r in rows]
    share = lambda pred: round(sum(map(pred, rows)) / len(rows), 4)
    return {
        "images": len(rows),
        "mean_kb": round(statistics.fmean(kb), 1),
        "median_kb": round(statistics.median(kb), 1),
        "p99_kb": round(float(np.percentile(kb, 99)), 1),
        "total_mb": round(sum(kb) / 1000, 1),
        "mean_width": round(statistics.fmean(r["w"] for r in rows)),
        "mean_height": round(statistics.fmean(r["h"] for r in rows)),
        "mean_megapixels": round(statistics.fmean(mp), 3),
        "share_500x375": round(sum(s == (500, 375) for s in shape) / len(rows), 4),
        "share_500x333": round(sum(s == (500, 333) for s in shape) / len(rows), 4),
        "share_over_1mp": share(lambda r: r["w"] * r["h"] > 1e6),
        "share_shorter_under_200": share(lambda r: min(r["w"], r["h"]) < 200),
        "max_megapixels": round(max(mp), 2),
        "quirks": {k: sum(r["kind"] == k for r in rows) for k in ("gray", "cmyk", "png")},
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="the set's root (train/, val/, the label files)")
    ap.add_argument("--sources", help="a folder of photos (from --save-sources) instead of the registry's wheels")
    ap.add_argument("--save-sources", metavar="DIR", help="write the registry's photos to DIR and stop")
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument(
        "--train-per-class",
        type=int,
        default=128,
        help="12,800 train images by default: 12.5 steps an epoch at 4 GPUs x 256",
    )
    ap.add_argument("--val-per-class", type=int, default=10)
    ap.add_argument("--seed", type=int, default=2012)
    ap.add_argument("--workers", type=int, help="processes (default: every CPU)")
    ap.add_argument("--dry-run", action="store_true", help="check the arguments and say what would be made")
    a = ap.parse_args(argv)
    if a.save_sources:
        dest = Path(a.save_sources)
        dest.mkdir(parents=True, exist_ok=True)
        for name, data in registry_photos().items():
            (dest / name).write_bytes(data)
        print(f"{len(list(dest.iterdir()))} photos in {dest}")
        return
    if not a.out:
        ap.error("--out is required (or --save-sources)")
    if a.classes < 2 or a.train_per_class < 1 or a.val_per_class < 1:
        raise StageError("--classes must be at least 2, --train-per-class and --val-per-class at least 1")
    if a.dry_run:
        where = a.sources or f"the wheels of {', '.join(WHEEL_PHOTOS)} and matplotlib"
        print(
            f"{a.classes} x {a.train_per_class} train, {a.classes} x {a.val_per_class} val images "
            f"at {a.out}, from {where}"
        )
        return
    photos = folder_photos(a.sources) if a.sources else registry_photos()
    stats = make(a.out, photos, a.classes, a.train_per_class, a.val_per_class, a.seed, a.workers)
    print(json.dumps({k: v for k, v in stats.items() if k != "sources"}, indent=1))


if __name__ == "__main__":
    run_main(main)
