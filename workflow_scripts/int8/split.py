"""The study's split of the val set: the first `batches` x `batch_size` images in index order
calibrate (the study: 50 batches of 25), every later image is scored. No image is in both.

Writes calibration.tsv and scoring.tsv (position in the val split = LMDB record, relpath, label,
synset) and split.json (the counts and the rule that made them).
"""

import argparse
from pathlib import Path

from ..common.atomic import write_json
from ..common.errors import StageError, run_main
from .image_lists import read_tsv, write_tsv

COLUMNS = ("position", "relpath", "label", "synset")
KEY = "inference.calibration.batches"


def split(val_rows, batches, batch_size):
    """(calibration rows, scoring rows) of the val rows, in order, each row with its position."""
    rows = [(pos, r["relpath"], int(r["label"]), r["synset"]) for pos, r in enumerate(val_rows)]
    n_calib = batches * batch_size
    if n_calib >= len(rows):
        raise StageError(
            f"config {KEY} = {batches} batches of {batch_size} = {n_calib} calibration images, but "
            f"the val split has only {len(rows)}: nothing would be left to score"
        )
    return rows[:n_calib], rows[n_calib:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", required=True, help="the index stage's output directory (val.tsv)")
    ap.add_argument("--batches", type=int, required=True)
    ap.add_argument("--batch-size", type=int, required=True)
    ap.add_argument("--out", required=True, help="directory for calibration.tsv, scoring.tsv, split.json")
    a = ap.parse_args()
    val = Path(a.index) / "val.tsv"
    if not val.is_file():
        raise StageError(f"{val} is missing: {a.index} is not an output of the index stage")
    calib, scoring = split(read_tsv(val), a.batches, a.batch_size)
    out = Path(a.out)
    write_tsv(out / "calibration.tsv", COLUMNS, calib)
    write_tsv(out / "scoring.tsv", COLUMNS, scoring)
    write_json(
        out / "split.json",
        {
            "val_images": len(calib) + len(scoring),
            "calibration": {
                "batches": a.batches,
                "batch_size": a.batch_size,
                "images": len(calib),
                "positions": [0, len(calib)],
            },
            "scoring": {"images": len(scoring), "positions": [len(calib), len(calib) + len(scoring)]},
        },
    )
    print(f"split: {len(calib)} calibration images ({a.batches} x {a.batch_size}), {len(scoring)} scored")


if __name__ == "__main__":
    run_main(main)
