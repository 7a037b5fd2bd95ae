"""The stage's TSV lists of images, written whole or not at all."""

import csv

from ..common.atomic import atomic_file


def write_tsv(path, header, rows):
    with atomic_file(path) as tmp, open(tmp, "w", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


def read_tsv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))
