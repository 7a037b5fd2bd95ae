"""Marks the copies an earlier version of the workflow converted as complete, so that Snakemake
does not convert them again: each gets the done.json the conversions now end with, dated as its
manifest. The workflow names this command when it meets such a copy; it writes nothing itself.

    python -m workflow_scripts.data.upgrade --data-dir DATA_DIR
"""

import argparse

from ..common.errors import run_main
from ..common.frameworks import REGISTRY
from .convert import mark_earlier_copies

FORMATS = tuple(dict.fromkeys(f.data_format for f in REGISTRY.values()))  # the data stage's copies


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True, help="config data_dir")
    a = ap.parse_args()
    marked = mark_earlier_copies(a.data_dir, FORMATS)
    for copy in marked:
        print(f"marked as converted: {copy}")
    if not marked:
        print(f"no copy of an earlier version in {a.data_dir}")


if __name__ == "__main__":
    run_main(main)
