"""The measuring jobs' shared sequence (train/measuring_job.py): its steps run in order, and a stop
from outside is recorded the same way by a training job and by a preflight check. Neither job
starts a process here: the steps that would are replaced, and TERM is neither held nor watched."""

import json

import pytest

from workflow_scripts.preflight import preflight_job
from workflow_scripts.train import job_stop, measuring_job, training_job

pytestmark = pytest.mark.unit

CANCELLED = job_stop.Stopped("cancelled", "SLURM: JobState=CANCELLED Reason=None")


@pytest.fixture
def quiet(monkeypatch):
    """No signal handling, no output redirected, no process stopped; what the sequence did, in order."""
    done = []
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setattr(job_stop, "hold_term", lambda: done.append("hold TERM"))
    monkeypatch.setattr(job_stop, "watch", lambda *a, **k: done.append("watch"))
    monkeypatch.setattr(job_stop, "stop_children", lambda: done.append("stop children"))
    monkeypatch.setattr(measuring_job, "into_log", lambda path: path.write_text(""))

    def say(self, line):  # into the log, as the job's redirected output would go
        with open(self.log, "a") as f:
            f.write(line + "\n")

    monkeypatch.setattr(measuring_job.MeasuringJob, "say", say)
    return done


class Steps(measuring_job.MeasuringJob):
    """Each step says its name; clear_cache's and measure's exit statuses as given."""

    def __init__(self, log, done, cleared=0, measured=0):
        super().__init__(training_job.arg_parser().parse_args(["--run-dir=r", "--results-dir=.", "--log=l"]), log)
        self.done, self.cleared, self.measured = done, cleared, measured

    def open_log(self):
        super().open_log()
        self.done.append("open the log")

    def prepare(self):
        self.done.append("prepare")

    def scope_cache(self):
        super().scope_cache()
        self.done.append(f"scope the cache: {self.scope}")

    def clear_cache(self):
        self.done.append("clear the cache")
        return self.cleared

    def measure(self):
        self.done.append("measure")
        if self.measured == "stopped":
            raise CANCELLED
        return self.measured

    def record(self, rc, stopped):
        self.done.append(f"record {rc} {stopped and stopped.cause}")
        return rc


def test_the_steps_run_in_order(tmp_path, quiet):
    assert Steps(tmp_path / "log", quiet, measured=3).run() == 3
    assert quiet == [
        "hold TERM",
        "open the log",
        "watch",
        "prepare",
        "scope the cache: node",
        "clear the cache",
        "measure",
        "record 3 None",
    ]
    assert (tmp_path / "log").read_text().startswith("job on ")


def test_a_failed_clearing_measures_nothing_and_a_stop_is_recorded(tmp_path, quiet):
    assert Steps(tmp_path / "a", quiet, cleared=1).run() == 1
    assert "measure" not in quiet and quiet[-1] == "record 1 None"
    quiet.clear()
    assert Steps(tmp_path / "b", quiet, measured="stopped").run() == measuring_job.STOPPED_RC
    assert quiet[-3:] == ["measure", "stop children", f"record {measuring_job.STOPPED_RC} cancelled"]
    assert "job: stopped (cancelled): SLURM: JobState=CANCELLED" in (tmp_path / "b").read_text()


def raising(exc):
    """A measuring step stopped from outside while it ran."""

    def step():
        raise exc

    return step


def stopped_training(tmp_path):
    a = training_job.arg_parser().parse_args(
        [f"--run-dir={tmp_path / 'results' / 'runs' / 'x'}", f"--results-dir={tmp_path / 'results'}"]
        + [f"--log={tmp_path / 'logs' / 'train.log'}", "--retries=1", "--", "workflow_scripts.train.pytorch_ddp"]
    )
    job = training_job.TrainingJob(a, a.trainer[1:])
    job.clear_cache = lambda: 0
    job.measure = raising(CANCELLED)
    return job


def stopped_preflight(tmp_path):
    a = preflight_job.arg_parser().parse_args(
        [f"--out={tmp_path / 'preflight' / '2gpu.json'}", "--system=s", "--framework=pytorch", "--python=python"]
        + [f"--log={tmp_path / 'logs' / 'preflight.log'}", "--", "--nproc-per-node=2"]
    )
    job = preflight_job.PreflightJob(a)
    job.clear_cache = lambda: 0
    job.measure = raising(CANCELLED)
    return job


def test_a_stop_is_recorded_alike_by_training_and_preflight(tmp_path, quiet):
    """Both say the stop in their log and leave the same record beside it; neither keeps a result
    Snakemake would take for a finished job (the run is attempted again, the check run again)."""
    training, preflight = stopped_training(tmp_path), stopped_preflight(tmp_path)
    assert training.run() == preflight.run() == measuring_job.STOPPED_RC
    records = [json.loads(job.log.with_name(job.log.name + ".json").read_text()) for job in (training, preflight)]
    for r in records:
        assert r["status"] == "failed" and r["stopped"] == "cancelled" and not r["permanent"], r
        assert r["reason"] == "job: stopped (cancelled): SLURM: JobState=CANCELLED Reason=None", r
    assert {k: v for k, v in records[0].items() if k != "log"} == {k: v for k, v in records[1].items() if k != "log"}
    assert not (training.run_dir / "summary.json").exists()
    result = json.loads(preflight.out.read_text())
    assert result["status"] == "failed" and result["rows"][-1]["check"] == "job"


def test_a_time_limit_is_the_result_of_both(tmp_path, quiet):
    """A stop another job would meet again is recorded as the run's result and the check's, and
    neither job is run again (exit status 0)."""
    training, preflight = stopped_training(tmp_path), stopped_preflight(tmp_path)
    limit = job_stop.Stopped("time limit", "stopped by the pipeline before SLURM's time limit")
    for job in (training, preflight):
        job.measure = raising(limit)
    assert training.run() == preflight.run() == 0
    summary = json.loads((training.run_dir / "summary.json").read_text())
    assert summary["permanent"] and summary["stopped"] == "time limit"
    row = json.loads(preflight.out.read_text())["rows"][-1]
    assert row["status"] == "failed" and "stopped (time limit)" in row["cause"]
