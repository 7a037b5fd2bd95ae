"""What following dataset.root's contents costs (workflow_scripts/data/listing.py), on a tree of
ILSVRC2012's size: 1,000 train folders of 1,281 names and a flat val/ of 50,000.

    python3 benchmarks/dataset_listing.py --make /tmp/big/ILSVRC2012     # the tree of empty files, once
    .venv/bin/python benchmarks/dataset_listing.py --root /tmp/big/ILSVRC2012 --repeats 3

For each repeat: the parse's fingerprint with no cache (every folder's names read), then with the
cache it left (one stat a folder), and for comparison a listing of every file's name, size and
mtime (a stat a file). With --drop (root only) the kernel's dentry and inode caches are dropped
before each cold measurement, as after a reboot or on a client that has not listed the tree.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from workflow_scripts.data import listing  # noqa: E402


def make(root, classes=1000, per_class=1281, val=50000):
    for c in range(classes):
        d = root / "train" / f"n{c:08d}"
        d.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            (d / f"n{c:08d}_{i}.JPEG").touch()
    (root / "val").mkdir(parents=True, exist_ok=True)
    for i in range(val):
        (root / "val" / f"ILSVRC2012_val_{i + 1:08d}.JPEG").touch()


def full_listing(root):
    n = 0
    for folder in listing.folders(root):
        with os.scandir(folder) as it:
            for e in it:
                if e.is_file():
                    st = e.stat()
                    n += st.st_size >= 0 and st.st_mtime_ns > 0
    return n


def drop():
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2\n")


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", help="a tree in the raw layout")
    ap.add_argument("--make", help="write the empty-file tree here and stop")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--drop", action="store_true", help="drop dentries and inodes before each cold run (root)")
    a = ap.parse_args(argv)
    if a.make:
        make(Path(a.make))
        return
    root = Path(a.root)
    files = sum(len(os.listdir(f)) for f in listing.folders(root))
    print(f"{root}: {len(listing.folders(root))} folders, {files} names")
    cold, warm, full = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "listing.json"
        for _ in range(a.repeats):
            cache.unlink(missing_ok=True)
            if a.drop:
                drop()
            cold.append(timed(lambda: listing.fingerprint(root, (), cache))[0])
            warm.append(timed(lambda: listing.fingerprint(root, (), cache))[0])
            if a.drop:
                drop()
            full.append(timed(lambda: full_listing(root))[0])

    def fmt(xs):
        return f"{statistics.mean(xs):.2f} ± {statistics.stdev(xs) if len(xs) > 1 else 0:.2f} s"

    print(f"fingerprint, no cache: {fmt(cold)}; with its cache: {fmt(warm)}; every file stat'ed: {fmt(full)}")


if __name__ == "__main__":
    main()
