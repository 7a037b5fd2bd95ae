"""Index stage: find every image of the dataset (a tree, image-net.org's archives or Hugging Face's
parquet shards: sources.py), check it decodes, label it, fix the order.

Writes, atomically, to one directory shared by the three format converters:
  synsets.txt   one wnid per line; line number (0-based) = class label
  train.tsv     relpath, label, synset, format, mode, width, height, bytes (shuffled, seeded), and
                in an archive or parquet form where its bytes lie (location)
  val.tsv       the same, in file order
  rejects.tsv   split, relpath, reason for each file that does not decode
  summary.json  counts, where labels came from, the dataset root
Re-encoding decisions are the converters' (they depend on the encoding config, this does not).
"""

import argparse
import csv
import os
import random

from ..cluster import cpus
from ..common.atomic import atomic_dir, write_json
from ..common.errors import StageError, run_main
from ..common.parallel import ordered_map
from ..common.schema import default as config_default
from . import image_records, layout, listing, sources

COLUMNS = ("relpath", "label", "synset", "format", "mode", "width", "height", "bytes")
SPLITS = ("train", "val")


def shown(relpath):
    """A path as text that can be written anywhere: a name that is not UTF-8 (Python keeps its
    bytes as surrogates) with those bytes as \\xNN."""
    return relpath.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _probe_file(root):
    def probe(split, item):
        path = root / item.relpath
        if shown(item.relpath) != item.relpath:
            # Every format's record and index line is UTF-8 text: such a name cannot be stored.
            return item, image_records.Probe(reason="its name is not UTF-8: rename it"), 0
        if path.is_symlink() and not path.exists():
            return item, image_records.Probe(reason=f"a symbolic link to {os.readlink(path)}, which does not exist"), 0
        try:
            data = path.read_bytes()
        except OSError as exc:  # permission denied, an I/O error: a reject like any bad file
            return item, image_records.Probe(reason=f"cannot read: {exc.strerror or exc}"), 0
        return item, image_records.probe(data), len(data)

    return probe


def _probe_member(lay, reader):
    """probe() of an image inside an archive or shard: a reject names it there."""

    def probe(split, item):
        data = reader.read(split, item.location, item.relpath)
        pr = image_records.probe(data)
        if not pr.ok:
            pr = image_records.Probe(reason=f"{pr.reason} (in {sources.named(lay, split, item)})")
        return item, pr, len(data)

    return probe


def _synset_words(lay):
    """Human-readable class names where the dataset has them (Kaggle's LOC_synset_mapping.txt, at
    the top of its tree, or the devkit's synset_words.txt, looked for where the label files are;
    else the devkit's meta.mat or Hugging Face's class names); TFRecord's image/class/text falls
    back to the wnid."""
    for folder in layout.label_folders(lay.root):
        for name in ("LOC_synset_mapping.txt", "synset_words.txt"):
            path = folder / name
            if path.is_file():
                return dict(ln.split(None, 1) for ln in path.read_text().splitlines() if ln.strip())
    return lay.words


def build(root, out, val_labels="", seed=0, max_reject_fraction=0.01, threads=1, val_subset=False, keys=None):
    lay = sources.discover(root, val_labels, val_subset, keys)
    # The output's scratch directory is made first: an unwritable data_dir fails now, not after
    # every image was probed.
    with atomic_dir(out) as tmp:
        rows, rejects = _probe_all(lay, threads, max_reject_fraction)
        _write(tmp, lay, rows, rejects, seed)
    for split, relpath, reason in rejects:
        print(f"rejected {split} {relpath}: {reason}")


def _probed(lay, split, threads):
    """(item, probe, bytes) of each image of a split in the layout's order; an archive's or shard's
    read in the order they lie there, so that each is read through once."""
    items = getattr(lay, split)
    if lay.form == "tree":
        probe = _probe_file(lay.root)
        yield from ordered_map(lambda item: probe(split, item), items, threads, f"index {split}")
        return
    reader = sources.reader(lay.form, lay.root, lay.source)
    try:
        order = sorted(range(len(items)), key=lambda i: tuple(map(int, items[i].location.split(":"))))
        probe = _probe_member(lay, reader)
        results = [None] * len(items)
        for i, result in zip(order, ordered_map(lambda i: probe(split, items[i]), order, threads, f"index {split}")):
            results[i] = result
        yield from results
    finally:
        reader.close()


