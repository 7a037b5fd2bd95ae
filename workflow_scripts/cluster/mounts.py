"""Which mount a path lives on (/proc/self/mountinfo), whether clearing the kernel's page
cache can be checked there and whether the file system's servers keep a cache of their own, how
its file system reaches its servers (Lustre's NIDs, NFS's transport), whether it is mounted
read-only, and what room the user's Lustre quotas leave there.

A mountinfo line (proc(5)): mount ID, parent ID, major:minor, root, mount point, mount options,
optional fields, "-", file system type, source, super options.
"""

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")


@dataclass(frozen=True)
class Mount:
    mountpoint: str
    fstype: str
    source: str
    options: frozenset  # the mount's and its super block's options, without values
    devno: str = ""  # major:minor of the mounted device: a disk's where the file system sits on one
    option_text: str = ""  # the mount's and its super block's options, with their values

    def option(self, key):
        """The value of option `key` ("" for a flag), or None where the mount has no such option."""
        for o in self.option_text.split(","):
            name, _, value = o.partition("=")
            if name == key:
                return value
        return None


def unescape(field):
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
        text = ",".join([fields[5], *fields[sep + 3 : sep + 4]])
        opts = {o.split("=", 1)[0] for o in text.split(",")}
        mounts.append(
            Mount(unescape(fields[4]), fields[sep + 1], unescape(fields[sep + 2]), frozenset(opts), fields[2], text)
        )
    return mounts


def mount_of(path, mountinfo=MOUNTINFO, resolve=os.path.realpath):
    """The mount holding `path`: the longest mount point that is a prefix of its real path, as
    `resolve` gives it (of several mounts on one point, the last one, which hides the others)."""
    path = resolve(path)
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


def servers_cache(mount):
    """Why clearing this node cannot make a read cold on `mount` although the node's own page cache
    is the only client cache (mincore verifies it): the servers keep the data they served in their
    memory, which nothing on a client empties. None for a local file system, and for the client-side
    caches uncheckable_cache names."""
    if mount is None:
        return None
    if mount.fstype == "lustre":
        return (
            "Lustre's object storage servers keep the file data they served in their own memory (the OSS read "
            "cache), which clearing this node's page cache does not empty"
        )
    if mount.fstype in ("nfs", "nfs4"):
        return (
            f"the NFS server ({mount.source.rsplit(':', 1)[0]}) keeps the file data it served in its own page "
            "cache, which clearing this node's page cache does not empty"
        )
    return None


def lustre_target(source):
    """(fsname, [LNet networks of the MGS NIDs]) of a Lustre mount's source, e.g.
    "10.0.0.1@o2ib:10.0.0.2@o2ib:/scratch/sub" -> ("scratch", ["o2ib", "o2ib"]); (None, []) where
    the source is not in mount.lustre(8)'s form mgsnid[:mgsnid...]:/fsname[/subdir]."""
    nids, sep, path = source.rpartition(":/")
    if not sep or not path:
        return None, []
    # A network name is a type and an optional number (o2ib, o2ib3, tcp0); the address before the
    # "@" may itself hold colons (IPv6), so only the "@network" parts are read.
    return path.split("/")[0], re.findall(r"@([A-Za-z0-9]+)", nids)


def ib_transport(mount):
    """(True | False | "may", why) -- whether the file system's traffic on this node travels over
    InfiniBand (RDMA verbs), so that the IB ports' byte counters include the dataset's reads."""
    if mount is None:
        return False, None
    if mount.fstype == "lustre":
        nets = sorted(set(lustre_target(mount.source)[1]))
        ib = [n for n in nets if n.startswith("o2ib")]
        if ib:
            # o2ib is LNet's verbs driver (InfiniBand, or RoCE, whose bytes the same port counters count).
            return True, f"{mount.mountpoint} is Lustre over {', '.join(ib)}"
        return False, None
    if mount.fstype.startswith("nfs"):
        if mount.option("proto") == "rdma":
            return True, f"{mount.mountpoint} is NFS over RDMA (proto=rdma)"
        return False, None
    if mount.fstype == "gpfs":
        return "may", (
            f"{mount.mountpoint} is IBM Storage Scale (GPFS), which uses RDMA where the cluster's "
            "verbsRdma setting is on, a setting not visible from this node's mount table"
        )
    if mount.fstype == "beegfs":
        return "may", (
            f"{mount.mountpoint} is BeeGFS, which uses RDMA where its client configuration sets "
            "connUseRDMA, a setting not visible from this node's mount table"
        )
    return False, None


