"""What the three format converters share: reading the index, producing each image's stored
bytes in order and in parallel, the atomic output directory and the manifest.

A format module supplies only `write_split(out_dir, split, records, count) -> [files]`.
"""

import argparse
import collections
import contextlib
import csv
import errno
import json
import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..cluster import cpus, mounts
from ..common import schema
from ..common.atomic import atomic_dir, write_json
from ..common.errors import StageError
from ..common.parallel import ordered_map
from ..common.schema import default as config_default
from . import image_records, sources, verify

SPLITS = ("train", "val")


@dataclass(frozen=True)
class Record:
    position: int  # 0-based order in the split, the same in every format
    relpath: str
    label: int
    synset: str
    text: str
    data: bytes  # JPEG bytes as stored
    width: int
    height: int
    action: str  # passthrough | resized | reencoded-<fmt>-<mode>


class Index:
    """The index stage's output directory (see index.py)."""

    def __init__(self, path):
        self.path = Path(path)
        summary = self.path / "summary.json"
        if not summary.is_file():
            raise StageError(f"{summary} is missing: run the index stage first")
        self.summary = json.loads(summary.read_text())
        self.root = Path(self.summary["root"])
        self.synsets = (self.path / "synsets.txt").read_text().split()
        self.words = dict(ln.split("\t", 1) for ln in (self.path / "synset_words.txt").read_text().splitlines())

    def rows(self, split):
        with open(self.path / f"{split}.tsv", newline="") as f:
            return list(csv.DictReader(f, delimiter="\t"))

    def records(self, split, enc, threads):
        rows = self.rows(split)
        # a tree's files, or where an archive or shard holds them (sources.py)
        reader = sources.reader(self.summary.get("form", "tree"), self.root, self.summary.get("source"))

        def load(pos_row):
            pos, row = pos_row
            data = reader.read(split, row.get("location", ""), row["relpath"])
            probe = image_records.Probe(row["format"], row["mode"], int(row["width"]), int(row["height"]))
            data, w, h, action = image_records.encode(data, probe, enc)
            return Record(
                pos,
                row["relpath"],
                int(row["label"]),
                row["synset"],
                self.words.get(row["synset"], row["synset"]),
                data,
                w,
                h,
                action,
            )

        def loaded():
            try:
                yield from ordered_map(load, enumerate(rows), threads, f"{split}")
            finally:
                reader.close()

        return len(rows), loaded()


def _counting(records, stats, largest):
    for rec in records:
        stats[rec.action] += 1
        largest[0], largest[1] = max(largest[0], rec.width), max(largest[1], rec.height)
        yield rec


# Per-record space the formats add to the JPEG bytes, at most (LMDB's page rounding is the largest).
RECORD_OVERHEAD = 4096
# Below this much free space a failed write is taken for a full disk (LMDB says only "Input/output error").
LOW_SPACE = 64 << 20


def space_needed(index, enc):
    """About how many bytes the output takes, where that is known before writing (JPEGs stored
    as they are); None when every image is resized."""
    if enc.resize_shorter:
        return None
    rows = [r for split in SPLITS for r in index.rows(split)]
    return sum(int(r["bytes"]) for r in rows) + RECORD_OVERHEAD * len(rows)


