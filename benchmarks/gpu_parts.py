"""The benchmark's data and its in-process parts, each run in a process of its own (pytorch_gpu.py
`--part NAME`) so the runner never holds the GPU:

  data      the embedded generator's ILSVRC-layout JPEGs (about 400-500 x 300-375, the ImageNet
            quirks re-encoded by the data stage), indexed and written to the Caffe2 LMDB by the
            pipeline's own modules; rendered in parallel, byte-identical to embedded.make
  ceilings  the device's measured rates: a device-to-device copy, bf16 and TF32 matrix products
  loaders   each input path alone, no training: nvJPEG batch decode, decode + augment, the gpu,
            cpu and dali loaders, in images/s
  check     the project's training step (pytorch_ddp.Trainer) on the same real batch: the CPU
            path (fp32, Pillow preprocessing) against the GPU paths (GPU preprocessing; fp32,
            TF32, bf16), per-step loss within a tolerance fixed beforehand
"""

import dataclasses
import json
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SEED = 2018
PY = sys.executable


def _render_one(arg):
    """One train image exactly as embedded.make renders and saves it (same per-image seed)."""
    import numpy as np

    from workflow_scripts.data import embedded

    root, c, i = arg
    wnid = embedded.class_spec(c)[0]
    kind = {(4, 1): "gray"}.get((c, i), "rgb")  # embedded.make's quirk beyond each class's first image
    embedded._save(
        embedded.render(c, np.random.default_rng([SEED, 0, c, i])),
        Path(root) / "train" / wnid / f"{wnid}_{i + 1}.JPEG",
        kind,
    )


def _convert(module, *args):
    proc = subprocess.run(
        [PY, "-m", f"workflow_scripts.data.{module}", *map(str, args)], cwd=REPO, capture_output=True, text=True
    )
    if proc.returncode:
        raise RuntimeError(f"{module} failed:\n{proc.stderr[-3000:]}")


def part_data_photos(a, work):
    """The ImageNet-like photographs, their LMDB as stored and a copy with the shorter sides capped."""
    from benchmarks import imagenet_like

    manifest = work / "lmdb" / "manifest.json"
    t = time.perf_counter()
    root = work / "ILSVRC2012-photos"
    if not manifest.exists():
        photos = imagenet_like.folder_photos(a.sources) if a.sources else imagenet_like.registry_photos()
        imagenet_like.make(root, photos, a.classes, a.per_class, 2, seed=SEED, workers=a.threads)
        made = time.perf_counter() - t
        _convert("index", "--root", root, "--out", work / "index", "--threads", a.threads)
        _convert("lmdb_caffe2", "--index", work / "index", "--out", work / "lmdb", "--threads", a.threads)
        _convert(
            "lmdb_caffe2",
            "--index",
            work / "index",
            "--out",
            work / "lmdb-capped",
            "--threads",
            a.threads,
            "--shorter-cap",
            a.shorter_cap,
        )
    else:
        made = 0.0
    stats = json.loads((root / "set_statistics.json").read_text())["train"]
    capped = json.loads((work / "lmdb-capped" / "manifest.json").read_text())
    return {
        "dataset": "photos",
        "made_s": made,
        "total_s": time.perf_counter() - t,
        **json.loads(manifest.read_text())["splits"]["train"],
        "set": stats,
        "capped": {"shorter_cap": a.shorter_cap, **capped["splits"]["train"]},
    }


