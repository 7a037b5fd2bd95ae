"""The scale-out whitepaper's long test on the embedded default (training.long_test), checked from
the runs' own outputs: top-1/top-5 recounted from each rank's saved predictions, every val image
scored exactly once, per-epoch times that add up to the summary's, the run stopping at its target,
the table and figure, and reruns after an edit."""

import csv
import json
import statistics
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from helpers import (
    CONFIG,
    LONG_TEST_GPUS,
    PIPELINE_CONFIG,
    REPO,
    embedded_lmdb,
    launched,
    pipeline_config,
    planned_jobs,
    snakemake,
    trainer_command,
    write_config,
)

from workflow_scripts.train import long_test

FRAMEWORKS = CONFIG["training"]["frameworks"]
LONG_TEST = CONFIG["training"]["long_test"]


def run_of(work, framework, gpus=LONG_TEST_GPUS[0]):
    return work / "results" / "runs" / "local" / "accuracy" / f"{framework}_fp32_{gpus}gpu"


def epochs_of(run):
    return [json.loads(line) for line in (run / "epochs.jsonl").read_text().splitlines()]


def summary_of(run):
    return json.loads((run / "summary.json").read_text())


def val_labels(work):
    """Record (position in the val split) -> label, from the index the three formats were made from."""
    with open(work / "data" / "index" / "val.tsv", newline="") as f:
        return [int(r["label"]) for r in csv.DictReader(f, delimiter="\t")]


def predictions(run, epoch, ranks):
    return {r: long_test.read_predictions(long_test.predictions_path(run, epoch, r)) for r in range(ranks)}


@pytest.mark.pipeline
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_accuracy_recounted_from_the_saved_predictions_equals_the_epoch_records(pipeline_run, framework):
    run = run_of(pipeline_run, framework)
    labels = val_labels(pipeline_run)
    evaluated = [r for r in epochs_of(run) if r["top1"] is not None]
    assert evaluated
    for rec in evaluated:
        scored = [p for ps in predictions(run, rec["epoch"], LONG_TEST_GPUS[0]).values() for p in ps]
        # Each prediction's label is the index's label of its record: the record numbers are right.
        assert all(labels[record] == label for record, label, _ in scored)
        assert all(len(top5) == 5 and len(set(top5)) == 5 for _, _, top5 in scored)
        n = len(scored)
        assert rec["val_images"] == n == len(labels)
        assert rec["top1"] == pytest.approx(100 * sum(top5[0] == label for _, label, top5 in scored) / n)
        assert rec["top5"] == pytest.approx(100 * sum(label in top5 for _, label, top5 in scored) / n)


@pytest.mark.pipeline
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_each_rank_scored_a_disjoint_share_and_together_every_val_image_once(pipeline_run, framework):
    run = run_of(pipeline_run, framework)
    n_val = len(val_labels(pipeline_run))
    for rec in epochs_of(run):
        if rec["top1"] is None:
            continue
        shares = {r: [p[0] for p in ps] for r, ps in predictions(run, rec["epoch"], 2).items()}
        assert all(len(s) == len(set(s)) > 0 for s in shares.values()), "a rank scored an image twice"
        assert not set(shares[0]) & set(shares[1])
        assert sorted(shares[0] + shares[1]) == list(range(n_val))


@pytest.mark.pipeline
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_epoch_times_add_up_to_the_summary(pipeline_run, framework):
    run = run_of(pipeline_run, framework)
    recs, lt = epochs_of(run), summary_of(run)["long_test"]
    assert [r["epoch"] for r in recs] == list(range(1, lt["epochs_run"] + 1))
    assert lt["train_s"] == pytest.approx(sum(r["train_s"] for r in recs))
    assert lt["eval_s"] == pytest.approx(sum(r["eval_s"] for r in recs))
    assert lt["elapsed_s"] == pytest.approx(lt["train_s"] + lt["eval_s"])
    elapsed = 0.0
    for r in recs:
        elapsed += r["train_s"] + r["eval_s"]
        assert r["elapsed_s"] == pytest.approx(elapsed)
        global_batch = CONFIG["training"]["batch_per_gpu"][framework] * LONG_TEST_GPUS[0]
        assert r["train_images_per_s"] == pytest.approx(r["steps"] * global_batch / r["train_s"])
    assert "no warm-up is excluded" in lt["timing"]
    # Every step is in the run's time: none is set aside as warm-up.
    steps = [json.loads(x) for x in (run / "steps.jsonl").read_text().splitlines()]
    assert len(steps) == lt["epochs_run"] * lt["steps_per_epoch"] and {s["phase"] for s in steps} == {"timed"}


