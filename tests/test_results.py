"""The study's tables and figures: their numbers checked against the per-run logs they came from,
failed runs listed with why, mixed settings flagged, the HTML report, and reruns after an edit."""

import json
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from helpers import (
    CONFIG,
    LONG_TEST_GPUS,
    PIPELINE_CONFIG,
    REPO,
    interpreter,
    pipeline_config,
    planned_jobs,
    snakemake,
    write_config,
)

pytestmark = pytest.mark.pipeline

TABLES = [
    "training_throughput",
    "scaling",
    "fp16_vs_fp32",
    "system_comparison",
    "storage_throughput",
    "network_throughput",
    "interconnect",
    "scaling_prediction",
    "study_on_paper",
]
FIGURES = [
    "fig2_scaling",
    "fig4_6_system_comparison",
    "fig5_fp16_vs_fp32",
    "fig7_storage",
    "fig8_network",
    "interconnect_busbw",
    "scaling_prediction",
]


def steps_rate(run_dir):
    """images/s recomputed from the run's own per-step log (timed steps only)."""
    steps = [json.loads(x) for x in (Path(run_dir) / "steps.jsonl").read_text().splitlines()]
    timed = [s for s in steps if s["phase"] == "timed"]
    return sum(s["images"] for s in timed) / sum(s["wall_s"] for s in timed)


def table(work, name):
    # a commit prefix of digits only would read as a number
    return pd.read_csv(work / "results" / f"{name}.csv", dtype={"git_commit": str})


