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
import subprocess
import sys
import time
from pathlib import Path

from ..cluster import page_cache, provenance
from ..common.atomic import write_json
from .check_rows import FAILED, NA, OK, row
from .owners import dataset_check

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


# The data stage's copies, each in a folder of its name in data_dir (rules/data.smk)
COPIES = ("tfrecord", "recordio", "lmdb")


def other_damaged_copies(data, level, python):
    """[(copy, first problem, problems, fix)] of the other converted copies beside `data` that do not
    match their manifests either: a damaged copy stops the workflow at its pair's gate before the
    other pairs' checks run, so the first failure names them all and they are repaired at once. A
    copy this interpreter cannot read (no lmdb package) is left to its own pair's check."""
    damaged = []
    for fmt in COPIES:
        other = Path(data).parent / fmt
        if other.resolve() == Path(data).resolve() or not (other / "manifest.json").is_file():
            continue
        cmd = [*python, "-m", "workflow_scripts.data.verify", "--data", str(other), "--level", level]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        problems = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip() and not ln.startswith("ok: ")]
        if proc.returncode == 1 and problems:
            first, _, fix = problems[0].partition(". Fix: ")
            damaged.append((other, first, len(problems), fix))
    return damaged


FORCERUN = "snakemake --forcerun "


def _rerun_all(fixes):
    """One `snakemake --forcerun` of every rule the fixes name (verify's "snakemake --forcerun <rule>")."""
    rules = [w for f in fixes if f.startswith(FORCERUN) for w in f[len(FORCERUN) :].split()]
    return FORCERUN + " ".join(dict.fromkeys(rules)) if rules else "; ".join(fixes)


def dataset_row(data, level, python, node):
    """The dataset against its manifest; where it is damaged, with every other damaged copy named."""
    status, figure, cause, fix = dataset_check(data, level, python)
    if status == FAILED:
        others = other_damaged_copies(data, level, python)
        if others:
            cause += "; also damaged: " + "; ".join(
                f"{copy}: {first}" + (f" (and {n - 1} more)" if n > 1 else "") for copy, first, n, _ in others
            )
            fix = _rerun_all([fix, *(f for *_, f in others)])
    return row("dataset", status, figure, cause, fix, node)


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
        rows += [dataset_row(a.data, a.level, shlex.split(a.python), node), readable_row(Path(a.data), node)]
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
