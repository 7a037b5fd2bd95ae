"""Conversion straight from image-net.org's archives against conversion from their extracted tree,
on one machine with the same threads, and what extracting costs (seconds, files, bytes).

Makes ImageNet-sized JPEGs (the embedded generator at 500x375), packs them as image-net.org hands
them out (a tar of per-synset tars, a val tar, a devkit), and extracts them as image-net.org's
instructions do: the system's tar, one per-synset tar at a time, each deleted once extracted, then
sync, since a parallel file system pays for every file created. Then each form runs the index and
the three converters `--repeats` times, its source evicted from the page cache before each step
(posix_fadvise, so it is read from the disk). Prints seconds and images/s per step and the totals.

    .venv/bin/python benchmarks/archive_conversion.py --images 8000 --threads 2 --repeats 3 --workdir /tmp/ac
"""

import argparse
import io
import random
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from benchmarks.conversion import add_sample_arguments, run  # noqa: E402
from workflow_scripts.cluster import page_cache  # noqa: E402
from workflow_scripts.data import archives, embedded  # noqa: E402

CONVERTERS = {"tfrecord": "tensorflow", "recordio": "mxnet", "lmdb_caffe2": "pytorch"}
DEVKIT_DATA = "ILSVRC2012_devkit_t12/data"


def _add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), 1_330_000_000
    tar.addfile(info, io.BytesIO(data))


def pack(tree, out):
    """image-net.org's three archives of an embedded `tree` (synset-list val labels)."""
    from scipy.io import savemat

    out.mkdir(parents=True, exist_ok=True)
    wnids = sorted(p.name for p in (tree / "train").iterdir())
    with tarfile.open(out / archives.TRAIN_TAR, "w", format=tarfile.GNU_FORMAT) as outer:
        for wnid in wnids:
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as inner:
                for p in sorted((tree / "train" / wnid).iterdir()):
                    _add(inner, p.name, p.read_bytes())
            _add(outer, f"{wnid}.tar", buf.getvalue())
    with tarfile.open(out / archives.VAL_TAR, "w", format=tarfile.GNU_FORMAT) as tar:
        for p in sorted((tree / "val").glob("*.JPEG")):
            _add(tar, p.name, p.read_bytes())
    ids = dict(zip(wnids, random.Random(1).sample(range(1, len(wnids) + 1), len(wnids))))
    mat = io.BytesIO()
    savemat(mat, {"synsets": [{"ILSVRC2012_ID": ids[w], "WNID": w, "words": w} for w in wnids]})
    truth = (tree / "imagenet_2012_validation_synset_labels.txt").read_text().split()
    with tarfile.open(out / archives.DEVKIT, "w:gz") as tar:
        _add(tar, f"{DEVKIT_DATA}/meta.mat", mat.getvalue())
        _add(
            tar, f"{DEVKIT_DATA}/ILSVRC2012_validation_ground_truth.txt", "".join(f"{ids[w]}\n" for w in truth).encode()
        )


def extract(packed, tree):
    """image-net.org's extraction with the system's tar; returns (seconds, files, bytes written)."""
    start = time.perf_counter()
    train = tree / "train"
    train.mkdir(parents=True)
    subprocess.run(["tar", "-xf", packed / archives.TRAIN_TAR, "-C", train], check=True)
    for inner in sorted(train.glob("*.tar")):
        (train / inner.stem).mkdir()
        subprocess.run(["tar", "-xf", inner, "-C", train / inner.stem], check=True)
        inner.unlink()
    (tree / "val").mkdir()
    subprocess.run(["tar", "-xf", packed / archives.VAL_TAR, "-C", tree / "val"], check=True)
    subprocess.run(["tar", "-xzf", packed / archives.DEVKIT, "-C", tree], check=True)
    subprocess.run(["sync"], check=True)
    seconds = time.perf_counter() - start
    files = [p for p in tree.rglob("*") if p.is_file()]
    return seconds, len(files), sum(p.stat().st_size for p in files)


def fmt(xs):
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):7.1f} ± {sd:4.1f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_sample_arguments(ap, images=8000)
    a = ap.parse_args(argv)
    if a.dry_run:
        print(vars(a))
        return
    envs = yaml.safe_load((REPO / "config.yaml").read_text())["envs"]
    work = Path(a.workdir or tempfile.mkdtemp(prefix="dlscale-archives-"))
    sample, packed = work / "sample", work / "archives"
    if not packed.exists():
        classes = 16
        embedded.make(
            sample,
            classes=classes,
            train_per_class=a.images // classes,
            val_per_class=max(1, a.images // classes // 8),
            quirks=False,
            size=(500, 375),
            quality=93,
        )
        pack(sample, packed)
    sources = [packed / name for name in archives.KEYS.values()]
    print(f"archives: {sum(p.stat().st_size for p in sources) / 1e6:,.0f} MB; threads {a.threads}; {a.repeats} runs")
    extracted, extraction = [], None
    for r in range(a.repeats):
        tree = work / f"tree-{r}"
        subprocess.run(["rm", "-rf", tree], check=True)
        page_cache.evict(sources)
        extraction = extract(packed, tree)
        extracted.append(extraction[0])
    tree = work / f"tree-{a.repeats - 1}"
    truth = tree / DEVKIT_DATA / "ILSVRC2012_validation_ground_truth.txt"
    tree_files = [p for p in tree.rglob("*") if p.is_file()]
    print(f"extraction: {fmt(extracted)} s, {extraction[1]:,} files, {extraction[2] / 1e6:,.0f} MB written")
    forms = {
        "archives": (["--root", packed], sources),
        "tree": (["--root", tree, "--val-labels", truth], tree_files),
    }
    times = {form: {step: [] for step in ("index", *CONVERTERS)} for form in forms}
    images = 0
    for _ in range(a.repeats):
        for form, (args, read) in forms.items():
            index = work / f"index-{form}"
            page_cache.evict(read)
            t = time.perf_counter()
            run(
                envs["workflow"],
                "workflow_scripts.data.index",
                *args,
                "--out",
                index,
                "--val-subset",
                "1",
                "--threads",
                a.threads,
            )
            times[form]["index"].append(time.perf_counter() - t)
            for module, env in CONVERTERS.items():
                page_cache.evict(read)
                out = run(
                    envs[env],
                    f"workflow_scripts.data.{module}",
                    "--index",
                    index,
                    "--out",
                    work / f"{module}-{form}",
                    "--threads",
                    a.threads,
                )
                m = re.search(r"converted (\d+) images in ([\d.]+) s", out)
                images = int(m.group(1))
                times[form][module].append(float(m.group(2)))
    print(f"{images:,} images; seconds (images/s of the mean) per step, the source evicted before each")
    print(f"{'step':12s} {'archives':>24s} {'tree':>24s}")
    for step in ("index", *CONVERTERS):
        cells = [f"{fmt(times[f][step])} ({images / statistics.mean(times[f][step]):5.0f})" for f in forms]
        print(f"{step:12s} {cells[0]:>24s} {cells[1]:>24s}")
    total = {f: sum(statistics.mean(v) for v in times[f].values()) for f in forms}
    print(
        f"index + three conversions: archives {total['archives']:.1f} s, tree {total['tree']:.1f} s "
        f"+ extraction {statistics.mean(extracted):.1f} s = {total['tree'] + statistics.mean(extracted):.1f} s"
    )


if __name__ == "__main__":
    main()
