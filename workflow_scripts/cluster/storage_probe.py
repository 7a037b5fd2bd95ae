"""Where the dataset's reads are counted (study Fig. 7): the file system that holds the dataset,
read through that file system's own client counters on this node (StorageProbe), or none where it
has none this node can read. telemetry.py samples it with the rest of a node's telemetry.
"""

import glob
import os
import re
import subprocess
from pathlib import Path

import psutil

from .mounts import MOUNTINFO, ib_transport, lustre_target, mount_of, unescape

MMPMON = "/usr/lpp/mmfs/bin/mmpmon"


def _lprocfs_sum(path, counter):
    """The sum of one counter of a Lustre stats file; 0 where the counter has no samples yet.

    The format is lustre-release's lprocfs_stats_seq_show (lustre/obdclass/lprocfs_status.c): a
    header (snapshot_time, and start_time and elapsed_time where stats headers are on), then one
    line per counter that has samples, "<name> <count> samples [<unit>] <min> <max> <sum>" and,
    for some counters, the sum of squares; a counter without samples is not printed at all."""
    for line in Path(path).read_text().splitlines():
        f = line.split()
        if f and f[0] == counter:
            if len(f) < 7 or f[2] != "samples":
                raise ValueError(f"{path}: {counter} line not in lprocfs' format: {line!r}")
            return int(f[6])
    return 0


def _nfs_read_bytes(mountpoint, mountstats="/proc/self/mountstats"):
    """Bytes read from the server for one NFS mount: the 'bytes:' line's fifth counter,
    serverreadbytes (Linux include/linux/nfs_iostat.h), of the mount's 'device' block in
    mountstats; None where the file has no such mount."""
    inside = False
    for line in Path(mountstats).read_text().splitlines():
        if line.startswith("device "):
            m = re.match(r"device \S+ mounted on (\S+) with fstype ", line)
            inside = m is not None and unescape(m.group(1)) == mountpoint
        elif inside and line.strip().startswith("bytes:"):
            return int(line.split()[5])
    return None


