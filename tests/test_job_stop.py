"""A training job stopped from outside (train/job_stop.py): its cause in SLURM's own words, the
time limit seen coming from the job's EndTime, and a TERM that stops the ranks and leaves a record
of why. The same on the tests' SLURM cluster: tests/test_slurm.py."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time

import psutil
import pytest
from helpers import REPO, TRAINERS

from workflow_scripts.train import job_stop

SCONTROL = (
    "JobId=4242 JobName=rule_train UserId=u(1) JobState={state} Reason={reason} Dependency=(null) "
    "RunTime=00:00:47 TimeLimit={limit} StartTime=2026-11-26T07:00:00 EndTime={end} Partition=gpu"
)


@pytest.mark.unit
@pytest.mark.parametrize(
    "line, cause",
    [
        ("slurmstepd: error: *** JOB 4242 ON n1 CANCELLED AT 2026-11-26T07:01:00 DUE TO TIME LIMIT ***", "time limit"),
        (
            "slurmstepd: error: *** STEP 4242.1 ON n2 CANCELLED AT 2026-11-26T07:01:00 DUE TO NODE FAILURE ***",
            "node failure",
        ),
        ("srun: error: *** JOB 4242 ON n1 CANCELLED AT 2026-11-26T07:01:00 ***", "cancelled"),
    ],
)
def test_the_cause_is_slurms_own_line(line, cause):
    found, why = job_stop.cause_of(f"0: step 12\n{line}\n1: bye\n", job=None)
    assert found == cause and line.split("*** ", 1)[1].split(" ***")[0] in why


@pytest.mark.unit
def test_the_steps_end_the_job_itself_caused_is_not_taken_for_slurms_cause():
    """Once the job stops its srun step (launcher.stop_step), srun reports slurmstepd's "STEP ...
    CANCELLED" line for it: that line says the job's own stop, so a TERM's cause is read elsewhere;
    a JOB line or a DUE TO after it is still SLURM's word."""
    own = (
        "0: step 12\nlaunch: stopping srun (pid 4321) and its step\nsrun: forcing job termination\n"
        "0: slurmstepd-n1: error: *** STEP 4242.1 ON n1 CANCELLED AT 2026-11-26T07:01:00 ***\n"
        "srun: error: n1: task 0: Killed\n"
    )
    assert job_stop.cause_of(own, job=None)[0] == "stopped"
    job = own + "slurmstepd: error: *** JOB 4242 ON n1 CANCELLED AT 2026-11-26T07:01:01 ***\n"
    assert job_stop.cause_of(job, job=None)[0] == "cancelled"
    limit = own.replace("07:01:00 ***", "07:01:00 DUE TO TIME LIMIT ***")
    assert job_stop.cause_of(limit, job=None)[0] == "time limit"
    before = "0: slurmstepd-n1: error: *** STEP 4242.1 ON n1 CANCELLED AT 2026-11-26T07:00:59 ***\n" + own
    assert job_stop.cause_of(before, job=None)[0] == "cancelled"  # SLURM cancelled the step first


@pytest.mark.unit
def test_without_a_line_the_cause_is_the_jobs_state_then_unknown():
    text = SCONTROL.format(state="NODE_FAIL", reason="NodeDown", limit="01:00:00", end="2026-11-26T08:00:00")
    assert job_stop.cause_of("no slurm words here", job="4242", text=text) == (
        "node failure",
        "SLURM: JobState=NODE_FAIL Reason=NodeDown",
    )
    assert job_stop.cause_of("", job=None)[0] == "stopped"


@pytest.mark.unit
def test_the_deadline_is_a_margin_before_the_end():
    text = SCONTROL.format(state="RUNNING", reason="None", limit="2:00:00", end="2026-11-26T09:00:00")
    stop_at, end_s, limit_s = job_stop.deadline("4242", text)
    assert limit_s == 7200 and end_s - stop_at == 300  # a tenth of 2 h, at most 5 minutes
    short = SCONTROL.format(state="RUNNING", reason="None", limit="00:01:00", end="2026-11-26T07:01:00")
    assert job_stop.deadline("4242", short)[1] - job_stop.deadline("4242", short)[0] == 15
    assert job_stop.deadline("4242", SCONTROL.format(state="R", reason="x", limit="UNLIMITED", end="Unknown")) is None
    assert job_stop._limit_s("1-02:03:04") == ((24 + 2) * 60 + 3) * 60 + 4


