"""A TERM to `snakemake --profile slurm` stops it (cluster/workflow_stop.py), on a cluster faked in
its commands (helpers/dry_run.py): where an sbatch has not returned (a controller that does not
accept jobs: sbatch retries) Snakemake's own TERM waited for it, saying "No active jobs" at each
status check, and where a job was queued it waited for that job to run. Now the sbatch is stopped,
the queued job cancelled (scancel), and the workflow ends."""

import json
import os
import signal
import subprocess
import time

import pytest
from helpers.dry_run import cluster
from helpers.workflow import REPO, SNAKEMAKE

from workflow_scripts.cluster import workflow_stop

pytestmark = pytest.mark.stage

# sbatch as a controller that never accepts the job would have it (it retries until stopped), or as
# one that queues it; sacct says the queued job is pending; scancel is recorded.
SBATCH = {
    "hangs": 'trap \'echo sbatch stopped >> "$LOG"; exit 143\' TERM\necho sbatch waits >> "$LOG"\n'
    "while :; do sleep 1; done\n",
    "queues": 'echo sbatch queued >> "$LOG"\necho 4242\n',
}


def fake_slurm(work, env, sbatch):
    tools = work / "bin"
    log = work / "slurm_calls.log"
    head = f'#!/bin/sh\nLOG="{log}"\n'
    (tools / "sbatch").write_text(head + "cat > /dev/null\n" + SBATCH[sbatch])
    (tools / "sacct").write_text(
        head + 'case "$*" in *JobIdRaw*) echo sacct asked >> "$LOG"; printf "4242|PENDING\\n" ;; esac\n'
    )
    (tools / "scancel").write_text(head + 'echo "scancel $*" >> "$LOG"\n')
    for tool in ("scontrol", "sacctmgr", "sshare"):
        (tools / tool).write_text("#!/bin/sh\nexit 0\n")
    for tool in tools.iterdir():
        tool.chmod(0o755)
    return log


def wait_for(path, text, proc):
    """Until the fake commands' log holds text (or snakemake has ended: the test then says why)."""
    while proc.poll() is None and text not in (path.read_text() if path.exists() else ""):
        time.sleep(1)
    assert proc.poll() is None, proc.communicate()[0][-3000:]


@pytest.mark.parametrize("sbatch, done", [("hangs", "sbatch stopped"), ("queues", "scancel 4242")])
def test_a_term_stops_the_workflow_and_what_it_submitted(tmp_path, sbatch, done):
    env = cluster(tmp_path, "h100")
    log = fake_slurm(tmp_path, env, sbatch)
    configs = [str(REPO / "config.yaml"), str(REPO / "presets" / "study.yaml"), str(tmp_path / "cluster.yaml")]
    proc = subprocess.Popen(
        [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path)]
        + ["--profile", str(REPO / "profiles" / "slurm"), "--slurm-init-seconds-before-status-checks", "1"]
        + ["data", "--configfile", *configs],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        # the job in flight, or known to Snakemake: it asked for its state
        wait_for(log, "sbatch waits" if sbatch == "hangs" else "sacct asked", proc)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0 and "dlscale: TERM: stopping now" in out, out[-3000:]
    assert done in log.read_text(), (log.read_text(), out[-3000:])


def test_the_sbatch_calls_in_flight_are_found_below_the_workflow(tmp_path):
    """Through a shell, as the executor starts them; another process named so elsewhere is not one."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "sbatch").write_text("#!/bin/sh\nsleep 60\n")
    (tools / "sbatch").chmod(0o755)
    env = dict(os.environ, PATH=f"{tools}{os.pathsep}{os.environ['PATH']}")
    ours = subprocess.Popen(["sh", "-c", "sbatch; true"], env=env, start_new_session=True)
    theirs = subprocess.Popen(["sbatch"], env=env, start_new_session=True)
    try:
        found = []
        for _ in range(600):  # until the shell has started it
            found = workflow_stop.submissions(ours.pid)
            if found:
                break
            time.sleep(0.1)
        assert len(found) == 1 and theirs.pid not in found, json.dumps(found)
    finally:
        for p in (ours, theirs):
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