def _quota(exc):
    """Whether the write failed on the user's quota (GPFS, Lustre, NFS: EDQUOT), not a full disk."""
    while exc is not None:
        if (isinstance(exc, OSError) and exc.errno == errno.EDQUOT) or "Disk quota exceeded" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _disk_full(exc, path):
    while exc is not None:
        if (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or "No space left" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return shutil.disk_usage(path).free < LOW_SPACE


def _space_error(fmt, out, path, needed, what):
    usage = shutil.disk_usage(path)
    need = f"about {needed / 1e6:,.0f} MB" if needed else "more (its size is known only once the images are resized)"
    return StageError(
        f"{fmt} output {out}: {what}; it needs {need}, and the file system holding it has "
        f"{usage.free / 1e6:,.0f} MB free of {usage.total / 1e6:,.0f} MB: free space there or set "
        f"config data_dir to a larger file system"
    )


def _room(path):
    """(bytes the user may still write at `path`, the Lustre quota that allows no more or None):
    the smaller of the free space and what the tightest Lustre quota leaves, read before writing
    so that a conversion that cannot fit stops before its hours, not at EDQUOT part-way."""
    while not os.path.exists(path):
        path = os.path.dirname(os.path.abspath(path))
    free, quota = shutil.disk_usage(path).free, mounts.tightest_quota(path)
    return (quota.room(), quota) if quota and quota.room() < free else (free, None)


def _refuse_without_room(fmt, out, tmp, needed, earlier):
    """Stops, before anything is written, a conversion whose copy cannot fit beside the earlier one,
    in the free space or in the user's Lustre quota (a quota with no room left at all stops one of
    unknown size too)."""
    room, quota = _room(tmp)
    if quota and (room < needed if needed else room == 0):
        need = (
            f"about {needed / 1e6:,.0f} MB" if needed else "more (its size is known only once the images are resized)"
        )
        beside = " beside the complete earlier copy (kept until the new one is complete)" if earlier else ""
        raise StageError(
            f"{fmt} output {out}: {quota} leaves {room / 1e6:,.0f} MB, and the copy needs {need}{beside} (lfs quota "
            f"{tmp.parent}). Fix: free space within the quota, ask for a larger one, or set config data_dir to a "
            f"file system with room"
            + (", or conversion.delete_old: true to delete the complete copy first" if earlier else "")
        )
    if not needed or room >= needed:
        return
    if earlier:
        held = sum(f.stat().st_size for f in Path(earlier).rglob("*") if f.is_file())
        raise StageError(
            f"{fmt} output {out}: no room for the new copy (about {needed / 1e6:,.0f} MB) beside the "
            f"complete one ({held / 1e6:,.0f} MB, kept until the new one is complete): "
            f"{room / 1e6:,.0f} MB free. Fix: free space there, or set config "
            f"conversion.delete_old: true to delete the complete copy before writing the new one"
        )
    raise _space_error(fmt, out, tmp, needed, "not enough free space to write it")


# The conversion rules' output (rules/data.smk): a file in the copy, not the copy's folder, which
# Snakemake would delete before a reconversion; the complete copy stays until the new one replaces it.
DONE = "done.json"


def complete_copy(out):
    """`out` where it holds a complete earlier copy (its manifest written), else None."""
    return out if Path(out, "manifest.json").is_file() else None


UPGRADE = "python -m workflow_scripts.data.upgrade --data-dir {data_dir}"


def earlier_copies(data_dir, formats):
    """The complete copies made before DONE was the conversions' output (their manifests name no
    "output"): Snakemake would convert them again. A copy whose DONE Snakemake removed for a
    reconversion that then failed is not one of them (its manifest names its output): the next run
    makes the copy the config asks for."""
    found = []
    for fmt in formats:
        manifest, done = Path(data_dir, fmt, "manifest.json"), Path(data_dir, fmt, DONE)
        if manifest.is_file() and not done.exists() and "output" not in _read(manifest):
            found.append(Path(data_dir, fmt))
    return found


def refuse_earlier_copies(data_dir, formats):
    """Stops the workflow when it is parsed where a copy is of an earlier version, naming the one
    command that gives them their DONE (data/upgrade.py): the parse writes nothing."""
    found = earlier_copies(data_dir, formats)
    if found:
        raise StageError(
            f"{', '.join(map(str, found))}: converted by an earlier version of this workflow (no {DONE}), so "
            f"Snakemake would convert {'them' if len(found) > 1 else 'it'} again. Fix: "
            f"{UPGRADE.format(data_dir=shlex.quote(str(data_dir)))} (marks each complete copy as converted; "
            f"nothing else changes), or delete the copies to convert them anew"
        )


def mark_earlier_copies(data_dir, formats):
    """Each of earlier_copies() gets its DONE, dated as its manifest, so that Snakemake does not
    convert it again (data/upgrade.py runs it)."""
    found = earlier_copies(data_dir, formats)
    for copy in found:
        manifest = copy / "manifest.json"
        write_json(copy / DONE, {"manifest_sha256": verify.file_sha256(manifest)})
        stamp = manifest.stat()
        os.utime(copy / DONE, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    return found


def _read(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {"output": None}  # unreadable: not taken for an earlier version's complete copy


@contextlib.contextmanager
def _kept_on_failure(earlier):
    try:
        yield
    except BaseException:
        if earlier:
            # on a line of its own, after any progress bar
            print(f"\nthe complete earlier copy {earlier} is kept, untouched", file=sys.stderr)
        raise


def run(fmt, write_split, args, extra_manifest=None):
    """Convert both splits with the format's `write_split`; write synsets and the manifest."""
    index = Index(args.index)
    enc = image_records.Encoding(args.resize_shorter, args.jpeg_quality, args.shorter_cap)
    needed = space_needed(index, enc)
    threads = cpus.job_threads(args)
    start = time.perf_counter()
    earlier = complete_copy(args.out)
    if earlier and args.delete_old and needed and _room(args.out)[0] < needed:
        print(f"deleting the complete earlier copy {args.out} first: no room for both (config conversion.delete_old)")
        shutil.rmtree(args.out)
        earlier = None
    with atomic_dir(args.out) as tmp, _kept_on_failure(earlier):
        _refuse_without_room(fmt, args.out, tmp, needed, earlier)
        try:
            splits, facts_s = _convert(fmt, write_split, index, enc, threads, tmp, extra_manifest)
            problems = verify.check(tmp, "quick")
            if problems:  # never replace a complete copy with one that does not match its own manifest
                raise StageError(f"the new {fmt} copy does not match its manifest: {problems[0]}")
            # Snakemake's output: written last, so that it exists only beside a complete copy
            write_json(tmp / DONE, {"manifest_sha256": verify.file_sha256(tmp / "manifest.json")})
        except Exception as exc:
            if isinstance(exc, StageError):
                raise
            if _quota(exc):
                raise StageError(
                    f"{fmt} output {args.out}: your disk quota on that file system is used up ({type(exc).__name__}: "
                    f"{str(exc)[:200]}); it needs {f'about {needed / 1e6:,.0f} MB' if needed else 'more'}. Fix: free "
                    f"space within your quota (GPFS: mmlsquota; Lustre: lfs quota -h -u $USER <path>), or set "
                    f"config data_dir to a file system with room"
                ) from exc
            if not _disk_full(exc, tmp):
                raise
            written = sum(f.stat().st_size for f in tmp.rglob("*") if f.is_file())
            # The scratch directory goes with the error: the space it took is free again.
            raise _space_error(
                fmt,
                args.out,
                tmp,
                needed,
                f"the disk filled after {written / 1e6:,.1f} MB were written ({type(exc).__name__}: {str(exc)[:200]})",
            ) from exc
    # The checksums of the outputs are timed apart: the conversion rate stays comparable.
    elapsed = time.perf_counter() - start - facts_s
    total = sum(v["images"] for v in splits.values())
    # Timings go to the log, never into the outputs: equal inputs must give equal bytes.
    print(f"{fmt}: " + ", ".join(f"{s} {v['images']} images, {v['bytes'] / 1e6:.1f} MB" for s, v in splits.items()))
    print(f"{fmt}: converted {total} images in {elapsed:.3f} s ({total / elapsed:.0f} images/s, {threads} threads)")


def _convert(fmt, write_split, index, enc, threads, tmp, extra_manifest):
    shutil.copy(index.path / "synsets.txt", tmp / "synsets.txt")
    splits = {}
    for split in SPLITS:
        count, records = index.records(split, enc, threads)
        actions, largest = collections.Counter(), [0, 0]
        files = write_split(tmp, split, _counting(records, actions, largest), count)
        splits[split] = {
            "images": count,
            "files": sorted(str(p.relative_to(tmp)) for p in files),
            "bytes": sum(p.stat().st_size for p in files if p.is_file()),
            "stored_as": dict(sorted(actions.items())),
            # the widest and the tallest image as stored (not one image's sides): DALI's size hint
            "largest": {"width": largest[0], "height": largest[1]},
        }
    with open(index.path / "rejects.tsv", newline="") as f:
        rejected = list(csv.DictReader(f, delimiter="\t"))
    began = time.perf_counter()
    files = verify.facts(fmt, tmp, [tmp / f for s in splits.values() for f in s["files"]])
    facts_s = time.perf_counter() - began
    print(f"{fmt}: sizes, record counts and checksums of {len(files)} files recorded in {facts_s:.3f} s")
    write_json(
        tmp / "manifest.json",
        {
            "format": fmt,
            "source": str(index.root),
            "classes": len(index.synsets),
            "encoding": enc.describe(),
            "splits": splits,
            "rejected": rejected,
            # Per output file: what verify.py checks a copy against before it is read.
            "files": files,
            # the file Snakemake's output is (DONE): a copy whose manifest lacks it is an earlier version's
            "output": DONE,
            **(extra_manifest or {}),
        },
    )
    return splits, facts_s


# config conversion.*: how the records store images, in the order the rules pass them
ENCODING = ("resize_shorter", "jpeg_quality", "shorter_cap")


def encoding_argv(conversion):
    """The converters' words of config conversion (plan/data_plan.py); shorter_cap none at its
    default, so copies made before the key are not converted again."""
    return schema.argv(conversion, "conversion", ENCODING, quiet=("shorter_cap",))


def arg_parser(description):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--index", required=True, help="the index stage's output directory")
    ap.add_argument("--out", required=True)
    cpus.add_job_threads(ap)
    ap.add_argument(
        "--delete-old",
        type=int,
        choices=(0, 1),
        default=int(config_default("conversion.delete_old")),
        help="config conversion.delete_old: where there is no room for both, delete the complete earlier copy "
        "before writing the new one (else it is kept until the new one is complete)",
    )
    schema.add_arguments(ap, "conversion", ENCODING)
    return ap
