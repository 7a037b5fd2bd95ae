"""Outputs that appear whole or not at all: a killed run leaves nothing that looks complete."""
import contextlib
import json
import os
import shutil
from pathlib import Path


@contextlib.contextmanager
def atomic_dir(final):
    """Yield a scratch directory beside `final`; on success it is renamed to `final`.

    The scratch name carries the pid so two killed runs never collide, and the rename is the
    only step that makes `final` exist, so readers never see a half-written output.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    scratch = final.with_name(f".{final.name}.partial-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    try:
        yield scratch
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    if final.exists():
        shutil.rmtree(final)
    os.replace(scratch, final)


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
