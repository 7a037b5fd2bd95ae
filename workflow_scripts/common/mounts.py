"""Which mount a path lives on (/proc/self/mountinfo), and whether clearing the kernel's page
cache can be checked there.

A mountinfo line (proc(5)): mount ID, parent ID, major:minor, root, mount point, mount options,
optional fields, "-", file system type, source, super options.
"""

import os
import re
from dataclasses import dataclass
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")


@dataclass(frozen=True)
class Mount:
    mountpoint: str
    fstype: str
    source: str
    options: frozenset  # the mount's and its super block's options, without values


def _unescape(field):
    # The kernel writes space, tab, newline and backslash in paths as three-digit octal escapes.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text):
    mounts = []
    for line in text.splitlines():
        fields = line.split(" ")
        if "-" not in fields[6:]:
            continue
        sep = fields.index("-", 6)
        if len(fields) < sep + 3:
            continue
        opts = {o.split("=", 1)[0] for o in ",".join([fields[5], *fields[sep + 3 : sep + 4]]).split(",")}
        mounts.append(Mount(_unescape(fields[4]), fields[sep + 1], _unescape(fields[sep + 2]), frozenset(opts)))
    return mounts


def mount_of(path, mountinfo=MOUNTINFO):
    """The mount holding `path`: the longest mount point that is a prefix of its real path (of
    several mounts on one point, the last one, which hides the others)."""
    path = os.path.realpath(path)
    best = None
    for m in parse_mountinfo(Path(mountinfo).read_text()):
        mp = m.mountpoint.rstrip("/") or "/"
        inside = path == mp or path.startswith(mp + "/") or mp == "/"
        if inside and (best is None or len(mp) >= len(best.mountpoint.rstrip("/") or "/")):
            best = m
    return best


def uncheckable_cache(mount):
    """Why a cold read cannot be checked on `mount` (a client-side cache that drop_caches,
    posix_fadvise and mincore do not reach), or None where the kernel's page cache is the only one."""
    if mount is None:
        return None
    if mount.fstype == "gpfs":
        return (
            "IBM Storage Scale (GPFS) keeps file data in its own pagepool, which drop_caches and "
            "posix_fadvise do not clear and mincore does not see"
        )
    if mount.fstype == "fuse" or mount.fstype.startswith("fuse."):
        return (
            f"{mount.fstype} is a FUSE file system: its daemon may keep its own cache of the data "
            "(in memory or on local disk), which drop_caches and posix_fadvise do not clear"
        )
    if "fsc" in mount.options:
        return (
            f"{mount.fstype} mount with FS-Cache (option fsc): file data is also kept in the local "
            "cachefiles store, which drop_caches and posix_fadvise do not clear"
        )
    return None