@pytest.mark.pipeline
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_default_reaches_its_target_and_stops_there(pipeline_run, framework):
    run = run_of(pipeline_run, framework)
    recs, lt = epochs_of(run), summary_of(run)["long_test"]
    target = LONG_TEST["target_top1"]
    first = next(r for r in recs if r["top1"] is not None and r["top1"] >= target)
    assert lt["reached"] is True and lt["target_top1"] == target
    assert lt["epoch_reached"] == first["epoch"] == recs[-1]["epoch"] == lt["epochs_run"]
    assert lt["time_to_target_s"] == first["elapsed_s"] == lt["elapsed_s"]
    assert lt["final_top1"] == first["top1"] and lt["result"].startswith(f"reached top-1 >= {target:g}% at epoch")
    assert target > 2 * 100 / CONFIG["dataset"]["embedded"]["classes"], "the target must be well above chance"
    # The step schedule: lr scaled to the global batch, divided by 10 from each milestone on.
    lr = CONFIG["training"]["lr"] * CONFIG["training"]["batch_per_gpu"][framework] * 2 / 256
    for r in recs:
        assert r["lr"] == pytest.approx(lr * LONG_TEST["decay"] ** sum(r["epoch"] > m for m in LONG_TEST["milestones"]))
    # Both ranks stopped together, holding the same weights.
    digests = [json.loads((run / f"rank{r}.json").read_text())["weights_sha256"] for r in (0, 1)]
    assert digests[0] == digests[1] and set(digests[0]) == {"after_step_1", "final"}


@pytest.mark.pipeline
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_loss_falls(pipeline_run, framework):
    """Over the long test's first epoch, whose steps are the sweep runs' steps at the same learning
    rate (a sweep run's few steps leave the fall inside the batches' noise): the loss's least-squares
    line over every step falls."""
    run = run_of(pipeline_run, framework)
    steps = (run / "steps.jsonl").read_text().splitlines()[: epochs_of(run)[0]["steps"]]
    losses = [json.loads(line)["loss"] for line in steps]
    assert len(losses) >= 10 and statistics.linear_regression(range(len(losses)), losses).slope < 0, losses


