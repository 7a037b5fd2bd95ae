"""The long test across jobs (train/checkpoint.py): a run stopped after an epoch's checkpoint goes on
from the next epoch in the next attempt, with the same weights, and its time-to-accuracy clock
counts training and evaluation only. Then whether a long test can fit its jobs at all
(train/long_test_fit.py)."""

import json
import os
import signal
import subprocess
import time

import pytest
from helpers import CONFIG, REPO, TRAINERS, interpreter, run_stage, trainer_flags

from workflow_scripts.train import checkpoint, long_test_fit

FRAMEWORKS = CONFIG["training"]["frameworks"]
FORMAT = {"tensorflow": "tfrecord", "mxnet": "recordio", "pytorch": "lmdb"}
EPOCHS = 6


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Two classes of 16 train and 4 val images, in the three formats: an epoch is 4 steps of 2 x 4."""
    from workflow_scripts.data import embedded

    work = tmp_path_factory.mktemp("resume")
    embedded.make(work / "ILSVRC2012", classes=2, train_per_class=16, val_per_class=4, seed=3)
    run_stage("workflow", "workflow_scripts.data.index", "--root", work / "ILSVRC2012", "--out", work / "index")
    run_stage("tensorflow", "workflow_scripts.data.tfrecord", "--index", work / "index", "--out", work / "tfrecord")
    run_stage("mxnet", "workflow_scripts.data.recordio", "--index", work / "index", "--out", work / "recordio")
    run_stage("pytorch", "workflow_scripts.data.lmdb_caffe2", "--index", work / "index", "--out", work / "lmdb")
    return work


def job_command(tmp_path, data, framework, attempt):
    """train/training_job.py as the long-test rule runs it, 2 processes, no target: every epoch runs."""
    results = tmp_path / "results"
    return [
        interpreter("workflow"),
        "-m",
        "workflow_scripts.train.training_job",
        f"--run-dir={results / 'runs' / 'local' / 'accuracy' / f'{framework}_fp32_2gpu'}",
        f"--results-dir={results}",
        f"--log={tmp_path / 'logs' / 'run.log'}",
        f"--attempt={attempt}",
        "--retries=1",
        "--cache-clear=dataset",
        f"--data={data}",
        f"--python={interpreter(framework)}",
        "--nproc-per-node=2",
        *(["--horovod"] if framework != "pytorch" else []),
        "--",
        TRAINERS[framework],
        *trainer_flags(
            warmup_steps=None,
            steps=None,
            data=data,
            batch_per_gpu=4,
            mode="accuracy",
            epochs=EPOCHS,
            milestones=[3],
            checkpoint_dir=results / "checkpoints" / "local" / "accuracy" / f"{framework}_fp32_2gpu",
            max_jobs=3,
        ),
    ]


@pytest.mark.stage
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_long_test_stopped_after_an_epoch_resumes_at_the_next(tiny, tmp_path, framework):
    """TERM to the job once the first epoch's checkpoint exists: the attempt fails with its epochs
    saved; the next attempt loads them (the very weights saved: their digest), trains only the epochs
    after, and its summary and epoch records are one run's: every epoch once, the elapsed time the
    sum of the epochs' training and evaluation, resumed said, the checkpoint gone."""
    cmd = job_command(tmp_path, tiny / FORMAT[framework], framework, 1)
    ckpt = tmp_path / "results" / "checkpoints" / "local" / "accuracy" / f"{framework}_fp32_2gpu"
    run = tmp_path / "results" / "runs" / "local" / "accuracy" / f"{framework}_fp32_2gpu"
    job = subprocess.Popen(cmd, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    deadline = time.time() + 600
    while checkpoint.saved_epoch(ckpt) < 1 and job.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    job.send_signal(signal.SIGTERM)
    assert job.wait(timeout=120) != 0, (tmp_path / "logs" / "run.log.attempt1").read_text()[-3000:]
    saved = json.loads((ckpt / "state.json").read_text())
    k = saved["epoch"]
    assert 1 <= k < EPOCHS and [r["epoch"] for r in saved["records"]] == list(range(1, k + 1))

    second = subprocess.run(
        job_command(tmp_path, tiny / FORMAT[framework], framework, 2),
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        timeout=900,
    )
    log = (tmp_path / "logs" / "run.log.attempt2").read_text()
    assert second.returncode == 0, log[-3000:]
    assert f"long test: resumed from the checkpoint of epoch {k}" in log
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "ok", summary.get("reason")
    lt = summary["long_test"]
    recs = [json.loads(ln) for ln in (run / "epochs.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in recs] == list(range(1, EPOCHS + 1))
    assert recs[:k] == [{**r, "checkpoint_s": recs[i]["checkpoint_s"]} for i, r in enumerate(saved["records"])]
    assert lt["resumed"] is True and [j["first_epoch"] for j in lt["jobs"]] == [1, k + 1]
    assert f"resumed from a checkpoint at epoch {k + 1}" in lt["result"]
    assert lt["elapsed_s"] == pytest.approx(sum(r["train_s"] + r["eval_s"] for r in recs))
    assert "time between jobs" in lt["timing"]
    rank0 = json.loads((run / "rank0.json").read_text())["weights_sha256"]
    assert rank0["resumed"] == saved["weights_sha256"] and "after_step_1" not in rank0
    for epoch in range(1, EPOCHS + 1):
        assert all((run / "predictions" / f"epoch{epoch:03d}.rank{r}.tsv.gz").exists() for r in (0, 1)), epoch
    assert not ckpt.exists()


@pytest.mark.unit
def test_a_checkpoint_of_other_arguments_is_not_resumed(tmp_path):
    """A checkpoint left by a run of another learning rate starts the run from epoch 1, saying why."""
    said = []
    ident = {"lr": 0.1, "epochs": 3, "world_size": 2}
    (tmp_path / "epoch001").mkdir()
    (tmp_path / "state.json").write_text(
        json.dumps({"epoch": 1, "weights": "epoch001", "identity": {**ident, "lr": 0.2}, "records": [], "jobs": []})
    )
    assert checkpoint.Checkpoint(tmp_path, ident, said.append).load() is None
    assert "other arguments (lr)" in said[0]
    assert checkpoint.Checkpoint(tmp_path, {**ident, "lr": 0.2}, said.append).load()["epoch"] == 1


def progress_after(tmp_path, attempt, saved_before, saved_after, rc, stopped, retries=1, max_jobs=3):
    """JobProgress's judgement of one attempt that found `saved_before` and left `saved_after`."""
    argv = ["workflow_scripts.train.pytorch_ddp", f"--checkpoint-dir={tmp_path}", f"--max-jobs={max_jobs}"]

    def save(epoch):
        if epoch:
            (tmp_path / "state.json").write_text(json.dumps({"epoch": epoch}))

    save(saved_before)
    p = checkpoint.JobProgress(argv, attempt)
    save(saved_after)
    return p.judge(attempt, retries, rc, "time limit: ..." if stopped == "time limit" else None, stopped)


@pytest.mark.unit
def test_a_time_limit_after_a_saved_epoch_is_resumed_and_one_without_is_permanent(tmp_path):
    cause, last, line = progress_after(tmp_path, 1, 0, 2, 143, "time limit")
    assert cause is None and not last and "next job resumes" in line
    cause, last, _ = progress_after(tmp_path, 2, 2, 2, 143, "time limit")
    assert "no epoch of the long test finished" in cause and "training.long_test.time_min" in cause


@pytest.mark.unit
def test_the_jobs_run_out_at_max_jobs_and_idle_failures_at_retries(tmp_path):
    """Attempts 1-3 each save an epoch and hit the limit: the third is the last of max_jobs 3 plus
    retries 1 only if it saved nothing; attempt 4 (retries 1 + 3 jobs) is the last, recorded with why."""
    for attempt, (before, after) in enumerate([(0, 1), (1, 2), (2, 3)], start=1):
        cause, last, _ = progress_after(tmp_path, attempt, before, after, 143, "time limit")
        assert cause is None and not last, attempt
    cause, last, _ = progress_after(tmp_path, 4, 3, 4, 143, "time limit")
    assert last and "training.long_test.max_jobs" in cause and "saved epoch 4" in cause
    # a crash that saves nothing, twice (retries 1): the second is the last
    assert progress_after(tmp_path / "b", 1, 0, 0, 1, None)[1] is False
    assert progress_after(tmp_path / "b", 2, 0, 0, 1, None)[1] is True


POINT = {"system": "v100", "framework": "pytorch", "precision": "fp16", "gpus": 8}


@pytest.mark.unit
def test_a_long_test_that_cannot_fit_its_jobs_is_named_at_parse_time():
    """ILSVRC2012's 1,281,167 train images at a best measured 100 images/s per GPU on 8 GPUs: an
    epoch takes at least 26.7 min, so a 20-minute job saves none, and 90 epochs do not fit 12 jobs
    of 120 minutes (4 epochs each); they fit 30."""
    images = 1281167
    said = long_test_fit.problem(POINT, 90, images, 100.0, 20, 12, "training.long_test.time_min")
    assert said.startswith("config training.long_test.time_min = 20") and "cannot save a single epoch" in said
    said = long_test_fit.problem(POINT, 90, images, 100.0, 120, 12, "systems.v100.time_min")
    assert said.startswith("config training.long_test.max_jobs = 12") and "at most 4 epoch(s)" in said
    assert long_test_fit.problem(POINT, 90, images, 100.0, 120, 30, "systems.v100.time_min") is None
    assert long_test_fit.problem(POINT, 90, images, None, 20, 12, "systems.v100.time_min") is None  # nothing measured


@pytest.mark.unit
def test_the_bound_is_the_sweeps_best_real_data_rate_per_gpu(tmp_path):
    def run(name, **s):
        d = tmp_path / "v100" / name
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps(s))

    run("pytorch_fp16_1gpu", status="ok", images_per_s=900.0, world_size=1, args={"data_source": "real"})
    run("pytorch_fp16_8gpu", status="ok", images_per_s=6400.0, world_size=8, args={"data_source": "real"})
    run(
        "pytorch_fp16_4gpu_synthetic", status="ok", images_per_s=4000.0, world_size=4, args={"data_source": "synthetic"}
    )
    run("pytorch_fp16_2gpu", status="failed")
    run("pytorch_fp32_1gpu", status="ok", images_per_s=2000.0, world_size=1, args={"data_source": "real"})
    assert long_test_fit.best_rate_per_gpu(tmp_path, "v100", "pytorch", "fp16") == 900.0
    assert long_test_fit.best_rate_per_gpu(tmp_path, "v100", "mxnet", "fp16") is None