@pytest.mark.unit
def test_a_run_sharing_its_job_stops_at_the_end_of_its_own_share():
    """A job of a point's 3 repeats has 3 x 60 min: the first run stops a margin before its own 60
    min, not the job's 180; the last run's share ends with the job, whose EndTime then decides."""
    text = SCONTROL.format(state="RUNNING", reason="None", limit="3:00:00", end="2026-11-26T10:00:00")
    limit = job_stop.deadline("4242", text)
    end = limit[1]
    first = job_stop.own_deadline(limit, 3600, started=end - 3 * 3600 + 20)
    assert first[3] and first[1] == end - 2 * 3600 + 20 and first[1] - first[0] == 300 and first[2] == 3600
    last = job_stop.own_deadline(limit, 3600, started=end - 3600 + 60)  # started late: the job's end first
    assert not last[3] and last[:3] == limit
    assert job_stop.own_deadline(limit, 0, started=0)[:3] == limit  # no share: the job's own limit


def _cmdline(proc):
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:  # gone, or a zombie the job has not reaped yet
        return ""


def start_job(tmp_path, python, **env):
    """A training job of one rank whose interpreter is `python` (words), under tmp_path, with `env`
    added: (the process, its run directory, its first attempt's log)."""
    run, log = tmp_path / "results" / "runs" / "x" / "pytorch_fp32_1gpu", tmp_path / "logs" / "x.log"
    job = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "workflow_scripts.train.training_job",
            f"--run-dir={run}",
            f"--results-dir={tmp_path / 'results'}",
            f"--log={log}",
            "--retries=1",
            "--cache-clear-command=true",
            f"--python={python}",
            "--nproc-per-node=1",
            "--",
            TRAINERS["pytorch"],
        ],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO), **env),
    )
    return job, run, log.with_name(log.name + ".attempt1")


@pytest.mark.stage
def test_a_term_stops_the_ranks_and_leaves_the_cause(tmp_path):
    """TERM to a training job whose rank sleeps (a fake trainer): the rank is stopped, the attempt's
    log and a record beside it say why, and with retries left the job fails (to be run again)."""
    job, run, attempt = start_job(tmp_path, shlex.join([sys.executable, "-c", "import time; time.sleep(600)"]))
    deadline = time.time() + 120
    ranks = []
    while time.time() < deadline and not ranks:
        ranks = [p for p in psutil.Process(job.pid).children(recursive=True) if "time.sleep(600)" in _cmdline(p)]
        time.sleep(0.2)
    assert ranks, "the fake rank never started"
    job.send_signal(signal.SIGTERM)
    assert job.wait(timeout=60) != 0
    assert not ranks[0].is_running() or ranks[0].status() == psutil.STATUS_ZOMBIE
    assert "job: stopped (stopped): SIGTERM from outside the job" in attempt.read_text()
    record = json.loads(attempt.with_name(attempt.name + ".json").read_text())
    assert record["status"] == "failed" and record["stopped"] == "stopped" and not record["permanent"]
    assert not (run / "summary.json").exists()  # another attempt will run


FAKE_SCONTROL = """#!/bin/sh
# The first question waits (a busy slurmctld); the job is cancelled meanwhile.
if [ ! -e {asked} ]; then : > {asked}; exec sleep 120; fi
echo "JobId=4242 JobState=CANCELLED Reason=None OverSubscribe=NO TimeLimit=UNLIMITED EndTime=Unknown"
"""


@pytest.mark.stage
def test_a_term_while_the_job_still_asks_slurm_about_itself_is_recorded(tmp_path):
    """scancel before the ranks start, while the job waits for scontrol (its time limit, whether it
    holds its nodes alone): the job records the cancellation instead of dying by the TERM's default."""
    bin_dir, asked = tmp_path / "bin", tmp_path / "asked"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(FAKE_SCONTROL.format(asked=shlex.quote(str(asked))))
    (bin_dir / "scontrol").chmod(0o755)
    job, _, attempt = start_job(
        tmp_path, shlex.join([sys.executable]), PATH=f"{bin_dir}:{os.environ['PATH']}", SLURM_JOB_ID="4242"
    )
    deadline = time.time() + 120
    while time.time() < deadline and not asked.exists():
        time.sleep(0.1)
    assert asked.exists(), "the job never asked scontrol"
    job.send_signal(signal.SIGTERM)
    assert job.wait(timeout=60) not in (0, -signal.SIGTERM)
    record = json.loads(attempt.with_name(attempt.name + ".json").read_text())
    assert record["stopped"] == "cancelled" and "JobState=CANCELLED" in record["reason"], record
