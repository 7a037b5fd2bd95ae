"""The per-node checks of one preflight job, once on every node of the check's allocation, in
the workflow's interpreter (as the training job clears page caches from it):

    python -m workflow_scripts.preflight.node --out DIR [--data FORMAT_DIR] [--cache-clear-command CMD] --level sample \
        --python 'FRAMEWORK INTERPRETER WORDS'

Page-cache clearing (the method that will run before every training job, never a claimed drop
that did not happen), the dataset against its manifest, and the dataset readable from here.
Writes DIR/node.<host>.json (a list of rows) and DIR/infiniband.<host>.json (the node's
InfiniBand ports, which the job's nccl_transport check reads).
"""

import argparse
import os
import shlex
import socket
import sys
import time
from pathlib import Path

from ..cluster import page_cache, provenance
from ..common.atomic import write_json
from .check_rows import FAILED, NA, OK, row
from .seams import dataset_check

CACHE_FIX = (
    "fix or empty config training.cache_clear_command (empty: /proc/sys/vm/drop_caches where writable, "
    "else fadvise eviction of the dataset)"
)


def cache_row(paths, command, node, scope="node"):
    report = page_cache.clear(paths, command, scope=scope)
    tried = report["attempts"][0]
    if command and not tried["ok"]:
        return row(
            "page_cache",
            FAILED,
            "",
            f"training.cache_clear_command refused: {command!r} failed"
            + (f" ({tried['error']})" if tried["error"] else ""),
            CACHE_FIX,
            node,
        )
    method, after = report["method"], report["after"]
    if report["dropped_all_caches"]:
        figure = f"{method}: page cache, dentries and inodes dropped"
    elif report["dataset_evicted"]:
        figure = f"{method}: the dataset's {after['files']} file(s) evicted (other caches untouched)"
    elif after["unverifiable_files"]:
        figure = (
            f"{method}: eviction not verifiable for {after['unverifiable_files']} file(s) this user may not "
            f"write (mincore reports them resident)"
        )
    elif not after["files"]:
        figure = f"{method}: permitted (no dataset files to evict)"
    else:
        return row(
            "page_cache",
            FAILED,
            f"{method}",
            f"{after['resident_bytes']} bytes of the dataset still cached after {method}",
            CACHE_FIX,
            node,
        )
    return row("page_cache", OK, figure, node=node)


def readable_row(data, node):
    """Every file of the dataset opens and its first and last block read, from this node."""
    files = page_cache.dataset_files([data])
    start, size = time.perf_counter(), 0
    for f in files:
        try:
            with open(f, "rb") as fh:
                fh.read(4096)
                n = os.fstat(fh.fileno()).st_size
                fh.seek(max(0, n - 4096))
                fh.read(4096)
                size += n
        except OSError as exc:
            return row(
                "dataset_readable",
                FAILED,
                "",
                f"{f}: {exc.strerror or exc}",
                "make the dataset visible on every node (config data_dir on a shared file system)",
                node,
            )
    if not files:
        return row("dataset_readable", FAILED, "", f"{data} holds no files", "snakemake --forcerun data", node)
    return row(
        "dataset_readable",
        OK,
        f"{len(files)} files, {size / 2**20:.1f} MiB",
        node=node,
        value=time.perf_counter() - start,
        unit="s",
    )


def write_infiniband(out, node, root="/sys/class/infiniband"):
    """The node's InfiniBand ports, for the job's nccl_transport check (job.py): whether sockets
    between nodes are NCCL's fallback or all there is."""
    ports = [{**p, "node": node} for p in provenance.infiniband_ports(root)]
    write_json(Path(out) / f"infiniband.{node}.json", ports)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--data", default="", help="the format's data stage output the runs read (empty: none)")
    ap.add_argument(
        "--data-later",
        action="store_true",
        help="the runs read a dataset, checked by its own job once it is converted (preflight_data_check)",
    )
    page_cache.add_arguments(ap)
    ap.add_argument("--level", default="sample", choices=("quick", "sample", "full"))
    ap.add_argument("--python", default=sys.executable, help="the framework's interpreter as words (reads the format)")
    a = ap.parse_args()
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    rows = [cache_row([a.data] if a.data else [], a.cache_clear_command, node, a.cache_clear)]
    if a.data:
        status, figure, cause, fix = dataset_check(a.data, a.level, shlex.split(a.python))
        rows += [row("dataset", status, figure, cause, fix, node), readable_row(Path(a.data), node)]
    else:
        why = (
            "checked by its own job once the dataset is converted (preflight_data_check)"
            if a.data_later
            else "the sweep reads no dataset for this framework (synthetic input only)"
        )
        rows += [row("dataset", NA, cause=why, node=node), row("dataset_readable", NA, cause=why, node=node)]
    write_infiniband(a.out, node)
    write_json(Path(a.out) / f"node.{node}.json", rows)


if __name__ == "__main__":
    main()