def _mmpmon_read_bytes(command, fs):
    """Bytes read on this node from Storage Scale (GPFS) file system `fs`: mmpmon's fs_io_s request
    with -p, one line per mounted file system of keyword-value pairs ("_fs_io_s_ _n_ <ip> _nn_
    <host> _rc_ <rc> _t_ <s> _tu_ <us> _cl_ <cluster> _fs_ <name> _d_ <disks> _br_ <bytes read>
    _bw_ ..."), _br_ counting bytes read from disk and from the pagepool alike (IBM Storage Scale
    docs: mmpmon command; "Display I/O statistics per mounted file system"). mmpmon reads its
    requests from stdin and, with -s, prompts for none."""
    try:
        p = subprocess.run([command, "-p", "-s"], input="fs_io_s\n", capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OSError(f"{command}: {exc}") from exc
    if p.returncode:
        tail = (p.stderr.strip().splitlines() or ["no message"])[-1]
        raise OSError(f"{command} -p -s (fs_io_s) exited with {p.returncode} (it needs root): {tail}")
    listed = []
    for line in p.stdout.splitlines():
        f = line.split()
        if not f or f[0] != "_fs_io_s_":
            continue
        pairs = dict(zip(f[1::2], f[2::2]))
        listed.append(pairs.get("_fs_", "?"))
        if pairs.get("_fs_") == fs:
            if pairs.get("_rc_", "0") != "0":
                raise OSError(f"{command}: fs_io_s answered _rc_ {pairs['_rc_']} for {fs}")
            return int(pairs["_br_"])
    raise OSError(f"{command}: fs_io_s lists no file system {fs} (it lists: {', '.join(listed) or 'none'})")


def _ceph_read_bytes(size_file):
    """Bytes the OSDs returned to one CephFS kernel client: the last column, total_sz(bytes), of
    the "read" row of its debugfs metrics/size (Linux fs/ceph/debugfs.c, metrics_size_show: item,
    total, avg_sz, min_sz, max_sz, total_sz)."""
    for line in Path(size_file).read_text().splitlines():
        f = line.split()
        if f and f[0] == "read":
            return int(f[-1])
    raise ValueError(f"{size_file}: no 'read' row")


# Why a file system without a counter of its own is not measured; one clause, after its type.
_UNSUPPORTED = {
    "overlay": "an overlay merges directories of other file systems, and which layer a read reaches is not known here",
    "tmpfs": "its files live in memory, so no device or server is read",
    "ramfs": "its files live in memory, so no device or server is read",
    "beegfs": "the BeeGFS client publishes no byte counters of its own (/proc/fs/beegfs holds its "
    "configuration and node lists); per-client bytes are counted at the servers (beegfs-ctl --clientstats)",
    "fuse": "a FUSE daemon serves the reads, and what it reads in turn (network or disk) is not counted here",
}


class StorageProbe:
    """Cumulative bytes read from the file system that holds `path`, from that file system's own
    counters on this node: Lustre's client stats, NFS's mountstats, Storage Scale's mmpmon, the
    CephFS kernel client's debugfs metrics, or the block device under a local file system.

    Anything else (an overlay, tmpfs, FUSE, BeeGFS, an unknown type, no path) is unsupported:
    describe() says why and read_bytes() is None, so no read_MBps rows are written. No other figure
    stands in for it: summing the node's local disks, as this probe once did, drew a network file
    system's reads as local disks near 0 MB/s. The counter roots (mountinfo, /proc, /sys with its
    debugfs, the mmpmon command, the disks' counters) and the resolver of symbolic links (`path`'s,
    the mount's device's) are parameters so tests can point them at fakes."""

    def __init__(
        self, path, mountinfo=MOUNTINFO, proc="/proc", sys="/sys", mmpmon=MMPMON, disks=None, resolve=os.path.realpath
    ):
        self.proc, self.sys, self.mmpmon = Path(proc), Path(sys), mmpmon
        self._disks = disks or (lambda: psutil.disk_io_counters(perdisk=True) or {})
        self._resolve = resolve
        self.kind, self.device, self.counter, self.why, self._read = "none", "", None, None, None
        self.mount = None
        if not path:
            self.why = "no dataset path was given"
            return
        try:
            self.mount = mount_of(path, mountinfo, resolve)
        except OSError as exc:
            self.why = f"{mountinfo}: {exc}"
            return
        if self.mount is None:
            self.why = f"{path} is on no mount listed in {mountinfo}"
            return
        fstype = self.mount.fstype
        if fstype == "lustre":
            self._lustre()
        elif fstype.startswith("nfs"):
            self._nfs()
        elif fstype == "gpfs":
            self._gpfs()
        elif fstype == "ceph":
            self._ceph()
        elif not self._block():
            family = "fuse" if fstype.startswith("fuse") else fstype
            self.why = _UNSUPPORTED.get(family) or (
                f"no counters of {fstype} are read by this probe, and its source {self.mount.source} "
                "is not a block device with I/O counters"
            )
        if self._read is not None:
            # Counters that exist but cannot be read (permissions, a format not understood) make the
            # probe unsupported from the start, not a run of failed samples.
            try:
                self._read()
            except (OSError, ValueError) as exc:
                self.why, self._read = str(exc), None

    @property
    def supported(self):
        return self._read is not None

    def _lustre(self):
        fsname, _ = lustre_target(self.mount.source)
        if fsname is None:
            self.why = f"no file system name in its source {self.mount.source} (mgsnid:/fsname)"
            return
        self.kind, self.device = "lustre", fsname
        # Newer clients keep their stats in debugfs, older ones under /proc (lctl get_param reads both).
        roots = [self.sys / "kernel/debug/lustre", self.proc / "fs/lustre"]
        tried = []
        for root in roots:
            try:
                llite = sorted(
                    d for d in (root / "llite").iterdir() if re.fullmatch(re.escape(fsname) + r"-[0-9a-fA-F]+", d.name)
                )
            except OSError as exc:
                tried.append(f"{root / 'llite'}: {exc.strerror}")
                continue
            if not llite:
                tried.append(f"{root / 'llite'}: no instance {fsname}-<id>")
                continue
            # Each mount of the file system is one client instance, <fsname>-<id>; its OSCs and MDCs
            # end in the same id. Their read_bytes count the bytes the servers sent, mmap page-ins
            # and readahead included; llite's count read() calls (page-cache hits included, LMDB's
            # mmap reads not), so it stands in only where there are no OSC/MDC stats.
            ids = [d.name[len(fsname) + 1 :] for d in llite]
            rpcs = sorted(
                f
                for kind in ("osc", "mdc")
                for i in ids
                for f in root.glob(f"{kind}/{glob.escape(fsname)}-*-{kind}-{i}/stats")
            )
            files = rpcs or [d / "stats" for d in llite]
            what = "bytes the servers sent" if rpcs else "bytes read() through the mount"
            self.counter = f"read_bytes of {len(files)} stats files ({what}): {', '.join(map(str, files))}"
            self._read = lambda: sum(_lprocfs_sum(f, "read_bytes") for f in files)
            return
        self.why = f"Lustre's client stats are not readable here ({'; '.join(tried)})"

    def _nfs(self):
        mountpoint, mountstats = self.mount.mountpoint, self.proc / "self/mountstats"
        self.kind, self.device = "nfs", mountpoint
        self.counter = f"{mountstats}: serverreadbytes of {mountpoint}"

        def read():
            n = _nfs_read_bytes(mountpoint, mountstats)
            if n is None:
                raise OSError(f"{mountstats}: no 'bytes:' line for {mountpoint}")
            return n

        self._read = read

    def _gpfs(self):
        fs, command = os.path.basename(self.mount.source), str(self.mmpmon)
        self.kind, self.device = "gpfs", fs
        if not (os.path.isfile(command) and os.access(command, os.X_OK)):
            self.why = (
                f"{command} is not here or not executable, and Storage Scale's byte counters are "
                "read only through mmpmon"
            )
            return
        self.counter = f"{command} fs_io_s: _br_ of {fs} (bytes read from disk and from the pagepool)"
        self._read = lambda: _mmpmon_read_bytes(command, fs)

    def _ceph(self):
        self.kind, self.device = "cephfs", self.mount.mountpoint
        root = self.sys / "kernel/debug/ceph"
        try:
            # One directory per client, <fsid>.client<id>; RBD's clients have no metrics.
            clients = sorted(d for d in root.iterdir() if (d / "metrics/size").is_file())
        except OSError as exc:
            self.why = f"the kernel client's counters are in debugfs, and {root} is not readable here ({exc.strerror})"
            return
        source_fsid = re.match(r"[^@/]*@([0-9a-fA-F-]{36})\.", self.mount.source)
        fsid = self.mount.option("fsid") or (source_fsid.group(1) if source_fsid else None)
        if fsid:
            clients = [d for d in clients if d.name.lower().startswith(fsid.lower() + ".")]
        if len(clients) != 1:
            names = ", ".join(d.name for d in clients) or "none"
            self.why = f"{len(clients)} CephFS clients with metrics under {root} ({names})" + (
                f" for fsid {fsid}" if fsid else ", and the mount names no fsid to tell its own"
            )
            return
        size = clients[0] / "metrics/size"
        self.counter = f"{size}: total_sz of the read row (bytes the OSDs returned)"
        self._read = lambda: _ceph_read_bytes(size)

    def _block(self):
        disks = self._disks()
        names = []
        if self.mount.source.startswith("/dev/"):
            names.append(os.path.basename(self._resolve(self.mount.source)))
        # /dev/root and other aliases: the device number names the disk in /sys/dev/block.
        link = self.sys / "dev/block" / self.mount.devno
        if self.mount.devno and link.is_symlink():
            names.append(os.path.basename(os.readlink(link)))
        for name in names:
            if name in disks:
                self.kind, self.device = "block", name
                self.counter = f"read bytes of block device {name} (/proc/diskstats)"
                self._read = lambda: self._disks()[name].read_bytes
                return True
        return False

    def describe(self):
        """What the storage rows measure, for the node's telemetry.<node>.json: kind (lustre, nfs,
        gpfs, cephfs, block or none), device (the rows' device after "<kind>:"), the mount's
        fstype, mountpoint and source, supported and, where not, why, the counter read, and
        whether the file system's traffic travels over InfiniBand (ib: true, false or "may", with
        ib_why), i.e. whether the IB ports' byte counters include the dataset's reads."""
        m = self.mount
        ib, ib_why = ib_transport(m)
        return {
            "kind": self.kind,
            "device": self.device,
            "fstype": m.fstype if m else None,
            "mountpoint": m.mountpoint if m else None,
            "source": m.source if m else None,
            "supported": self.supported,
            "why": self.why,
            "counter": self.counter,
            "ib": ib,
            "ib_why": ib_why,
        }

    def read_bytes(self):
        """Cumulative bytes read, or None where unsupported."""
        return self._read() if self._read is not None else None
