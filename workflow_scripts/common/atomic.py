"""Outputs that appear whole or not at all: a killed run leaves nothing that looks complete."""

import contextlib
import glob
import json
import os
import shutil
import socket
import sys
from pathlib import Path

from .errors import StageError


def _scratch_name(final):
    return f".{final.name}.partial-{socket.gethostname()}-{os.getpid()}"


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_stale_partials(final):
    """Delete the scratch directories of `final` that killed runs on this host left behind
    (their process is gone), saying so on stderr. A scratch of another host, or of a live
    process, is left alone: it may still be written."""
    here = socket.gethostname()
    for scratch in sorted(final.parent.glob(f".{glob.escape(final.name)}.partial-*")):
        owner = scratch.name[len(f".{final.name}.partial-") :]
        host, _, pid = owner.rpartition("-")
        if not pid.isdigit() or (host or here) != here or _alive(int(pid)):
            continue
        size = sum(f.stat().st_size for f in scratch.rglob("*") if f.is_file())
        shutil.rmtree(scratch, ignore_errors=True)
        print(
            f"removed {scratch} ({size / 1e6:.1f} MB): a partial output of {final.name} left by process {pid}, "
            f"which is gone (a killed run)",
            file=sys.stderr,
        )


@contextlib.contextmanager
def atomic_dir(final):
    """Yield a scratch directory beside `final`; on success it is renamed to `final`.

    The scratch name carries the host and pid so two killed runs never collide, and the rename is
    the only step that makes `final` exist, so readers never see a half-written output. Scratch
    directories of killed runs are removed first; an unwritable location fails here, before any
    work, naming it.
    """
    final = Path(final)
    scratch = final.with_name(_scratch_name(final))
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_partials(final)
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
    except OSError as exc:
        raise StageError(f"cannot write the output {final}: {exc.strerror or exc} ({exc.filename or final.parent})")
    try:
        yield scratch
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    # The earlier output goes only once the new one is in its place: moved aside, then deleted.
    aside = final.with_name(f".{final.name}.old-{socket.gethostname()}-{os.getpid()}")
    if final.exists():
        os.replace(final, aside)
    os.replace(scratch, final)
    shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def atomic_file(final):
    """Yield a scratch path beside `final`, renamed to `final` on success: a reader never sees
    half a file."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    scratch = final.with_name(f".{final.name}.partial-{os.getpid()}")
    try:
        yield scratch
    except BaseException:
        scratch.unlink(missing_ok=True)
        raise
    os.replace(scratch, final)


def write_json(path, obj):
    """Stable JSON (sorted keys, fixed indent) so equal content gives equal bytes."""
    with atomic_file(path) as scratch:
        scratch.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