def read_only(path):
    """Why nothing can be written at `path`, an existing folder, by any user (its file system is
    mounted read-only), or None."""
    try:
        if not os.statvfs(path).f_flag & os.ST_RDONLY:
            return None
    except OSError:
        return None
    try:
        mount = mount_of(path)
    except OSError:
        mount = None
    where = f" ({mount.fstype} at {mount.mountpoint})" if mount else ""
    return f"its file system{where} is mounted read-only, so no user can write there"


# `lfs quota` answers from the quota servers: seconds, or long where one is down
LFS_TIMEOUT_S = 60
# lfs(1)'s heading of each quota it reports: "Disk quotas for usr alice (uid 1000):" (older
# releases: "user"/"group"); the row follows its column heading, the file system's name alone on a
# line of its own where it is longer than 15 characters
_QUOTA_HEADING = re.compile(r"^Disk quotas for (usr|grp|prj|user|group|project) (.*) \([ugp]id (\d+)\):")


@dataclass(frozen=True)
class Quota:
    kind: str  # usr, grp or prj, as lfs names it
    name: str
    filesystem: str
    used_kb: int
    soft_kb: int  # 0: none
    hard_kb: int  # 0: none

    def room(self):
        """Bytes that can still be written before a write fails with EDQUOT; None without a hard limit."""
        return max(0, self.hard_kb - self.used_kb) * 1024 if self.hard_kb else None

    def __str__(self):
        who = {"usr": "user", "grp": "group", "prj": "project"}.get(self.kind, self.kind)
        return (
            f"the Lustre {who} quota of {self.name} on {self.filesystem}: {self.used_kb / 1e3:,.0f} MB used of a "
            f"hard limit of {self.hard_kb / 1e3:,.0f} MB"
        )


KINDS = {"usr": "usr", "user": "usr", "grp": "grp", "group": "grp", "prj": "prj", "project": "prj"}


def _kb(field):
    # "[n]": inaccurate (a target did not answer), "n*": over a limit; either way the figure
    return int(field.strip("[]*"))


def _row(lines):
    """The words of a quota's row: the lines after its heading, up to the next heading."""
    words = []
    for line in lines:
        if _QUOTA_HEADING.match(line.strip()) or len(words) >= 9:
            break
        if line.strip() and not line.strip().startswith("Filesystem"):
            words += line.split()
    return words


def parse_lfs_quota(text):
    """The quotas of `lfs quota [PATH]`'s output (without -h or -v): one Quota a heading."""
    quotas, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        m = _QUOTA_HEADING.match(line.strip())
        if not m:
            continue
        words = _row(lines[i + 1 : i + 4])
        try:
            used, soft, hard = (_kb(w) for w in words[1:4])
        except (ValueError, IndexError):
            continue  # not a row in kilobytes (-h's units, an error in its place)
        quotas.append(Quota(KINDS[m.group(1)], m.group(2), words[0], used, soft, hard))
    return quotas


def lustre_quotas(path):
    """The Lustre quotas of this process's user, group and project on the file system holding
    `path`, an existing folder, from `lfs quota` (which reports all three where none is named);
    [] where there is no lfs or the path is not on Lustre (lfs then prints no quota)."""
    lfs = shutil.which("lfs")
    if lfs is None:
        return []
    try:
        proc = subprocess.run([lfs, "quota", str(path)], capture_output=True, text=True, timeout=LFS_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return []
    # its exit status is not the answer: one quota type not enabled fails it beside the others' rows
    return parse_lfs_quota(proc.stdout)


def tightest_quota(path):
    """The Lustre quota at `path` that leaves the least room (a hard limit), or None."""
    limited = [q for q in lustre_quotas(path) if q.room() is not None]
    return min(limited, key=Quota.room) if limited else None
