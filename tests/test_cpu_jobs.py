"""CPU stages on a shared cluster: a conversion's threads come from its SLURM allocation, not from
the submitting host's --cores, and a write that fails on the user's quota (GPFS, Lustre: EDQUOT)
is named as a quota, with the commands that show it, not as a full disk or a traceback."""

import argparse
import errno

import pytest

from workflow_scripts.cluster import cpus
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