def _probe_all(lay, threads, max_reject_fraction):
    label_of = {wnid: i for i, wnid in enumerate(lay.synsets)}
    rows, rejects = {}, []
    for split in SPLITS:
        rows[split] = []
        for item, pr, nbytes in _probed(lay, split, threads):
            if pr.ok:
                row = (item.relpath, label_of[item.synset], item.synset, pr.fmt, pr.mode, pr.width, pr.height, nbytes)
                rows[split].append(row + ((item.location,) if lay.form != "tree" else ()))
            else:
                rejects.append((split, shown(item.relpath), pr.reason))
    total = len(lay.train) + len(lay.val)
    if total and len(rejects) / total > max_reject_fraction:
        names = "\n  ".join(f"{lay.root / r[1]}: {r[2]}" for r in rejects[:20])
        more = f"\n  ... and {len(rejects) - 20} more" if len(rejects) > 20 else ""
        raise StageError(
            f"{len(rejects)} of {total} images ({len(rejects) / total:.2%}) do not decode, more than "
            f"config conversion.max_reject_fraction = {max_reject_fraction}:\n  {names}{more}"
        )
    return rows, rejects


def _write(tmp, lay, rows, rejects, seed):
    words = _synset_words(lay)
    random.Random(seed).shuffle(rows["train"])
    (tmp / "synsets.txt").write_text("".join(f"{w}\n" for w in lay.synsets))
    (tmp / "synset_words.txt").write_text("".join(f"{w}\t{words.get(w, w).strip()}\n" for w in lay.synsets))
    columns = COLUMNS + (("location",) if lay.form != "tree" else ())
    for split in SPLITS:
        _write_tsv(tmp / f"{split}.tsv", columns, rows[split])
    _write_tsv(tmp / "rejects.tsv", ("split", "relpath", "reason"), rejects)
    write_json(
        tmp / "summary.json",
        {
            "root": str(lay.root.resolve()),
            "classes": len(lay.synsets),
            "val_labels": lay.val_source,
            "shuffle_seed": seed,
            "images": {s: len(rows[s]) for s in SPLITS},
            "rejected": {s: sum(r[0] == s for r in rejects) for s in SPLITS},
            "non_rgb_jpeg": {s: sum(r[3] != "JPEG" or r[4] != "RGB" for r in rows[s]) for s in SPLITS},
            # where the converters read the bytes from, other than files under root (sources.py)
            **({"form": lay.form, "source": lay.source} if lay.form != "tree" else {}),
        },
    )
    print(f"validation labels: {lay.val_source}")


def _write_tsv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


def label_files(root, val_labels="", val_subset=False, keys=None):
    """The files whose change the index waits out (dataset.settle_s): the val label files it reads,
    or the archives or shards themselves."""
    return sources.check(root, val_labels, val_subset, keys)[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True, help="ILSVRC2012 raw layout (train/, val/)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--val-labels", default=config_default("dataset.val_labels"))
    ap.add_argument(
        "--val-subset",
        type=int,
        choices=(0, 1),
        default=int(config_default("dataset.val_subset")),
        help="config dataset.val_subset: 1 where val/ is a subset of ILSVRC2012's and its positional label file was "
        "cut to it",
    )
    # config dataset.train_tar, val_tar, devkit: image-net.org's archives, where they are not in --root
    ap.add_argument("--train-tar", default=config_default("dataset.train_tar"))
    ap.add_argument("--val-tar", default=config_default("dataset.val_tar"))
    ap.add_argument("--devkit", default=config_default("dataset.devkit"))
    ap.add_argument("--shuffle-seed", type=int, default=config_default("conversion.shuffle_seed"))
    ap.add_argument("--max-reject-fraction", type=float, default=config_default("conversion.max_reject_fraction"))
    ap.add_argument(
        "--settle-s",
        type=float,
        default=0,
        help="refuse a tree changed fewer than this many seconds ago, as still being written (the workflow "
        "passes config dataset.settle_s for a real dataset.root); 0: never",
    )
    cpus.add_job_threads(ap)
    a = ap.parse_args()
    keys = {key: getattr(a, key) for key in sources.archives.KEYS}
    labels = label_files(a.root, a.val_labels, a.val_subset, keys)
    still = listing.settling(layout.image_root(a.root), a.settle_s, labels)
    if still:
        raise StageError(still)
    threads = cpus.job_threads(a)
    build(a.root, a.out, a.val_labels, a.shuffle_seed, a.max_reject_fraction, threads, bool(a.val_subset), keys)


if __name__ == "__main__":
    run_main(main)
