"""Check a data stage output against its manifest: a damaged copy is named, with the rule that
remakes it, before a reader trips over it (a short LMDB kills a DataLoader worker with SIGBUS).

The converters record per output file (manifest.json "files"): its size, its record count, the
sha256 of a sample of its records (every `every`-th from the first, `count` of them) and the
sha256 of the whole file. Levels of check:
  quick   sizes and record counts (read from the indexes and LMDB's header, not the data), and
          that each index fits its data file: what every training job runs at start
  sample  quick + the sampled records' checksums (index and list files: their whole checksum)
  full    quick + every file's whole checksum

    python -m workflow_scripts.data.verify --data DIR [DIR ...] --level quick|sample|full
    python -m workflow_scripts.data.verify --data DIR --record OUT.json --threads N [--cpus-per-task M]

prints one line per problem (file, what differs, expected and found, the fix) and exits 1 when
there is any; 2 when it cannot check (no lmdb package for an LMDB).

With --record, the whole-file check after conversion (rules/data.smk, data_check): full, files
hashed N at a time, timed; OUT.json (data/checked/<format>.json) records each file's size and
mtime as checked. A training job's check at start (require) hashes again every file whose size
or mtime changed since (docs/data.md#the-whole-file-check).
"""

import argparse
import errno
import hashlib
import json
import math
import os
import struct
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..cluster import container_env, cpus
from ..common.atomic import write_json
from ..common.errors import PermanentError, StageError, run_main
from . import records

LEVELS = ("quick", "sample", "full")
# I/O errors of a file system in trouble (a failover, a stale NFS handle, a lost server), not of
# the file: asked again before anything is judged permanent
TRANSIENT = {errno.ESTALE, errno.EIO, errno.ETIMEDOUT, errno.EAGAIN, errno.ENOTCONN, errno.EHOSTDOWN, errno.ECONNRESET}
ASK_AGAIN_S = (5, 20, 60)


class Transient(StageError):
    """A check that met the storage failing, not the data: retried, and never recorded as permanent."""


# The rule that makes each format's directory (rules/data.smk).
RULES = {"tfrecord": "tfrecord", "recordio": "recordio", "lmdb": "lmdb", "index": "index_dataset"}
# Records sampled over a whole dataset, split among its data files (at least one each): ImageNet's
# 1024 + 128 TFRecord shards give one record a shard, its LMDB or RecordIO 512 a split.
SAMPLE_RECORDS = 1024


@dataclass(frozen=True)
class Problem:
    file: Path
    what: str
    expected: object
    found: object
    rule: str

    @property
    def fix(self):
        return f"snakemake --forcerun {self.rule}"

    def __str__(self):
        return f"{self.file}: {self.what}: expected {self.expected}, found {self.found}. Fix: {self.fix}"


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 << 20):
            h.update(chunk)
    return h.hexdigest()


def sample_positions(count, every):
    return range(0, count, every)


def sample_sha256(kind, path, positions):
    h = hashlib.sha256()
    for p, rec in zip(positions, kind.read(path, positions)):
        h.update(struct.pack("<QQ", p, len(rec)))
        h.update(rec)
    return h.hexdigest()