def test_every_table_and_figure_of_the_default(pipeline_run):
    for name in TABLES:
        assert (pipeline_run / "results" / f"{name}.csv").is_file()
        assert (pipeline_run / "results" / f"{name}.md").read_text().startswith("# ")
    for name in FIGURES:
        png = (pipeline_run / "results" / "figures" / f"{name}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_throughput_rows_are_the_runs_own_figures(pipeline_run):
    runs = table(pipeline_run, "training_throughput")
    t = PIPELINE_CONFIG["training"]
    assert len(runs) == len(t["frameworks"]) * len(t["precisions"]) * len(t["gpus"]) * len(t["systems"])
    for r in runs.itertuples():
        assert r.status == "ok"
        run_dir = pipeline_run / r.run_dir
        assert r.images_per_s == pytest.approx(steps_rate(run_dir), rel=1e-9)
        summary = json.loads((run_dir / "summary.json").read_text())
        assert r.step_cv == pytest.approx(summary["step_images_per_s_cv"])
        assert (r.timed_steps, r.warmup_steps) == (t["steps"], t["warmup_steps"])
        assert r.batch_per_gpu == t["batch_per_gpu"][r.framework] and r.global_batch == r.batch_per_gpu * r.gpus
        # Provenance: where and from what each figure came.
        prov = summary["provenance"]
        assert r.node_names == " ".join(sorted(prov["nodes"])) and r.settings_hash == prov["settings_hash"]
        assert r.git_commit and prov["code"]["commit"].startswith(r.git_commit)
        assert r.device.startswith("CPU: ")


def test_speedup_and_efficiency_are_ratios_of_measured_throughputs(pipeline_run):
    scaling = table(pipeline_run, "scaling")
    for r in scaling.itertuples():
        base = steps_rate(
            pipeline_run / "results" / "runs" / r.system / f"{r.framework}_{r.precision}_{r.baseline_gpus}gpu"
        )
        mine = steps_rate(pipeline_run / "results" / "runs" / r.system / f"{r.framework}_{r.precision}_{r.gpus}gpu")
        assert r.speedup == pytest.approx(mine / base)
        assert r.efficiency == pytest.approx(mine / (base * r.gpus / r.baseline_gpus))
        assert r.scope == "intra-node"
    assert set(scaling.gpus) == set(CONFIG["training"]["gpus"]) and (scaling.baseline_gpus == 1).all()


def test_storage_and_network_totals_integrate_the_telemetry(pipeline_run):
    for name, metrics in (("storage_throughput", {"read_MBps"}), ("network_throughput", {"send_MBps", "recv_MBps"})):
        t = table(pipeline_run, name)
        assert set(t.metric) == metrics
        for r in t.sample(n=min(4, len(t)), random_state=0).itertuples():
            run = pipeline_run / "results" / "runs" / r.system / f"{r.framework}_{r.precision}_{r.gpus}gpu"
            csv = pd.read_csv(run / f"telemetry.{r.node}.csv")
            # over the run's timed steps (its isolation's window), each sample covering the interval
            # before it, on the node's own clock
            window = json.loads((run / "summary.json").read_text())["isolation"]["window"]
            meta = json.loads((run / f"telemetry.{r.node}.json").read_text())
            wall = csv.time_s + meta["wall_origin"]
            inside = (wall > window["start"]) & (wall - meta["interval"] < window["end"])
            s = csv[(csv.metric == r.metric) & (csv.device == r.device) & inside].sort_values("time_s")
            dt = s.time_s.diff().fillna(meta["interval"])
            assert r.total_MB == pytest.approx(float((s.value * dt).sum()))
            assert r.peak_MBps == pytest.approx(s.value.max()) and r.samples == len(s)


def test_default_has_no_fp16_or_second_system_and_says_so(pipeline_run):
    assert "add both to training.precisions" in (pipeline_run / "results" / "fp16_vs_fp32.md").read_text()
    assert "list two in training.systems" in (pipeline_run / "results" / "system_comparison.md").read_text()


def test_html_report_holds_every_table_and_figure(pipeline_run):
    out = pipeline_run / "report.html"
    snakemake(pipeline_run, "--report", str(out))
    html = out.read_text(errors="replace")
    for name in TABLES + FIGURES:
        assert name in html
    assert "warm-up steps are excluded" in html


def test_editing_one_frameworks_batch_reruns_its_runs_and_the_aggregation(pipeline_run):
    try:
        pipeline_config(pipeline_run, training__batch_per_gpu__mxnet=8)
        jobs = planned_jobs(pipeline_run)
        # and its long-test run (same batch per GPU) and the table and figure built from it
        assert {k: v for k, v in jobs.items() if k.startswith(("train", "training", "long_test", "time_to"))} == {
            "train": len(CONFIG["training"]["gpus"]),
            "training_tables": 1,
            "training_figures": 1,
            "long_test_run": len(LONG_TEST_GPUS),
            "time_to_accuracy": 1,
            "time_to_accuracy_figure": 1,
        }
        assert "framework=tensorflow" not in snakemake(pipeline_run, "-n").stdout
    finally:
        pipeline_config(pipeline_run)
    assert planned_jobs(pipeline_run) == {}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Two systems x FP32/FP16, PyTorch on synthetic data (no dataset): every comparison table
    has rows, and the training figures are drawn from them. Only these are asked for: the later
    stages (INT8, the long test) run on the embedded default in pipeline_run."""
    work = tmp_path_factory.mktemp("sweep")
    write_config(
        work,
        systems={"a": {"gpus_per_node": 1}, "b": {"gpus_per_node": 1}},
        training__systems=["a", "b"],
        training__frameworks=["pytorch"],
        training__precisions=["fp32", "fp16"],
        training__gpus=[1],
        training__inputs=["synthetic"],
        training__image_size=32,
        training__warmup_steps=1,
        training__steps=2,
        # FP16 on a CPU is bfloat16 autocast, many times slower than FP32 here: the smallest batch that
        # trains (BatchNorm needs two values a channel), not doubled for FP16
        training__batch_per_gpu={"tensorflow": 2, "mxnet": 2, "pytorch": 2},
        training__fp16_batch_factor=1,
        training__long_test__gpus=[],
        preflight__gate=False,  # the tables are what is tested here, not preflight (test_preflight.py)
    )
    snakemake(
        work,
        "results/fp16_vs_fp32.csv",
        "results/system_comparison.csv",
        "results/figures/fig5_fp16_vs_fp32.png",
        "results/figures/fig4_6_system_comparison.png",
    )
    return work


def test_fp16_gain_and_system_comparison_are_ratios_of_the_runs(sweep):
    runs = sweep / "results" / "runs"
    for r in table(sweep, "fp16_vs_fp32").itertuples():
        fp32, fp16 = (steps_rate(runs / r.system / f"pytorch_{p}_1gpu_synthetic") for p in ("fp32", "fp16"))
        assert (r.fp32_images_per_s, r.fp16_images_per_s) == (pytest.approx(fp32), pytest.approx(fp16))
        assert r.fp16_gain_percent == pytest.approx((fp16 / fp32 - 1) * 100)
    comp = table(sweep, "system_comparison")
    assert sorted(comp.precision) == ["fp16", "fp32"] and set(zip(comp.system_a, comp.system_b)) == {("a", "b")}
    for r in comp.itertuples():
        a, b = (steps_rate(runs / s / f"pytorch_{r.precision}_1gpu_synthetic") for s in ("a", "b"))
        assert r.a_over_b_percent == pytest.approx((a / b - 1) * 100)


def test_table_of_runs_with_different_settings_says_so(pipeline_run, tmp_path):
    """A sweep run and the long test's run of PyTorch side by side: their modes differ."""
    runs = pipeline_run / "results" / "runs" / "local"
    points = [
        {"system": "local", "framework": "pytorch", "precision": "fp32", "gpus": g, "input": "auto", "repeat": 1}
        | {"nodes": 1, "run_dir": str(d)}
        for g, d in ((1, runs / "pytorch_fp32_1gpu"), (2, runs / "accuracy" / "pytorch_fp32_2gpu"))
    ]
    proc = subprocess.run(
        [
            interpreter("workflow"),
            "-m",
            "workflow_scripts.results.training_tables",
            "--points",
            json.dumps(points),
            "--out-dir",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    note = (tmp_path / "training_throughput.md").read_text()
    assert "runs were made with different settings" in note and 'mode ("accuracy", "steps")' in note, note


def test_failed_run_is_listed_with_why(tmp_path):
    # preflight would stop it before training (its fp16 kernel fails on the CPU): this is the table's case
    write_config(
        tmp_path,
        training__frameworks=["mxnet"],
        training__precisions=["fp16"],
        training__gpus=[1],
        training__inputs=["synthetic"],
        training__retries=0,
        inference__models={"resnet50": "torchvision"},
        preflight__gate=False,
    )
    snakemake(tmp_path, "results/training_throughput.csv")
    (row,) = table(tmp_path, "training_throughput").itertuples()
    assert (row.framework, row.precision, row.status) == ("mxnet", "fp16", "failed")
    assert "mxnet fp16 needs a GPU" in row.why and "mxnet_fp16_1gpu_synthetic.log.attempt1" in row.why
    assert "failed: " in (tmp_path / "results" / "training_throughput.md").read_text()


def test_input_axis_puts_each_path_beside_the_same_points_synthetic_run(tmp_path):
    """training.inputs [auto, dali, synthetic] for PyTorch on the embedded default: auto (the CPU
    path on a CPU) keeps the plain run directory, the others get their own, and input_paths
    compares each real-data run with the synthetic run of its point."""
    write_config(
        tmp_path,
        training__frameworks=["pytorch"],
        training__gpus=[1],
        training__image_size=32,
        training__inputs=["auto", "dali", "synthetic"],
        training__warmup_steps=1,
        training__steps=3,
        training__batch_per_gpu={"tensorflow": 4, "mxnet": 4, "pytorch": 4},
        inference__models={"resnet50": "torchvision"},
        preflight__gate=False,
    )
    snakemake(tmp_path, "results/input_paths.csv", "results/figures/fig_input_paths.png")
    runs = tmp_path / "results" / "runs" / "local"
    assert sorted(p.name for p in runs.iterdir()) == [
        "pytorch_fp32_1gpu",
        "pytorch_fp32_1gpu_dali",
        "pytorch_fp32_1gpu_synthetic",
    ]
    used = {
        d: json.loads((runs / d / "summary.json").read_text())["input"]
        for d in ("pytorch_fp32_1gpu", "pytorch_fp32_1gpu_dali")
    }
    assert used == {"pytorch_fp32_1gpu": "cpu", "pytorch_fp32_1gpu_dali": "dali"}
    t = table(tmp_path, "input_paths").set_index("input")
    assert sorted(t.index) == ["cpu", "dali", "synthetic"]
    synthetic = steps_rate(runs / "pytorch_fp32_1gpu_synthetic")
    for inp, d in (
        ("cpu", "pytorch_fp32_1gpu"),
        ("dali", "pytorch_fp32_1gpu_dali"),
        ("synthetic", "pytorch_fp32_1gpu_synthetic"),
    ):
        assert t.loc[inp, "images_per_s"] == pytest.approx(steps_rate(runs / d))
        assert t.loc[inp, "of_synthetic_percent"] == pytest.approx(steps_rate(runs / d) / synthetic * 100)
    png = (tmp_path / "results" / "figures" / "fig_input_paths.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    # TensorFlow and MXNet have no dali path: the point is left out, not failed.
    write_config(
        tmp_path,
        training__frameworks=["pytorch", "mxnet"],
        training__gpus=[1],
        training__inputs=["dali"],
        inference__models={"resnet50": "torchvision"},
    )
    planned = snakemake(tmp_path, "results/input_paths.csv", "-n").stdout.split("\n\n")
    assert not [j for j in planned if re.search(r"^(local)?rule train\b", j, re.M) and "framework=mxnet" in j]
