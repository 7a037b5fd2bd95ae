"""One workflow at a time in a working directory (workflow_scripts/common/workflow_lock.py): a
second `snakemake` that gets past Snakemake's own lock, as two started at the same moment do, stops
naming the first; one that meets Snakemake's lock is told who holds the directory; a dry run is not
stopped; the lock goes with the process that held it."""

import os
import socket
import subprocess
import sys
import time

import pytest
from helpers import REPO, SNAKEMAKE, interpreter, without_slurm, write_config

pytestmark = pytest.mark.stage

# The system local's PyTorch: its one training run notes that it ran and waits for the test's word,
# holding the workflow (and its lock) open meanwhile.
HOLDER = """#!/bin/sh
case "$*" in
  *workflow_scripts.train.pytorch_ddp*)
    echo ran >> {ran}
    while [ ! -e {release} ]; do sleep 0.2; done
    exit 3 ;;
esac
exec {python} "$@"
"""


def start(work, *args):
    return subprocess.Popen(
        [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(work), "--cores", "2", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=without_slurm(work),  # the suite's SLURM cluster may be up: this plan asks none
    )


def finish(proc, timeout=300):
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        out += f"\n[still running after {timeout} s: killed]"
    return proc.returncode, out


@pytest.fixture
def held(tmp_path):
    """A workflow running in tmp_path (its training run waiting): (the process, its directory, the
    file its run notes each start in), released and waited for afterwards."""
    ran, release = tmp_path / "ran", tmp_path / "release"
    fake = tmp_path / "holder-python"
    fake.write_text(HOLDER.format(ran=ran, release=release, python=interpreter("pytorch")))
    fake.chmod(0o755)
    write_config(
        tmp_path,
        systems__local__envs={"pytorch": str(fake)},
        training__frameworks=["pytorch"],
        training__gpus=[1],
        training__inputs=["synthetic"],
        training__repeats=1,
        training__retries=0,
        training__long_test__gpus=[],
        preflight__gate=False,
    )
    first = start(tmp_path, "training")
    deadline = time.time() + 600
    while not ran.exists() and first.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    try:
        assert ran.exists(), finish(first, 10)[1][-4000:]
        yield first, tmp_path, ran
    finally:
        release.touch()
        finish(first)


def test_a_second_run_past_snakemakes_lock_stops_naming_the_first(held):
    """--nolock takes the second past Snakemake's own lock, as a start at the same moment does: it
    stops before any job, naming the first's pid, host and start, and the training run ran once."""
    first, work, ran = held
    rc, out = finish(start(work, "training", "--nolock"))
    assert rc != 0, out[-4000:]
    said = f"another snakemake is running this workflow in {work}: pid {first.pid} on {socket.gethostname()}, started"
    assert said in out and "`snakemake --unlock`" in out, out[-4000:]
    assert ran.read_text() == "ran\n"


def test_a_second_run_that_meets_snakemakes_lock_is_told_who_holds_the_directory(held):
    first, work, ran = held
    rc, out = finish(start(work, "training"))
    assert rc != 0 and "Directory cannot be locked" in out, out[-4000:]
    assert f"this workflow is already running in this directory: pid {first.pid} on {socket.gethostname()}" in out
    assert ran.read_text() == "ran\n"


def test_a_dry_run_beside_a_running_workflow_is_not_stopped(held):
    _, work, ran = held
    rc, out = finish(start(work, "training", "-n"))
    assert rc == 0, out[-4000:]
    assert ran.read_text() == "ran\n"


def test_the_lock_goes_with_the_process_that_held_it(tmp_path):
    """Held by a process, then not, once it is killed (no run can leave it behind)."""
    code = (
        "import sys, time; from workflow_scripts.common import workflow_lock as w; "
        "print(w.take(sys.argv[1]), flush=True); time.sleep(600)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "None"
        from workflow_scripts.common import workflow_lock

        with pytest.raises(workflow_lock.Busy, match=f"pid {holder.pid} on "):
            workflow_lock.take(str(tmp_path))
    finally:
        holder.kill()
        holder.wait()
    probe = [
        sys.executable,
        "-c",
        "import sys; from workflow_scripts.common import workflow_lock as w; print(w.take(sys.argv[1]))",
    ]
    assert subprocess.run([*probe, str(tmp_path)], cwd=REPO, capture_output=True, text=True).stdout.strip() == "None"
    assert os.path.exists(tmp_path / ".snakemake" / "dlscale.lock")
