"""Index stage: find every image of the raw layout, check it decodes, label it, fix the order.

Writes, atomically, to one directory shared by the three format converters:
  synsets.txt   one wnid per line; line number (0-based) = class label
  train.tsv     relpath, label, synset, format, mode, width, height, bytes (shuffled, seeded)
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
from . import image_records, layout, listing

COLUMNS = ("relpath", "label", "synset", "format", "mode", "width", "height", "bytes")
SPLITS = ("train", "val")


def shown(relpath):
    """A path as text that can be written anywhere: a name that is not UTF-8 (Python keeps its
    bytes as surrogates) with those bytes as \\xNN."""
    return relpath.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _probe_file(root):
    def probe(item):
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


def _synset_words(root):
    """Human-readable class names where the dataset has them (Kaggle's LOC_synset_mapping.txt, at
    the top of its tree, or the devkit's synset_words.txt), looked for where the label files are;
    TFRecord's image/class/text falls back to the wnid."""
    for folder in layout.label_folders(root):
        for name in ("LOC_synset_mapping.txt", "synset_words.txt"):
            path = folder / name
            if path.is_file():
                return dict(ln.split(None, 1) for ln in path.read_text().splitlines() if ln.strip())
    return {}


def build(root, out, val_labels="", seed=0, max_reject_fraction=0.01, threads=1, val_subset=False):
    lay = layout.discover(root, val_labels, val_subset)
    # The output's scratch directory is made first: an unwritable data_dir fails now, not after
    # every image was probed.
    with atomic_dir(out) as tmp:
        rows, rejects = _probe_all(lay, threads, max_reject_fraction)
        _write(tmp, lay, rows, rejects, seed)
    for split, relpath, reason in rejects:
        print(f"rejected {split} {relpath}: {reason}")


def _probe_all(lay, threads, max_reject_fraction):
    label_of = {wnid: i for i, wnid in enumerate(lay.synsets)}
    rows, rejects = {}, []
    for split in SPLITS:
        items = getattr(lay, split)
        rows[split] = []
        for item, pr, nbytes in ordered_map(_probe_file(lay.root), items, threads, f"index {split}"):
            if pr.ok:
                rows[split].append(
                    (item.relpath, label_of[item.synset], item.synset, pr.fmt, pr.mode, pr.width, pr.height, nbytes)
                )
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
    words = _synset_words(lay.root)
    random.Random(seed).shuffle(rows["train"])
    (tmp / "synsets.txt").write_text("".join(f"{w}\n" for w in lay.synsets))
    (tmp / "synset_words.txt").write_text("".join(f"{w}\t{words.get(w, w).strip()}\n" for w in lay.synsets))
    for split in SPLITS:
        _write_tsv(tmp / f"{split}.tsv", COLUMNS, rows[split])
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
        },
    )
    print(f"validation labels: {lay.val_source}")


def _write_tsv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


def label_files(root, val_labels="", val_subset=False):
    """The val label files the index reads (the one used and those that must agree with it)."""
    found, others = layout.check(root, val_labels, val_subset)
    return [f for f in (found, *others) if f]


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
    labels = label_files(a.root, a.val_labels, a.val_subset)
    still = listing.settling(layout.image_root(a.root), a.settle_s, labels)
    if still:
        raise StageError(still)
    threads = cpus.job_threads(a)
    build(a.root, a.out, a.val_labels, a.shuffle_seed, a.max_reject_fraction, threads, bool(a.val_subset))


if __name__ == "__main__":
    run_main(main)
