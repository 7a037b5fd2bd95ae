"""What a run records about its node: whether the dataset really left the caches (cluster.page_cache,
cluster.mounts) and the GPU telemetry when some of a node's GPUs or readings fail (cluster.telemetry)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import run_script

from workflow_scripts.cluster import mounts, page_cache

# Lines in /proc/self/mountinfo's format (proc(5)), as a Storage Scale client, a FUSE mount, an
# NFS mount with FS-Cache and ordinary local mounts write them.
MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard
61 27 0:52 / /gpfs/fs1 rw,relatime shared:30 - gpfs fs1 rw
62 27 0:53 / /scratch rw,nosuid,nodev,relatime shared:31 - lustre 10.0.0.1@o2ib:/scratch rw,flock,lazystatfs
63 27 0:54 / /mnt/bucket rw,nosuid,nodev,relatime shared:32 - fuse.gcsfuse bucket rw,user_id=0,group_id=0
64 27 0:55 / /nfs/data ro,relatime shared:33 - nfs4 srv:/export/data ro,vers=4.2,rsize=1048576,hard,proto=tcp,fsc,sec=sys
65 27 0:56 / /nfs/home rw,relatime shared:34 - nfs4 srv:/export/home rw,vers=4.2,rsize=1048576,hard,proto=tcp,sec=sys
66 61 0:57 / /gpfs/fs1/local\\040copy rw,relatime shared:35 - xfs /dev/nvme0n1 rw,attr2
"""