def part_data(a, work):
    from workflow_scripts.data import embedded

    if a.dataset == "photos":
        return part_data_photos(a, work)
    if (work / "lmdb" / "manifest.json").exists():
        return {"reused": True, **json.loads((work / "lmdb" / "manifest.json").read_text())["splits"]["train"]}
    t = time.perf_counter()
    root = work / "ILSVRC2012"
    embedded.make(root, classes=a.classes, train_per_class=1, val_per_class=2, seed=SEED)
    jobs = [(str(root), c, i) for c in range(a.classes) for i in range(1, a.per_class)]
    with multiprocessing.Pool(a.threads) as pool:
        pool.map(_render_one, jobs, chunksize=8)
    rendered = time.perf_counter() - t
    for module, args in (
        ("index", ["--root", root, "--out", work / "index"]),
        ("lmdb_caffe2", ["--index", work / "index", "--out", work / "lmdb"]),
    ):
        proc = subprocess.run(
            [PY, "-m", f"workflow_scripts.data.{module}", *map(str, args), "--threads", str(a.threads)],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        if proc.returncode:
            raise RuntimeError(f"{module} failed:\n{proc.stderr[-3000:]}")
    manifest = json.loads((work / "lmdb" / "manifest.json").read_text())
    jpegs = list((root / "train").rglob("*.JPEG"))
    return {
        "render_s": rendered,
        "total_s": time.perf_counter() - t,
        **manifest["splits"]["train"],
        "mean_jpeg_kb": sum(p.stat().st_size for p in jpegs) / len(jpegs) / 1024,
    }


# ---------------------------------------------------------------- in-process parts (own process)


def part_ceilings(a, work):
    import torch

    if not torch.cuda.is_available():
        return {"note": "no GPU"}
    dev = torch.device("cuda")
    out = {
        "device": torch.cuda.get_device_name(dev),
        "sm_count": torch.cuda.get_device_properties(dev).multi_processor_count,
    }

    from workflow_scripts.common.timing import cuda_times

    def timed(fn):
        return statistics.median(cuda_times(fn, warmup=3, reps=20))

    def copy_rate():
        src = torch.randn(1 << 29, device=dev, dtype=torch.float32)  # 2 GiB, freed on return
        dst = torch.empty_like(src)
        return 2 * src.numel() * 4 / timed(lambda: dst.copy_(src)) / 1e12

    out["copy_TBps"] = copy_rate()
    n = 8192
    for name, dtype, tf32 in (("bf16", torch.bfloat16, False), ("tf32", torch.float32, True)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        x, y = torch.randn(n, n, device=dev, dtype=dtype), torch.randn(n, n, device=dev, dtype=dtype)
        out[f"{name}_matmul_TFLOPs"] = 2 * n**3 / timed(lambda: x @ y) / 1e12
    return out


def _device(torch):
    """The GPU; the CPU only when smoke-testing this script on a machine without one."""
    if torch.cuda.is_available():
        torch.cuda.set_device(0)
        return torch.device("cuda", 0)
    return torch.device("cpu")


def _args(extra):
    return trainer_parser().parse_args(["--out", "/nonexistent", *extra])


def trainer_parser():
    """pytorch_ddp's own argument parser: every flag a plan gives the trainer must be one of it."""
    from workflow_scripts.train import harness, pytorch_ddp

    ap = pytorch_ddp.add_args(harness.arg_parser("pytorch_ddp"))
    return getattr(pytorch_ddp, "add_experiment_args", lambda parser: parser)(ap)


def part_loaders(a, work):
    """The input pipeline alone, no training: how fast each stage can feed a GPU."""
    import torch

    from workflow_scripts.cluster.rank_env import detect
    from workflow_scripts.data.lmdb_dataset import LMDBImageNet
    from workflow_scripts.train import gpu_input, harness, pytorch_input, pytorch_options

    dev = _device(torch)
    out = {"batch": a.batch}
    ds = LMDBImageNet(work / "lmdb" / "train")
    items = [ds.raw(i) for i in range(a.batch)]
    flat, sizes, _ = gpu_input.collate_raw(items)
    jpegs = gpu_input.split_batch(flat, sizes)
    rng = random.Random(0)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def rate(fn, reps):
        for _ in range(3):
            fn()
        sync()
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        return reps * a.batch / (time.perf_counter() - t)

    out["nvjpeg_decode"] = rate(lambda: gpu_input.decode(jpegs, dev), 20)
    try:
        nvimg = gpu_input.NvImgCodec(dev)
    except RuntimeError as exc:
        out["nvimgcodec"] = str(exc)
    else:
        out["nvimgcodec_decode"] = rate(lambda: nvimg(jpegs), 20)
        diff = [(p.int() - q.int()).abs() for p, q in zip(nvimg(jpegs), gpu_input.decode(jpegs, dev))]
        out["nvimgcodec_vs_torchvision_levels"] = {
            "mean": torch.cat([d.flatten().float() for d in diff]).mean().item(),
            "max": max(d.max().item() for d in diff),
        }

    def decode_augment():
        ims = gpu_input.decode(jpegs, dev)
        gpu_input.augment(
            ims,
            [gpu_input.crop_box(i.shape[1], i.shape[2], rng) for i in ims],
            [rng.random() < 0.5 for _ in ims],
            a.image_size,
            channels_last=True,
        )

    out["decode_augment"] = rate(decode_augment, 20)
    launch = detect()
    for name, path, reps in (("gpu_loader", "gpu", 40), ("cpu_loader", "cpu", 20), ("dali_loader", "dali", 40)):
        args = _args(
            [
                "--data",
                str(work / "lmdb"),
                "--batch-per-gpu",
                str(a.batch),
                "--image-size",
                str(a.image_size),
                "--channels-last",
                "on",
                "--input",
                path,
            ]
        )
        s = pytorch_options.resolve(args, dev)
        try:
            data = pytorch_input.build_input(args, s, launch, harness.classes_of(str(work / "lmdb")))
            out[f"{name}_workers"] = data.workers
            out[name] = rate(lambda: data.next_batch(), reps)
            data.close()
        except Exception as exc:  # e.g. DALI not installed: the other loaders' figures still count
            out[name] = f"{type(exc).__name__}: {exc}"[:500]
    return out


def part_check(a, work):
    """The project's step on one real batch, CPU path vs GPU paths, from the same weights."""
    import io

    import torch
    import torchvision
    from PIL import Image
    from torchvision.transforms import v2 as T
    from torchvision.transforms.v2 import functional as TF

    from workflow_scripts.data.lmdb_dataset import LMDBImageNet
    from workflow_scripts.train import augment, gpu_input, harness, pytorch_ddp, pytorch_options

    B, K, size = min(64, 4 * a.batch), 3, a.image_size
    # Tolerances fixed before any GPU run: per-step |loss - CPU fp32 loss| over the CPU's first
    # loss. (Not over each step's own loss: on one repeated batch the loss collapses, and a
    # difference relative to a loss near zero says nothing.)
    tol = {"gpu_fp32_strict_cpu_inputs": 1e-3, "gpu_fp32_strict": 2e-2, "gpu_tf32_cl": 2e-2, "gpu_bf16_cl": 5e-2}
    dev = _device(torch)
    ds = LMDBImageNet(work / "lmdb" / "train")
    items = [ds.raw(i) for i in range(B)]
    flat, sizes, labels = gpu_input.collate_raw(items)
    images = gpu_input.decode(gpu_input.split_batch(flat, sizes), dev)
    rng = random.Random(1)
    boxes = [gpu_input.crop_box(im.shape[1], im.shape[2], rng) for im in images]
    flips = [i % 2 == 1 for i in range(B)]
    x_gpu = gpu_input.augment(images, boxes, flips, size, channels_last=True)
    post = T.Compose([T.PILToTensor(), T.ToDtype(torch.float32, scale=True), T.Normalize(augment.MEAN, augment.STD)])
    ref = []
    for (jpeg, _), (t, l, h, w), f in zip(items, boxes, flips):
        im = TF.resized_crop(Image.open(io.BytesIO(jpeg)).convert("RGB"), t, l, h, w, [size, size], antialias=True)
        ref.append(post(TF.horizontal_flip(im) if f else im))
    x_cpu = torch.stack(ref)
    # Where GPU and CPU preprocessing differ: the decoders (nvJPEG vs libjpeg-turbo), and the
    # batched resize (float16 matrix products) against F.interpolate in float32 per image.
    dec = torch.cat(
        [
            (im.cpu().float() - TF.pil_to_tensor(Image.open(io.BytesIO(j)).convert("RGB")).float()).abs().flatten()
            for im, (j, _) in zip(images, items)
        ]
    )
    one = torch.cat([gpu_input._resize_one(im, b, f, size) for im, b, f in zip(images, boxes, flips)])
    mean_ = torch.tensor(augment.MEAN, device=dev).view(1, 3, 1, 1)
    std_ = torch.tensor(augment.STD, device=dev).view(1, 3, 1, 1)
    rsz = ((x_gpu.float() * std_ + mean_) * 255 - one).abs()
    levels = ((x_gpu.cpu() - x_cpu) * torch.tensor(augment.STD).view(1, 3, 1, 1) * 255).abs()
    out = {
        "batch": B,
        "steps": K,
        "tolerance": tol,
        "preprocessing_levels": {
            "mean": levels.mean().item(),
            "p99": levels.flatten().quantile(0.99).item(),
            "max": levels.max().item(),
        },
        "decode_levels": {"mean": dec.mean().item(), "p99": dec[::7].quantile(0.99).item(), "max": dec.max().item()},
        "batched_resize_levels": {"mean": rsz.mean().item(), "max": rsz.max().item()},
    }
    classes = harness.classes_of(work / "lmdb")
    torch.manual_seed(0)
    state = torchvision.models.resnet50(num_classes=classes, zero_init_residual=True).state_dict()
    lr = 0.1 * B / 256

    def losses(settings, x, y):
        pytorch_ddp.configure_backends(settings)
        m = torchvision.models.resnet50(num_classes=classes, zero_init_residual=True)
        m.load_state_dict(state)
        tr = pytorch_ddp.Trainer(m, settings, lr, 0.9, 1e-4)
        return [tr.step(x, y).item() for _ in range(K)]

    def plain(device, **over):
        """A plain run's settings as the trainer resolves them (its flags' defaults, eager,
        contiguous, IEEE fp32), with `over` replaced."""
        words = ["--out", str(work), "--batch-per-gpu", str(B), "--data-source", "synthetic"]
        words += ["--compile", "off", "--channels-last", "off", "--fp32-math", "strict"]
        args = pytorch_options.add_args(harness.arg_parser("gpu_parts")).parse_args(words)
        return dataclasses.replace(pytorch_options.resolve(args, torch.device(device), distributed=False), **over)

    torch.set_num_threads(os.cpu_count())
    cpu = losses(plain("cpu"), x_cpu, labels)
    out["cpu_fp32"] = cpu
    runs = {
        "gpu_fp32_strict_cpu_inputs": (plain(dev), x_cpu.to(dev)),
        "gpu_fp32_strict": (plain(dev), x_gpu),
        "gpu_tf32_cl": (plain(dev, channels_last=True, tf32=True), x_gpu),
        "gpu_bf16_cl": (plain(dev, amp_dtype=torch.bfloat16, channels_last=True, tf32=True), x_gpu),
    }
    ok = True
    for name, (settings, x) in runs.items():
        got = losses(settings, x, labels.to(dev))
        rel = max(abs(g - c) for g, c in zip(got, cpu)) / abs(cpu[0])
        out[name] = {"losses": got, "max_rel_diff": rel, "within_tolerance": rel <= tol[name]}
        ok &= rel <= tol[name]
    out["all_within_tolerance"] = ok
    out["loss_falls_on_repeated_batch"] = cpu[-1] < cpu[0]
    return out


def part_capacity(a, work):
    from benchmarks import node_capacity

    return node_capacity.part_capacity(a, work)


PARTS = {
    "data": part_data,
    "ceilings": part_ceilings,
    "loaders": part_loaders,
    "check": part_check,
    "capacity": part_capacity,
}