@pytest.mark.stage
def test_a_low_target_stops_the_run_at_the_first_evaluation_that_reaches_it(tmp_path):
    """Evaluations after epochs 2 and 3 of at most 4 (eval_every 2, and the last); any trained
    network scores at least 1% here, so the run stops after epoch 2, both ranks together. The data:
    two classes of 8 train and 8 val images each (an epoch is two steps of 2 x 4 images). Half the val
    images are each class, so a network scores 0% only by naming the wrong class for every one of
    them (one that names a single class scores 50%)."""
    data = embedded_lmdb(tmp_path / "data", classes=2, train_per_class=8, val_per_class=8, seed=5)
    out = tmp_path / "run"
    trainer = trainer_command(
        data=data,
        batch_per_gpu=4,
        mode="accuracy",
        warmup_steps=None,
        steps=None,
        epochs=4,
        eval_every=2,
        milestones=[1],
        target_top1=1,
        out=out,
    )
    proc = subprocess.run(launched(trainer, 2), cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs, lt = epochs_of(out), summary_of(out)["long_test"]
    assert [(r["epoch"], r["top1"] is not None) for r in recs] == [(1, False), (2, True)]
    assert recs[1]["top1"] >= 1 and lt["reached"] is True and lt["epoch_reached"] == 2 and lt["stopped_early"]
    assert (lt["epochs_run"], lt["epochs_planned"]) == (2, 4) and lt["time_to_target_s"] == recs[1]["elapsed_s"]
    assert lt["result"].startswith("reached top-1 >= 1% at epoch 2")
    assert recs[0]["val_images"] == 0 and recs[0]["lr"] == pytest.approx(0.1 * 8 / 256)
    assert recs[1]["lr"] == pytest.approx(0.1 * 8 / 256 * 0.1)
    assert sorted(p.name for p in (out / "predictions").iterdir()) == [
        "epoch002.rank0.tsv.gz",
        "epoch002.rank1.tsv.gz",
    ]
    digests = [json.loads((out / f"rank{r}.json").read_text())["weights_sha256"]["final"] for r in (0, 1)]
    assert digests[0] == digests[1]


@pytest.mark.unit
def test_schedule_is_the_whitepapers_step_schedule():
    steps_per_epoch = 1281167 // 1024  # ILSVRC2012 at 8 x 128 images
    lr = long_test.Schedule(0.4, steps_per_epoch, 0, [10, 60], 0.1)
    assert [lr(e * steps_per_epoch) for e in (0, 9, 10, 59, 60, 89)] == pytest.approx(
        [0.4, 0.4, 0.04, 0.04, 0.004, 0.004]
    )
    assert lr(10 * steps_per_epoch - 1) == 0.4
    warm = long_test.Schedule(0.4, 10, 2, [10], 0.1)  # linear warm-up over 2 epochs = 20 steps
    assert [warm(s) for s in (0, 9, 19, 20, 99, 100)] == pytest.approx([0.02, 0.2, 0.4, 0.4, 0.4, 0.04])


@pytest.mark.unit
def test_val_shares_cover_every_record_once():
    for total, world in ((320, 2), (50000, 8), (7, 3), (2, 4)):
        shares = [long_test.val_share(total, r, world) for r in range(world)]
        assert sorted(i for s in shares for i in s) == list(range(total))


@pytest.mark.pipeline
def test_table_has_one_row_per_long_test_run_with_the_runs_numbers(pipeline_run):
    table = pd.read_csv(pipeline_run / "results" / "time_to_accuracy.csv", dtype={"git_commit": str})
    t = CONFIG["training"]
    assert len(table) == len(t["systems"]) * len(t["frameworks"]) * len(t["precisions"]) * len(LONG_TEST_GPUS)
    for row in table.itertuples():
        run = pipeline_run / row.run_dir
        assert Path(row.run_dir).parts[-2] == "accuracy" and row.status == "ok"
        s = summary_of(run)
        lt = s["long_test"]
        assert (row.gpus, row.nodes, row.epochs_run, row.epoch_reached) == (2, 1, lt["epochs_run"], lt["epoch_reached"])
        assert bool(row.reached) is True and row.target_top1 == LONG_TEST["target_top1"]
        for key in ("time_to_target_s", "final_top1", "final_top5", "train_s", "eval_s", "elapsed_s"):
            assert getattr(row, key) == pytest.approx(lt[key]), key
        assert row.train_images_per_s == pytest.approx(s["images_timed"] / lt["train_s"])
        assert row.jobs == 1 and pd.isna(row.resumed_at) and lt["resumed"] is False
        assert str(row.milestones) == " ".join(f"{m:g}" for m in LONG_TEST["milestones"]) and row.lr == pytest.approx(
            0.0125
        )
        assert row.git_commit and s["provenance"]["code"]["commit"].startswith(row.git_commit)
        assert row.device.startswith("CPU: ")
    md = (pipeline_run / "results" / "time_to_accuracy.md").read_text()
    assert md.startswith("# Time to accuracy") and "nothing excluded" in md


@pytest.mark.pipeline
def test_figure_and_html_report(pipeline_run):
    png = (pipeline_run / "results" / "figures" / "fig35_time_to_accuracy.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    out = pipeline_run / "report-accuracy.html"
    snakemake(pipeline_run, "--report", str(out))
    html = out.read_text(errors="replace")
    assert "time_to_accuracy" in html and "fig35_time_to_accuracy" in html and "time-to-train" in html


@pytest.mark.pipeline
def test_editing_a_long_test_key_reruns_only_the_long_test(pipeline_run):
    # The verdict table reads time_to_accuracy.csv (its long-test row): it follows the long test.
    long_test_jobs = {
        "long_test_run": len(FRAMEWORKS),
        "time_to_accuracy": 1,
        "time_to_accuracy_figure": 1,
        "conclusions": 1,
    }
    try:
        pipeline_config(pipeline_run, training__long_test__target_top1=LONG_TEST["target_top1"] + 1)
        assert planned_jobs(pipeline_run) == long_test_jobs
        pipeline_config(pipeline_run, training__long_test__milestones=[1] if LONG_TEST["milestones"] != [1] else [2])
        assert planned_jobs(pipeline_run) == long_test_jobs
        # and the sweep's own keys rerun only the sweep
        pipeline_config(pipeline_run, training__steps=PIPELINE_CONFIG["training"]["steps"] + 1)
        assert not set(planned_jobs(pipeline_run)) & (set(long_test_jobs) - {"conclusions"})  # it reads both
    finally:
        pipeline_config(pipeline_run)
    assert planned_jobs(pipeline_run) == {}


@pytest.mark.stage
@pytest.mark.parametrize(
    "key, value, why",
    [
        ("training__long_test__milestones", [3, 2], "config training.long_test.milestones = [3, 2]"),
        ("training__long_test__milestones", [LONG_TEST["epochs"]], "before the last epoch"),
        ("training__long_test__gpus", [3], "config training.long_test.gpus = 3 cannot be placed on system 'local'"),
        ("training__long_test__target_top1", 120, "target_top1"),
    ],
)
def test_a_long_test_that_cannot_run_stops_at_parse_time_naming_the_key(tmp_path, key, value, why):
    write_config(tmp_path, **{key: value})
    proc = snakemake(tmp_path, "-n", check=False)
    assert proc.returncode != 0 and why in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-2000:]


@pytest.mark.stage
def test_a_real_dataset_plans_no_long_test_unless_asked(tmp_path):
    """training.long_test.gpus auto: the embedded default's 3-epoch long test, but on a real dataset
    (dataset.root) none, since there it is hours of a cluster; asked for, it is planned."""
    from workflow_scripts.data import embedded

    root = tmp_path / "imagenet"
    embedded.make(root, classes=2, train_per_class=1, val_per_class=1, quirks=False)
    write_config(tmp_path, dataset__root=str(root))
    assert "long_test_run" not in planned_jobs(tmp_path)
    write_config(tmp_path, dataset__root=str(root), training__long_test__gpus=[2])
    assert planned_jobs(tmp_path)["long_test_run"] == len(CONFIG["training"]["frameworks"])
    write_config(tmp_path)  # the embedded default keeps its own
    assert planned_jobs(tmp_path)["long_test_run"] == len(CONFIG["training"]["frameworks"]) * len(LONG_TEST_GPUS)
