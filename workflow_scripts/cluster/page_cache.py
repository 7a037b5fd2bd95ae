"""Clearing the page cache before a run, as the study did (page cache, dentries and inodes on the
head and compute nodes), and checking that the dataset really left memory.

Methods, in order: a configured command (e.g. a sudo rule); writing 3 to
/proc/sys/vm/drop_caches (root); else evicting the dataset's own files with
posix_fadvise(POSIX_FADV_DONTNEED), which needs no privilege. Scope "dataset" (config
training.cache_clear) goes straight to the last: the node's other caches stay. Whatever ran, residency of the
dataset files is then measured with mincore(2), so a drop that did not happen is never reported
as done. Where the dataset's file system keeps a cache of its own (GPFS's pagepool, a FUSE
daemon's, FS-Cache), mincore cannot show whether a read will be cold: there `dataset_evicted` is
null and `dataset_evicted_unverifiable` says why. Where its servers keep one (Lustre's OSS, an NFS
server), `servers_cache_not_emptied` says so beside the node's own verdict.
"""

import argparse
import ctypes
import ctypes.util
import json
import mmap
import os
import socket
import subprocess
from pathlib import Path

import numpy as np

from ..common import schema
from ..common.atomic import write_json
from . import mounts

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
PAGE = os.sysconf("SC_PAGE_SIZE")
MAP_FAILED = ctypes.c_void_p(-1).value


def dataset_files(paths):
    out = []
    for p in map(Path, paths):
        if p.is_file():
            out.append(p)
        elif p.is_dir():
            out += sorted(q for q in p.rglob("*") if q.is_file())
    return out


