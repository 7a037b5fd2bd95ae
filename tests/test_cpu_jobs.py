"""CPU stages on a shared cluster: a conversion's threads come from its SLURM allocation, not from
the submitting host's --cores, a write that fails on the user's quota (GPFS, Lustre: EDQUOT)
is named as a quota, with the commands that show it, not as a full disk or a traceback, and a
Lustre quota too small for the copy stops the conversion before it writes."""

import argparse
import errno
import os

import pytest

from workflow_scripts.cluster import cpus, mounts
from workflow_scripts.common.errors import StageError
from workflow_scripts.data import convert, embedded, index


@pytest.mark.unit
def test_a_slurm_jobs_threads_come_from_its_allocation():
    a = argparse.Namespace(threads=4, cpus_per_task=16)  # Snakemake capped {threads} at the login node's 4
    assert cpus.job_threads(a, env={"SLURM_JOB_ID": "7"}, allowed=16) == 16
    assert cpus.job_threads(a, env={"SLURM_JOB_ID": "7"}, allowed=64) == 16  # task/none: at most what it asked
    assert cpus.job_threads(a, env={}, allowed=64) == 4  # a local run: --threads, as --cores capped it


@pytest.mark.stage
def test_a_quota_error_is_named_as_a_quota(tmp_path):
    root = tmp_path / "ILSVRC2012"
    embedded.make(root, classes=2, train_per_class=2, val_per_class=1, seed=1)
    index.build(root, tmp_path / "index", "", 0, 0.5, 1)

    def over_quota(out, split, records, count):
        next(iter(records))
        raise OSError(errno.EDQUOT, "Disk quota exceeded", str(out / split))

    args = argparse.Namespace(
        index=str(tmp_path / "index"),
        out=str(tmp_path / "lmdb"),
        threads=1,
        cpus_per_task=0,
        resize_shorter=0,
        shorter_cap=0,
        jpeg_quality=95,
    )
    with pytest.raises(StageError) as e:
        convert.run("lmdb", over_quota, args)
    said = str(e.value)
    assert "disk quota on that file system is used up" in said and "mmlsquota" in said and "lfs quota" in said
    assert "Fix:" in said and not (tmp_path / "lmdb").exists()


# ---- a Lustre quota read before a conversion writes ----------------------------------------------


def _lfs_row(mnt, used, soft, hard, files=1204, over=" "):
    """A quota row as lfs(1) prints it without -h (lfs.c's print_quota): the name in 15 columns, on a
    line of its own where longer, then kbytes (a "*" where over a limit), quota, limit, grace, and the
    same for files."""
    head = f"{mnt}\n{'':15}" if len(mnt) > 15 else f"{mnt:>15}"
    return f"{head} {used:>7}{over} {soft:>6} {hard:>7} {'-':>7} {files:>7}  {0:>6} {0:>7} {'-':>7}\n"


def _lfs_quota_output(mnt, user=(0, 0), group=(0, 0), project=None):
    """What `lfs quota PATH` prints for the caller's user, group and project: a heading and a column
    heading each ("Disk quotas for usr alice (uid 1000):"), then its row. (used, hard limit) in kB."""
    half = f" {'quota':>7}{'limit':>8}{'grace':>8}"
    cols = f"{'Filesystem':>15}{'kbytes':>8}{half}{'files':>8}{half}\n"
    out = f"Disk quotas for usr alice (uid 1000):\n{cols}" + _lfs_row(mnt, user[0], 0, user[1])
    out += f"Disk quotas for grp imagenet (gid 2000):\n{cols}" + _lfs_row(mnt, group[0], 0, group[1])
    if project:
        over = "*" if project[1] and project[0] >= project[1] else " "
        out += f"Disk quotas for prj 7 (pid 7):\n{cols}" + _lfs_row(mnt, project[0], 0, project[1], over=over)
    return out