def facts(fmt, root, paths):
    """{relative path: facts} of a converter's output files, for its manifest: deterministic,
    from the files' bytes only."""
    root = Path(root)
    kinds = {str(Path(p).relative_to(root)): records.kind(fmt, Path(p).relative_to(root)) for p in paths}
    per_file = max(1, SAMPLE_RECORDS // max(1, sum(k.read is not None for k in kinds.values())))
    out = {}
    for rel, kind in sorted(kinds.items()):
        path = root / rel
        fact = {"bytes": path.stat().st_size, "records": kind.count(path), "sha256": file_sha256(path)}
        if kind.read is not None and fact["records"]:
            every = math.ceil(fact["records"] / min(per_file, fact["records"]))
            positions = sample_positions(fact["records"], every)
            fact["sample"] = {"every": every, "count": len(positions), "sha256": sample_sha256(kind, path, positions)}
        out[rel] = fact
    return out


def _rule(data_dir, manifest=None):
    name = (manifest or {}).get("format") or Path(data_dir).name
    return RULES.get(name, name)


def check(data_dir, level="quick"):
    """Problems of the data stage output `data_dir` (a format's directory, or the index stage's)
    against its manifest; [] when it matches. Raises StageError when it cannot check."""
    if level not in LEVELS:
        raise StageError(f"data check level {level!r}: one of {', '.join(LEVELS)}")
    data_dir = Path(data_dir)
    path = data_dir / "manifest.json"
    if not path.is_file() and (data_dir / "summary.json").is_file():
        return _check_index(data_dir)
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        found = "no file" if not path.exists() else f"unreadable ({exc})"
        return [Problem(path, "the data stage's manifest", "a JSON file", found, _rule(data_dir))]
    rule = _rule(data_dir, manifest)
    files = manifest.get("files")
    if files is None:
        return _check_legacy(data_dir, manifest, level, rule)
    problems = []
    for rel, fact in files.items():
        p = _check_file(data_dir / rel, records.kind(manifest["format"], rel), fact, level, rule)
        if p:
            problems.append(p)
    return problems


def _check_file(path, kind, fact, level, rule):
    """The first way `path` differs from its facts, or None."""

    def problem(what, expected, found):
        return Problem(path, what, expected, found, rule)

    if not path.is_file():
        return problem("file", f"{fact['bytes']} bytes", "no file")
    size = path.stat().st_size
    try:
        if size != fact["bytes"]:
            note = _note(kind, path, size)
            return problem("size", f"{fact['bytes']} bytes", f"{size} bytes" + (f" ({note})" if note else ""))
        count = kind.count(path)
        if count != fact["records"]:
            return problem("record count", fact["records"], count)
        note = kind.consistency(path, size)
        if note:
            return problem("index", "an index that fits the file", note)
        if level == "sample" and kind.read is not None and "sample" in fact:
            s = fact["sample"]
            digest = sample_sha256(kind, path, sample_positions(count, s["every"]))
            if digest != s["sha256"]:
                which = f"all {s['count']}" if s["every"] == 1 else f"{s['count']} (1 in {s['every']} from record 0)"
                return problem(f"sha256 of its sampled records, {which}", s["sha256"], digest)
        elif level == "full" or level == "sample":
            digest = file_sha256(path)
            if digest != fact["sha256"]:
                return problem("sha256 of the whole file", fact["sha256"], digest)
    except ImportError as exc:
        raise StageError(f"{path}: {exc}")
    except OSError as exc:
        if exc.errno in TRANSIENT:  # the storage, not the file: the caller asks again
            raise Transient(f"{path}: {exc.strerror or exc} (errno {errno.errorcode.get(exc.errno, exc.errno)})")
        return problem("readability", "a readable file", f"{type(exc).__name__}: {exc}")
    except records.Damaged as exc:
        return problem("structure", "records as its index locates them", str(exc))
    except Exception as exc:  # the format's own reader failing (lmdb.Error, an I/O error) is the finding
        return problem("readability", "a readable file", f"{type(exc).__name__}: {exc}")
    return None


def _note(kind, path, size):
    """What the file's own index says of a file whose size is wrong, where it can say it."""
    try:
        return kind.consistency(path, size)
    except ImportError:
        raise
    except Exception:  # the size is the finding; a file too short to open says no more
        return None


def _check_legacy(data_dir, manifest, level, rule):
    """A manifest written before per-file facts: each split's files and their total size only."""
    problems = []
    for split, s in manifest.get("splits", {}).items():
        paths = [data_dir / f for f in s.get("files", [])]
        missing = [p for p in paths if not p.is_file()]
        if missing:
            problems.append(Problem(missing[0], "file", "a file", "no file", rule))
            continue
        total = sum(p.stat().st_size for p in paths)
        if "bytes" in s and total != s["bytes"]:
            problems.append(
                Problem(
                    data_dir,
                    f"total size of split {split}'s {len(paths)} files",
                    f"{s['bytes']} bytes",
                    f"{total} bytes",
                    rule,
                )
            )
    if level != "quick":
        problems.append(
            Problem(
                data_dir / "manifest.json",
                f"per-file facts for a {level} check",
                "a 'files' map",
                "none (converted before they were recorded)",
                rule,
            )
        )
    return problems


def record_path(data_dir):
    """Where the whole-file check of a format's directory records what it checked."""
    data_dir = Path(data_dir)
    return data_dir.parent / "checked" / f"{data_dir.name}.json"


def _stat(path):
    st = path.stat()
    return {"bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def _manifest(data_dir):
    path = Path(data_dir) / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise StageError(f"{path}: the data stage's manifest cannot be read ({exc})") from None
    if manifest.get("files") is None:
        raise StageError(
            f"{path}: no per-file facts (an older conversion): remake it (snakemake --forcerun {_rule(data_dir)})"
        )
    return manifest


def whole(data_dir, threads=1, only=None):
    """Every file of a format's directory (or those in `only`) against its manifest's size, record
    count and whole-file sha256, `threads` files at a time (hashlib lets go of the GIL over large
    reads). -> (problems, {rel: size and mtime as checked}, bytes read, seconds)."""
    data_dir = Path(data_dir)
    manifest = _manifest(data_dir)
    rule = _rule(data_dir, manifest)
    files = {rel: f for rel, f in manifest["files"].items() if only is None or rel in only}

    def one(item):
        rel, fact = item
        path = data_dir / rel
        before = _stat(path) if path.is_file() else None
        return rel, _check_file(path, records.kind(manifest["format"], rel), fact, "full", rule), before

    started = time.perf_counter()
    with ThreadPoolExecutor(max(1, threads)) as pool:
        done = list(pool.map(one, sorted(files.items())))
    seconds = time.perf_counter() - started
    problems = [p for _, p, _ in done if p]
    seen = {rel: st for rel, _, st in done if st}
    return problems, seen, sum(files[rel]["bytes"] for rel in seen), seconds


def write_record(data_dir, out, threads):
    """The whole-file check of data_dir, recorded in `out` when it passes; -> its problems."""
    problems, seen, nbytes, seconds = whole(data_dir, threads)
    rate = nbytes / seconds / 1e6 if seconds else None
    print(
        f"whole-file check of {data_dir}: {len(seen)} files, {nbytes / 1e9:.3f} GB in {seconds:.2f} s "
        f"({rate or 0:.0f} MB/s, {threads} at a time)"
    )
    if not problems:
        # the rate went to the log above: the record holds what was checked, not how fast
        write_json(out, {"data": str(Path(data_dir).resolve()), "bytes": nbytes, "files": seen})
    return problems


def changed_since_check(data_dir):
    """The files of data_dir whose size or mtime differ from the whole-file check's record (all of
    them where a file is new to it); None where there is no record."""
    path = record_path(data_dir)
    try:
        checked = json.loads(path.read_text())["files"]
    except (OSError, ValueError, KeyError):
        return None
    now = {rel: _stat(Path(data_dir) / rel) for rel in _manifest(data_dir)["files"] if (Path(data_dir) / rel).is_file()}
    return {rel for rel, st in now.items() if checked.get(rel) != st}


def _check_index(index_dir):
    summary = json.loads((index_dir / "summary.json").read_text())
    problems = []
    for split, n in summary.get("images", {}).items():
        tsv = index_dir / f"{split}.tsv"
        rows = records.line_count(tsv) - 1 if tsv.is_file() else None
        if rows != n:
            problems.append(
                Problem(tsv, "rows (summary.json images)", n, "no file" if rows is None else rows, RULES["index"])
            )
    return problems


def patient(fn, waits=ASK_AGAIN_S, sleep=time.sleep):
    """fn(), asked again after each of `waits` seconds while the storage fails (Transient); then a
    StageError that says so, which is never recorded as permanent (the run is tried again)."""
    for wait in (*waits, None):
        try:
            return fn()
        except Transient as exc:
            if wait is None:
                raise StageError(
                    f"the dataset could not be read: {exc}, after {len(waits)} more tries over {sum(waits)} s: "
                    "the file system, not the data"
                ) from None
            print(f"data check: {exc}; asking again in {wait} s", file=sys.stderr, flush=True)
            sleep(wait)


def require(data_dir):
    """The training job's check at start: quick, the whole-file check again for every file whose
    size or mtime changed since its record, and a PermanentError with the first problem in one
    line (the others are one command away): a dataset that fails its manifest fails every attempt
    until it is rebuilt, so the training job records it at once instead of running it again."""

    def at_start():
        problems = check(data_dir, "quick")
        changed = changed_since_check(data_dir) if not problems else None
        if changed:
            # written since the whole-file check: hashed again before anything is trained on it
            return whole(data_dir, threads=4, only=changed)[0]
        return problems

    problems = patient(at_start)
    image = os.environ.get(container_env.IMAGE)
    if problems and image and problems[0].found == "no file":
        # from inside, a folder the container was not given looks exactly like a file never made
        raise PermanentError(
            f"not visible inside the container {image}: {problems[0].file} (not bound, if the host has it: "
            f"bind its folder through the interpreter's bind list in config; else {problems[0].fix})"
        )
    if problems:
        more = (
            f" (and {len(problems) - 1} more: python -m workflow_scripts.data.verify --data {data_dir})"
            if len(problems) > 1
            else ""
        )
        raise PermanentError(f"the dataset does not match its manifest: {problems[0]}{more}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", required=True, help="data stage output directories")
    ap.add_argument("--level", choices=LEVELS, default="quick")
    ap.add_argument("--record", help="the whole-file check: full, recorded here when it passes (one --data)")
    cpus.add_job_threads(ap)  # with --record: files hashed at once
    a = ap.parse_args()
    if a.record:
        if len(a.data) != 1:
            ap.error("--record checks one --data directory")
        problems = patient(lambda: write_record(a.data[0], a.record, cpus.job_threads(a)))
        for p in problems:
            print(p)
        sys.exit(1 if problems else 0)
    bad = 0
    for d in a.data:
        problems = patient(lambda d=d: check(d, a.level))
        for p in problems:
            print(p)
        if not problems:
            print(f"ok: {d} matches what the data stage recorded ({a.level} check)")
        bad += len(problems)
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    run_main(main)