def resident_bytes(path):
    """Bytes of `path` now in the page cache (mincore over a read-only mapping)."""
    size = os.path.getsize(path)
    if size == 0:
        return 0
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, MAP_FAILED):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            # One byte per page (a shard of a real dataset: millions), its low bit = resident.
            vec = np.zeros((size + PAGE - 1) // PAGE, dtype=np.uint8)
            if _libc.mincore(addr, size, vec.ctypes.data_as(ctypes.POINTER(ctypes.c_ubyte))) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            return min(size, int(np.count_nonzero(vec & 1)) * PAGE)
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def _said_of_mounts(paths, mountinfo, says):
    """{path: why} for the paths whose mount `says` (a mounts function of a mount) something of."""
    found = {p: says(mounts.mount_of(p, mountinfo)) for p in map(str, paths)}
    return {p: why for p, why in found.items() if why}


def uncheckable(paths, mountinfo=mounts.MOUNTINFO):
    """{path: why} for the dataset paths whose file system caches data where mincore cannot see."""
    return _said_of_mounts(paths, mountinfo, mounts.uncheckable_cache)


def servers_uncleared(paths, mountinfo=mounts.MOUNTINFO):
    """{path: why} for the dataset paths whose file system's servers keep a cache of their own
    (Lustre's OSS read cache, an NFS server's page cache), which no clearing on a node reaches."""
    return _said_of_mounts(paths, mountinfo, mounts.servers_cache)


def evicted(after, unverifiable):
    """True/False from mincore; None where the file system's own cache makes that no answer."""
    if unverifiable:
        return None
    return after["resident_bytes"] == 0 and after["unverifiable_files"] == 0


def residency(files):
    """Resident bytes of `files`. For a file the caller may not write, Linux's mincore reports
    every page as resident (a side-channel guard), so such files are counted as unverifiable and
    a clear over them is never reported as verified."""
    total = sum(os.path.getsize(f) for f in files)
    return {
        "files": len(files),
        "bytes": total,
        "resident_bytes": sum(resident_bytes(f) for f in files),
        "unverifiable_files": sum(not os.access(f, os.W_OK) for f in files),
    }


def evict(files):
    """posix_fadvise(DONTNEED) per file; dirty pages cannot be dropped, so flush them first."""
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


# config training.cache_clear_command and cache_clear: the flags of every job that clears the page
# cache or passes the clearing on (add_arguments, argv)
KEYS = ("cache_clear_command", "cache_clear")
SCOPES = tuple(schema.section("training")["cache_clear"]["enum"])


def add_arguments(ap):
    """--cache-clear-command and --cache-clear, from the schema (--cache-clear's choices its enum)."""
    return schema.add_arguments(ap, "training", KEYS)


def argv(command, scope):
    """Those flags' words for a command started from here: one word each (--flag=value), as a
    command may start with a dash."""
    return schema.argv({"cache_clear_command": command, "cache_clear": scope}, "training", KEYS, joined=True)


def scope_for(configured, sharing):
    """(the scope a run clears, why it is not the configured one or ""). A node-wide drop empties
    every process's cache on the node: only a run that holds its nodes alone may do it. sharing:
    slurm.job_sharing's answer for the run's job, None outside SLURM (a local run, which the
    workflow runs alone: plan/point_jobs.py, threads_to_run_alone)."""
    if configured != "node" or sharing is None or sharing["exclusive"]:
        return configured, ""
    return "dataset", (
        f"SLURM job {sharing['job']} does not hold its nodes alone (OverSubscribe={sharing['oversubscribe']}: "
        "systems.<name>.exclusive is false, or the partition lets jobs share nodes), so a node-wide drop would "
        "empty other jobs' caches mid-run: only this run's dataset is evicted"
    )


def clear(paths, command="", drop_caches="/proc/sys/vm/drop_caches", mountinfo=mounts.MOUNTINFO, scope="node"):
    """Clear the cache for a run over `paths` (scope "node": the node's caches, as the study did;
    "dataset": the dataset's files only); returns what ran and what was verified."""
    files = dataset_files(paths)
    report = {"before": residency(files), "attempts": [], "scope": scope}
    method, node_wide = None, scope == "node"
    if node_wide and command:
        proc = subprocess.run(command, shell=True, capture_output=True, text=True)
        report["attempts"].append(
            {"method": "command", "command": command, "ok": proc.returncode == 0, "error": proc.stderr.strip()[-500:]}
        )
        method = "command" if proc.returncode == 0 else None
    if method is None and node_wide:
        try:
            os.sync()
            with open(drop_caches, "w") as f:
                f.write("3\n")
            method = "drop_caches"
            report["attempts"].append({"method": "drop_caches", "ok": True})
        except OSError as exc:
            report["attempts"].append({"method": "drop_caches", "ok": False, "error": str(exc)})
    if method is None:
        evict(files)
        method = "fadvise_dontneed"
        report["attempts"].append({"method": "fadvise_dontneed", "ok": True})
    after = residency(files)
    if after["resident_bytes"]:
        # Pages read back between the clear and the check (another node's task on a shared
        # kernel, a scanner): evict the dataset's own pages again.
        evict(files)
        report["attempts"].append({"method": "fadvise_dontneed", "ok": True, "after": method})
        after = residency(files)
    unverifiable = uncheckable(paths, mountinfo)
    report.update(
        {
            "method": method,
            "after": after,
            # Only a drop of all three (page cache, dentries, inodes) counts as the study's clear.
            "dropped_all_caches": method in ("drop_caches", "command"),
            "dataset_evicted": evicted(after, unverifiable),
        }
    )
    if unverifiable:
        report["dataset_evicted_unverifiable"] = unverifiable
    servers = servers_uncleared(paths, mountinfo)
    if servers:
        # dataset_evicted still says what this node's cache holds; the servers' memory is beyond it
        report["servers_cache_not_emptied"] = servers
    return report


def main():
    ap = argparse.ArgumentParser(description="Clear the page cache before a run and verify it.")
    ap.add_argument("--paths", nargs="*", default=[], help="the dataset files or directories of the run")
    add_arguments(ap)
    ap.add_argument("--drop-caches", default="/proc/sys/vm/drop_caches")
    ap.add_argument("--out", required=True, help="JSON report; {node} is replaced by this host's name")
    a = ap.parse_args()
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    report = {"node": node, **clear(a.paths, a.cache_clear_command, a.drop_caches, scope=a.cache_clear)}
    write_json(a.out.replace("{node}", node), report)
    print(
        json.dumps(
            {
                k: report[k]
                for k in (
                    "node",
                    "method",
                    "dropped_all_caches",
                    "dataset_evicted",
                    "dataset_evicted_unverifiable",
                    "servers_cache_not_emptied",
                )
                if k in report
            }
        )
    )
    # In words, for the job's log: the cold-read findings carry each as a caveat (results/guards.py).
    if report.get("dataset_evicted_unverifiable"):
        print(
            f"page cache: {node}: the dataset's file system's own cache was not emptied: "
            f"{report['dataset_evicted_unverifiable']}"
        )
    if report.get("servers_cache_not_emptied"):
        print(f"page cache: {node}: the file servers' own cache was not emptied: {report['servers_cache_not_emptied']}")
    if report["dataset_evicted"] is False:
        print(f"page cache: {node}: the dataset's eviction did not take: {report['after']}")


if __name__ == "__main__":
    main()
