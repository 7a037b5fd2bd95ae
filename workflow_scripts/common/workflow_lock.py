"""One workflow at a time in a working directory (rules/common.smk takes it; docs/faults.md).

Snakemake's own lock is a check followed by a write, so two `snakemake all` started at the same
moment in one directory can both get past it and run the same jobs side by side, each measuring the
other and writing into the other's files. This lock is one step of the kernel's: an exclusive
flock on LOCK_FILE, taken by the workflow's main process as it starts its jobs and held until it
exits, however it exits, so it is never left behind. The file keeps who holds it (pid, host, start,
command line, directory), for the message the second run stops with.
"""

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

LOCK_FILE = ".snakemake/dlscale.lock"
_held = []  # the open, locked file: the lock lasts as long as this process


class Busy(Exception):
    """Another process holds the lock; the message names it and what to do."""


def command_of(pid):
    """A process's command line as one string ("" where it cannot be read)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _record():
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.time(),
        "command": command_of(os.getpid()) or " ".join(sys.argv),
        "directory": os.getcwd(),
    }


def describe(record):
    """The holder in words: pid, host, when it started, its command line."""
    if not record:
        return "a process that has not written who it is yet (it has just started)"
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record["started"]))
    return f"pid {record['pid']} on {record['host']}, started {started} (`{record['command']}`)"


def read(path):
    """The record in a lock file, or None (none written yet, or unreadable)."""
    try:
        return json.loads(Path(path).read_text() or "null")
    except (OSError, ValueError):
        return None


def busy_message(workdir, path, record):
    return (
        f"another snakemake is running this workflow in {os.path.abspath(workdir)}: {describe(record)}. Two "
        "runs in one directory run the same jobs side by side, each measuring the other and writing into the "
        "other's files: wait for it to end, or stop it, or give this run a directory of its own (--directory). "
        f"The lock ({path}) is released the moment that process exits; if it is gone and snakemake says the "
        "directory is locked, that is snakemake's own lock, left by a killed run: `snakemake --unlock`"
    )


def _open_locked(workdir, path):
    """The lock file opened and locked, or raises Busy / OSError (no locks on this file system)."""
    while True:
        # "a+": the holder's record must survive this open. Python does not let the jobs inherit the
        # descriptor, so a job left running after the workflow exits does not keep the lock.
        f = open(path, "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise Busy(busy_message(workdir, path, read(path))) from None
        except OSError:
            f.close()
            raise
        # Locked, but is it still the file at `path`? One removed meanwhile would lock nobody out.
        try:
            if os.stat(path).st_ino == os.fstat(f.fileno()).st_ino:
                return f
        except FileNotFoundError:
            pass
        f.close()


def take(workdir="."):
    """The lock of `workdir`, held until this process exits; raises Busy where another process holds
    it. -> None, or a line to say where this file system has no locks (nothing then stops a second
    run)."""
    path = os.path.join(workdir, LOCK_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        f = _open_locked(workdir, path)
    except OSError as exc:
        return f"dlscale: cannot lock {path} ({exc.strerror}): nothing stops a second run in this directory"
    f.seek(0)
    f.truncate()
    f.write(json.dumps(_record()))
    f.flush()
    _held.append(f)
    return None


def running_here(workdir="."):
    """The holder in words (describe) where the lock file names a process of this host that is
    still running with the command it recorded, else None. It only reads the file: a look that took
    the lock, however briefly, could turn a run starting at that moment away."""
    record = read(os.path.join(workdir, LOCK_FILE))
    if not record or record.get("host") != socket.gethostname() or record.get("pid") == os.getpid():
        return None
    command = command_of(record["pid"])
    return describe(record) if command and command == record.get("command") else None