@pytest.mark.unit
def test_mount_of_takes_the_longest_mount_point_and_unescapes_it(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(MOUNTINFO)

    def mount_of(path):
        return mounts.mount_of(path, info, resolve=os.path.normpath)  # the paths as written: no host's links

    assert mount_of("/gpfs/fs1/imagenet/train-00000-of-01024").fstype == "gpfs"
    assert mount_of("/gpfs/fs1/local copy/train").fstype == "xfs"
    assert mount_of("/gpfs/fs10/x").fstype == "ext4"  # a prefix of the name is not a parent
    assert mount_of("/nfs/data/x").source == "srv:/export/data"
    # a link is read where it leads: /data/imagenet is a link into the GPFS file system
    into_gpfs = {"/data/imagenet": "/gpfs/fs1/imagenet"}.get
    assert mounts.mount_of("/data/imagenet", info, resolve=into_gpfs).fstype == "gpfs"


@pytest.mark.stage
def test_gpfs_and_other_client_caches_make_eviction_not_verifiable(tmp_path):
    """GPFS's pagepool (and a FUSE daemon's or FS-Cache's store) is not cleared by drop_caches or
    fadvise and not seen by mincore: the report says "not verifiable" (null, with the reason),
    never that the dataset left memory."""
    info = tmp_path / "mountinfo"
    info.write_text(MOUNTINFO)
    why = page_cache.uncheckable(
        [
            "/gpfs/fs1/imagenet",
            "/scratch/imagenet",
            "/mnt/bucket/imagenet",
            "/nfs/data/imagenet",
            "/nfs/home/imagenet",
            "/gpfs/fs1/local copy/x",
        ],
        info,
    )
    assert set(why) == {"/gpfs/fs1/imagenet", "/mnt/bucket/imagenet", "/nfs/data/imagenet"}
    assert "pagepool" in why["/gpfs/fs1/imagenet"] and "fsc" in why["/nfs/data/imagenet"]

    # A whole clear of a real file, with this machine's mount table rewritten so that the file's
    # directory is a GPFS mount point.
    d = Path(tempfile.mkdtemp(dir="/var/tmp"))
    f = d / "train-00000-of-00001"
    f.write_bytes(os.urandom(1 << 20))
    info.write_text(MOUNTINFO + f"70 27 0:60 / {d} rw,relatime shared:40 - gpfs fs2 rw\n")
    report = page_cache.clear([d], command="false", drop_caches=str(tmp_path / "no" / "drop_caches"), mountinfo=info)
    assert report["dataset_evicted"] is None
    assert "pagepool" in report["dataset_evicted_unverifiable"][str(d)]
    assert report["after"]["resident_bytes"] == 0  # mincore's answer is still recorded, for what it is

    # The same file on its real (local) mount: verified as before.
    report = page_cache.clear([d], command="false", drop_caches=str(tmp_path / "no" / "drop_caches"))
    assert report["dataset_evicted"] is True and "dataset_evicted_unverifiable" not in report
    assert "servers_cache_not_emptied" not in report


@pytest.mark.stage
def test_on_lustre_and_nfs_the_servers_cache_is_said_to_be_left_full(tmp_path):
    """Issue 61 item 6: a Lustre client's page cache is the kernel's, so this node's eviction is
    verified, but the object storage servers keep what they served in their memory: the report says
    so beside dataset_evicted (as an NFS server's page cache), for the cold-read findings' caveat."""
    info = tmp_path / "mountinfo"
    info.write_text(MOUNTINFO)
    said = page_cache.servers_uncleared(["/scratch/imagenet", "/nfs/home/imagenet", "/gpfs/fs1/x", "/x"], info)
    assert set(said) == {"/scratch/imagenet", "/nfs/home/imagenet"}
    assert "OSS read cache" in said["/scratch/imagenet"] and "NFS server (srv)" in said["/nfs/home/imagenet"]
    d = Path(tempfile.mkdtemp(dir="/var/tmp"))
    f = d / "train-00000-of-00001"
    f.write_bytes(os.urandom(1 << 20))
    f.read_bytes()
    info.write_text(MOUNTINFO + f"70 27 0:60 / {d} rw,relatime shared:40 - lustre 10.0.0.1@o2ib:/scratch rw,flock\n")
    report = page_cache.clear([d], command="false", drop_caches=str(tmp_path / "no" / "drop_caches"), mountinfo=info)
    assert report["dataset_evicted"] is True and page_cache.resident_bytes(f) == 0  # this node's: verified
    assert "OSS read cache" in report["servers_cache_not_emptied"][str(d)]


@pytest.mark.stage
def test_resident_bytes_counts_the_pages_read(tmp_path):
    """A file on a real disk, evicted, then some of its pages read one by one with readahead off:
    the count is those pages, and what util-linux's fincore counts."""
    page = os.sysconf("SC_PAGE_SIZE")
    d = Path(tempfile.mkdtemp(dir="/var/tmp"))  # a disk: tmpfs pages cannot be evicted
    f = d / "data.bin"
    f.write_bytes(os.urandom(64 * page + 100))  # with a partial last page
    page_cache.evict([f])
    assert page_cache.resident_bytes(f) == 0
    wanted = [0, 1, 2, 10, 33, 63, 64]
    fd = os.open(f, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no readahead: only the pages read
        for p in wanted:
            os.pread(fd, 1, p * page)
    finally:
        os.close(fd)
    got = page_cache.resident_bytes(f)
    fincore = subprocess.run(
        ["fincore", "--noheadings", "--raw", "--output", "PAGES", str(f)], capture_output=True, text=True, check=True
    )
    assert got == len(wanted) * page == int(fincore.stdout) * page


@pytest.mark.stage
def test_telemetry_keeps_the_gpus_and_readings_that_work():
    """A GPU whose NVML handle is denied is logged and left out, the others are sampled; a reading
    that fails loses that reading; an unexpected error loses that sample, not the sampler thread.
    Runs in the PyTorch environment, whose nvidia-ml-py supplies the error classes (see the
    reader's docstring for why NVML is stood in for)."""
    got = run_script("pytorch", "telemetry_failing_gpu.py")
    assert set(got["failed"]) == {"1"} and "NVMLError_NoPermission" in got["failed"]["1"]
    assert "gpu1: no NVML handle" in got["log"]
    assert got["alive_before_stop"]
    samples = got["samples"]
    assert len(samples) >= 8 and not any(m.startswith("gpu1/") for s in samples for m in s)
    full = ["gpu0/gpu_mem_MB", "gpu0/gpu_util_percent", "gpu2/gpu_mem_MB", "gpu2/gpu_util_percent"]
    # Sample 2: gpu0's utilisation read failed (logged once); its other readings and gpu2's are kept.
    assert samples[0] == full and samples[1] == [m for m in full if m != "gpu0/gpu_util_percent"]
    assert "gpu0: reading gpu_util_percent failed (NVMLError_Unknown" in got["log"]
    # Sample 4 raised outside NVML's errors: logged with its traceback and skipped; sampling goes on.
    assert "a sample failed and is skipped" in got["log"] and "RuntimeError" in got["log"]
    assert got["mem_calls_gpu2"] >= len(samples) + 1
    assert all(s == full for s in samples[2:])
    # "Not supported" readings are expected on some GPUs and are not logged.
    assert "gpu_power_W" not in got["log"]


def _git(cwd, *words):
    env = dict(
        os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@x", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@x"
    )
    return subprocess.run(["git", *words], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.stage
def test_a_release_unpacked_inside_another_repository_records_no_commit_of_it(tmp_path):
    """The workflow unpacked from a release tarball into a folder of some other git repository (a
    user's dotfiles, a lab's project): `git -C` would walk up and record that repository's commit as
    the code's. The release's own provenance module, run from the release, records no commit, the
    release's version and why."""
    from workflow_scripts.cluster import provenance

    outer = tmp_path / "lab-project"
    outer.mkdir()
    _git(outer, "init", "-q")
    (outer / "notes.txt").write_text("x\n")
    _git(outer, "add", "notes.txt")
    _git(outer, "commit", "-q", "-m", "lab")
    lab_commit = _git(outer, "rev-parse", "HEAD")
    release = outer / "dlscale-release"
    shutil.copytree(
        provenance.REPO / "workflow_scripts", release / "workflow_scripts", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(provenance.REPO / "pyproject.toml", release / "pyproject.toml")
    code = "import json; from workflow_scripts.cluster import provenance as p; print(json.dumps(p.code_version()))"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=release,
        env=dict(os.environ, PYTHONPATH=str(release)),
        capture_output=True,
        text=True,
    )
    recorded = json.loads(proc.stdout or "{}")
    assert recorded.get("commit") == "" and lab_commit not in proc.stdout, (recorded, proc.stderr)
    assert recorded["dirty"] is None and f"inside {outer}" in recorded["source"], recorded
    # the checkout this test runs from is one: its own commit (and the same version)
    here = provenance.code_version()
    assert here["commit"] == _git(provenance.REPO, "rev-parse", "HEAD") and here["source"] == "git", here
    assert recorded["version"] == here["version"] and here["version"], (recorded, here)