@pytest.fixture
def stand_in_lfs(tmp_path, monkeypatch):
    """An `lfs` first on PATH that prints what the test gives it and records its arguments: no Lustre
    here, so this tests our reading of lfs(1)'s documented output and what we decide on it, not Lustre."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    out, calls = tmp_path / "lfs.out", tmp_path / "lfs.calls"
    script = bin_dir / "lfs"
    not_lustre = 'echo "lfs quota: $2: not on a Lustre file system" >&2; exit 1'
    script.write_text(f'#!/bin/sh\necho "$@" >> {calls}\ncat {out}\n[ -s {out} ] || {{ {not_lustre}; }}\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")

    def says(text):
        out.write_text(text)
        return calls

    return says


@pytest.mark.stage
def test_lfs_quota_rows_are_read_as_lfs_prints_them(stand_in_lfs, tmp_path):
    """A stand-in lfs (no Lustre here: our parsing of its documented output, not Lustre): the three
    quotas of `lfs quota PATH`, a long file system name on a line of its own, a row over its limit
    ("*") or inaccurate ("[...]"); the tightest hard limit is the one that decides."""
    long_name = "/lustre/scratch-hdd/alice"
    calls = stand_in_lfs(_lfs_quota_output(long_name, user=(200_000, 0), group=(900_000, 1_000_000), project=(5, 5)))
    quotas = mounts.lustre_quotas(tmp_path)
    assert [(q.kind, q.name, q.filesystem, q.used_kb, q.hard_kb) for q in quotas] == [
        ("usr", "alice", long_name, 200_000, 0),
        ("grp", "imagenet", long_name, 900_000, 1_000_000),
        ("prj", "7", long_name, 5, 5),
    ]
    assert calls.read_text().split() == ["quota", str(tmp_path)]
    assert quotas[0].room() is None and quotas[1].room() == 100_000 * 1024 and quotas[2].room() == 0
    assert mounts.tightest_quota(tmp_path) == quotas[2]
    stand_in_lfs(_lfs_quota_output("/scratch", group=(10, 20)).replace("     10 ", "   [10] "))
    assert [q.used_kb for q in mounts.lustre_quotas(tmp_path)] == [0, 10]
    stand_in_lfs("")  # not on Lustre: lfs says so on stderr and prints no quota
    assert mounts.lustre_quotas(tmp_path) == [] and mounts.tightest_quota(tmp_path) is None


def _small_index(tmp_path):
    root = tmp_path / "ILSVRC2012"
    embedded.make(root, classes=2, train_per_class=2, val_per_class=1, seed=1)
    index.build(root, tmp_path / "index", "", 0, 0.5, 1)
    return argparse.Namespace(
        index=str(tmp_path / "index"),
        out=str(tmp_path / "out"),
        threads=1,
        cpus_per_task=0,
        resize_shorter=0,
        shorter_cap=0,
        jpeg_quality=95,
        delete_old=0,
    )


def _plain_writer(written):
    """A format that stores each record's bytes in one file per split (what the quota check
    guards is the writing, whatever the format)."""

    def write_split(out, split, records, count):
        path = out / f"{split}.bin"
        with open(path, "wb") as f:
            for rec in records:
                f.write(rec.data)
        written.append(path)
        return [path]

    return write_split


@pytest.mark.stage
def test_a_lustre_quota_too_small_for_the_copy_stops_the_conversion_before_it_writes(stand_in_lfs, tmp_path):
    """The group quota leaves 100 kB and the copy needs more: the conversion stops before writing,
    naming the quota, the room, the need and the command, where until now it failed part-way on
    EDQUOT. (A stand-in lfs prints lfs(1)'s documented output: this tests our reading and refusal.)"""
    args = _small_index(tmp_path)
    stand_in_lfs(_lfs_quota_output("/lustre", user=(1, 0), group=(1_000_000, 1_000_100)))
    written = []
    with pytest.raises(StageError) as e:
        convert.run("plain", _plain_writer(written), args)
    said = str(e.value)
    assert "the Lustre group quota of imagenet on /lustre" in said and "leaves 0 MB" in said, said
    assert "the copy needs about" in said and "lfs quota " in said and "Fix:" in said, said
    assert written == [] and not (tmp_path / "out").exists()
    stand_in_lfs(_lfs_quota_output("/lustre", user=(1, 0), group=(1_000_000, 3_000_000)))  # room: 2 GB
    convert.run("plain", _plain_writer(written), args)
    assert (tmp_path / "out" / convert.DONE).is_file() and len(written) == 2


@pytest.mark.stage
def test_a_lustre_quota_too_small_for_a_second_copy_keeps_the_first(stand_in_lfs, tmp_path):
    """A reconversion writes beside the complete copy: a quota without room for both stops it before
    writing, the complete copy untouched, and names conversion.delete_old. (Stand-in lfs, as above.)"""
    from helpers import tree_hashes

    args = _small_index(tmp_path)
    stand_in_lfs("")
    convert.run("plain", _plain_writer([]), args)
    before = tree_hashes(tmp_path / "out")
    used = sum(p.stat().st_size for p in (tmp_path / "out").rglob("*")) // 1024
    stand_in_lfs(_lfs_quota_output("/lustre", user=(used, used + 200)))
    with pytest.raises(StageError, match="Lustre user quota of alice.*beside the complete earlier copy.*delete_old"):
        convert.run("plain", _plain_writer([]), args)
    assert tree_hashes(tmp_path / "out") == before
