"""Conversion throughput per format, pass-through, on ImageNet-sized JPEGs.

Makes a sample of N JPEGs of 500x375 in the raw layout (the embedded generator at a fixed size),
indexes it once, then runs each converter `--repeats` times with `--threads` threads and prints
images/s: the converter's own timing (both splits, after interpreter start and imports), and the
whole command's wall time. The sample was just written, so it is read from a warm page cache.

    .venv/bin/python benchmarks/conversion.py --images 2000 --threads 2 --repeats 3
"""

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from workflow_scripts.data import embedded  # noqa: E402

FORMATS = {"tfrecord": "tensorflow", "recordio": "mxnet", "lmdb_caffe2": "pytorch"}


def add_sample_arguments(ap, images):
    """The flags the conversion benchmarks share: the sample's size, the threads, the repeats, where
    the sample is kept, and a dry run that checks them."""
    ap.add_argument("--images", type=int, default=images, help="train images (val adds 1/8 of that)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workdir", default="", help="keep the sample here instead of a temp dir")
    ap.add_argument("--dry-run", action="store_true", help="check the arguments, print them and stop")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_sample_arguments(ap, images=2000)
    ap.add_argument("--quality", type=int, default=93, help="JPEG quality of the sample")
    a = ap.parse_args(argv)
    if a.dry_run:
        print(vars(a))
        return
    envs = yaml.safe_load((REPO / "config.yaml").read_text())["envs"]
    work = Path(a.workdir or tempfile.mkdtemp(prefix="dlscale-bench-"))
    root = work / "ILSVRC2012"
    classes = 16
    if not root.exists():
        embedded.make(
            root,
            classes=classes,
            train_per_class=a.images // classes,
            val_per_class=max(1, a.images // classes // 8),
            quirks=False,
            size=(500, 375),
            quality=a.quality,
        )
    jpegs = list(root.rglob("*.JPEG"))
    mean_kb = sum(p.stat().st_size for p in jpegs) / len(jpegs) / 1024
    print(
        f"sample: {len(jpegs)} JPEGs, 500x375, mean {mean_kb:.0f} KB, quality {a.quality}; "
        f"threads {a.threads}; {a.repeats} runs each; warm page cache"
    )

    t = time.perf_counter()
    run(
        envs["workflow"], "workflow_scripts.data.index", "--root", root, "--out", work / "index", "--threads", a.threads
    )
    wall = time.perf_counter() - t
    print(f"{'index (decode check)':22s} {len(jpegs) / wall:8.0f} images/s wall (one run)")
    print(f"{'format':22s} {'converter images/s':>22s} {'command images/s':>20s}")
    for module, env in FORMATS.items():
        inner, outer = [], []
        for r in range(a.repeats):
            t = time.perf_counter()
            out = run(
                envs[env],
                f"workflow_scripts.data.{module}",
                "--index",
                work / "index",
                "--out",
                work / f"out-{module}",
                "--threads",
                a.threads,
            )
            wall = time.perf_counter() - t
            m = re.search(r"converted (\d+) images in ([\d.]+) s", out)
            n, secs = int(m.group(1)), float(m.group(2))
            inner.append(n / secs)
            outer.append(n / wall)
        print(f"{module:22s} {fmt(inner):>22s} {fmt(outer):>20s}")


def fmt(xs):
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):.0f} ± {sd:.0f}"


def run(python, module, *args):
    proc = subprocess.run(
        [str(REPO / python) if "/" in python else python, "-m", module, *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        sys.exit(f"{module} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout + proc.stderr


if __name__ == "__main__":
    main()
