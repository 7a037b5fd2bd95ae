"""A reconversion never loses the complete copy (data/convert.py, rules/data.smk): the conversion's
Snakemake output is the file it writes last into the copy (done.json), not the copy's folder,
which Snakemake deletes before a job runs. A config edit whose conversion then fails (a source
image gone after indexing) leaves the complete copy, its manifest included, where it was; the next
good run writes the new copy beside it and replaces it only then."""

import json
import os
import subprocess

import pytest
from helpers import REPO, interpreter, snakemake, tree_hashes, without_slurm, write_config

pytestmark = pytest.mark.pipeline


def test_a_failed_reconversion_keeps_the_complete_copy(tmp_path):
    write_config(tmp_path)
    env = without_slurm(tmp_path)
    copy = tmp_path / "data" / "lmdb"
    snakemake(tmp_path, "data/lmdb/done.json", env=env)
    first = tree_hashes(copy)
    assert json.loads((copy / "manifest.json").read_text())["encoding"]["jpeg_quality"] != 90
    source = sorted((tmp_path / "data" / "embedded" / "ILSVRC2012" / "train").glob("*/*.JPEG"))[0]
    held = tmp_path / "held.JPEG"
    os.replace(source, held)
    write_config(tmp_path, conversion__jpeg_quality=90)  # a config edit: the copy is made again
    proc = snakemake(tmp_path, "data/lmdb/done.json", check=False, env=env)
    assert proc.returncode != 0
    log = (tmp_path / "logs" / "data" / "lmdb.log").read_text()
    assert f"the complete earlier copy {copy.relative_to(tmp_path)} is kept, untouched" in log, log[-2000:]
    # Every file of it as it was, but the done.json Snakemake removed before the job: the copy is
    # whole, and the next run still makes the one the config asks for.
    assert tree_hashes(copy) == {k: v for k, v in first.items() if k != "done.json"}
    os.replace(held, source)
    snakemake(tmp_path, "data/lmdb/done.json", env=env)
    assert json.loads((copy / "manifest.json").read_text())["encoding"]["jpeg_quality"] == 90
    assert (copy / "done.json").is_file() and not list(copy.parent.glob(".lmdb.*"))


def test_a_copy_converted_before_done_json_is_named_and_marked_by_one_command(tmp_path):
    """A complete copy of an earlier version (its manifest naming no output, no done.json) stops the
    workflow when it is parsed, naming the copy and the command that marks it; the parse writes
    nothing. The command gives it its done.json, dated as its manifest: nothing is converted again."""
    write_config(tmp_path)
    env = without_slurm(tmp_path)
    snakemake(tmp_path, "data/lmdb/done.json", env=env)
    done = tmp_path / "data" / "lmdb" / "done.json"
    done.unlink()
    manifest = tmp_path / "data" / "lmdb" / "manifest.json"
    stamp = manifest.stat()
    earlier = json.loads(manifest.read_text())
    del earlier["output"]  # as an earlier version wrote it
    manifest.write_text(json.dumps(earlier))
    os.utime(manifest, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    refused = snakemake(tmp_path, "-n", "data/lmdb/done.json", env=env, check=False)
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "data/lmdb: converted by an earlier version" in said, said[-2000:]
    assert "python -m workflow_scripts.data.upgrade --data-dir data" in said and not done.exists(), said[-2000:]
    upgrade = [str(interpreter("workflow")), "-m", "workflow_scripts.data.upgrade", "--data-dir", "data"]
    out = subprocess.run(upgrade, cwd=tmp_path, env=dict(env, PYTHONPATH=str(REPO)), capture_output=True, text=True)
    assert out.returncode == 0 and "marked as converted: data/lmdb" in out.stdout, out.stdout + out.stderr
    plan = snakemake(tmp_path, "-n", "data/lmdb/done.json", env=env)
    assert "Nothing to be done" in plan.stdout + plan.stderr, plan.stdout[-2000:]
    assert done.stat().st_mtime_ns == manifest.stat().st_mtime_ns
