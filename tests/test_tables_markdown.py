"""The markdown copy of a results table is for a person: only the columns its table declares, and
what the other columns hold (provenance, settings) stated once in a footnote under it. The CSV
keeps every column, as other code and tests read it. Built from small inputs, no pipeline run."""

import json

import pandas as pd
import pytest
from helpers import run_stage

from workflow_scripts.common.output import write_table
from workflow_scripts.interconnect import interconnect_table as interconnect_tables
from workflow_scripts.results import time_to_accuracy, training_tables


def header(md, after=""):
    """The cells of the first markdown table's header line that follows the line starting with `after`."""
    lines = md.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith(after)) if after else 0
    line = next(x for x in lines[start:] if x.startswith("|"))
    return [c.strip() for c in line.strip("|").split("|")]


def footnote(md):
    lines = md.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("In `"))
    return "\n".join(lines[start:])


@pytest.mark.unit
def test_markdown_has_the_declared_columns_and_states_the_rest_once(tmp_path):
    df = pd.DataFrame(
        {
            "system": ["a", "a", "b"],
            "gpus": [1, 2, 1],
            "images_per_s": [100.5, 190.25, 98.0],
            "driver": ["550.54.15"] * 3,
            "git_commit": ["0123456789ab"] * 3,
            "run_dir": ["runs/a/1", "runs/a/2", "runs/b/1"],
            "slurm_job": ["", "", ""],
            "node_names": ["n1", None, "n1"],
        }
    )
    write_table(df, tmp_path / "t.csv", "T", "how", columns=["system", "gpus", "images_per_s"])
    md = (tmp_path / "t.md").read_text()
    assert header(md) == ["system", "gpus", "images_per_s"]
    assert "550.54.15" not in md.split("In `")[0]  # the table itself has no provenance
    note = footnote(md)
    assert "`driver` 550.54.15" in note and "`git_commit` 0123456789ab" in note
    assert "`node_names` n1 (empty in 1 of 3 rows)" in note
    assert "different between rows, see `t.csv`: `run_dir` (3 values)" in note
    assert "empty in every row: `slurm_job`" in note
    assert (tmp_path / "t.csv").read_text() == df.to_csv(index=False)


@pytest.mark.unit
def test_an_undeclared_column_is_named(tmp_path):
    df = pd.DataFrame({"system": ["a"], "gpus": [1]})
    with pytest.raises(ValueError, match=r"t\.csv: the markdown columns \['images_per_s'\]"):
        write_table(df, tmp_path / "t.csv", "T", "how", columns=["system", "images_per_s"])


def run_dir(root, framework, gpus, images_per_s, **more):
    """A run directory holding what results/runs.py reads of a finished run's summary.json (and
    `more` of its keys)."""
    d = root / f"{framework}_fp32_{gpus}gpu"
    d.mkdir(parents=True)
    summary = {
        "status": "ok",
        "device_type": "gpu",
        "framework": framework,
        "num_nodes": 1,
        "global_batch": 32 * gpus,
        "images_per_s": images_per_s,
        "step_images_per_s_cv": 0.01,
        "stable": True,
        "warmup_steps": 2,
        "timed_steps": 20,
        "args": {"batch_per_gpu": 32, "mode": "steps", "epochs": 1, "data_source": "real", "image_size": 224},
        "gradients": {"bytes": 102228128, "elements": 25557032, "element_bytes": 4, "dtype": "float32"},
        "launch": {"job_id": "4242"},
        "versions": {"torch": "2.5.1"},
        "provenance": {
            "settings_hash": "feedbeef0001",
            "code": {"commit": "0123456789abcdef"},
            "nodes": {
                "gpu01": {
                    "gpus": [{"name": "Tesla V100-SXM2-16GB"}] * gpus,
                    "driver": "550.54.15",
                    "cuda_driver": "12.4",
                }
            },
        },
    }
    (d / "summary.json").write_text(json.dumps({**summary, **more}))
    point = {"system": "dgx", "framework": framework, "precision": "fp32", "gpus": gpus, "input": "auto", "repeat": 1}
    return {**point, "nodes": 1, "run_dir": str(d)}


@pytest.mark.stage
def test_training_tables_show_the_readers_columns_with_provenance_below(tmp_path):
    points = [run_dir(tmp_path / "runs", "pytorch", 1, 350.0), run_dir(tmp_path / "runs", "pytorch", 2, 680.0)]
    out = tmp_path / "results"
    run_stage("workflow", "workflow_scripts.results.training_tables", "--points", json.dumps(points), "--out-dir", out)
    md = (out / "training_throughput.md").read_text()
    assert header(md) == training_tables.THROUGHPUT_SHOWN
    note = footnote(md)
    for shared in (
        "`driver` 550.54.15",
        "`cuda_driver` 12.4",
        "`node_names` gpu01",
        "`slurm_job` 4242",
        "`framework_version` 2.5.1",
        "`settings_hash` feedbeef0001",
        "`git_commit` 0123456789ab",
    ):
        assert shared in note, (shared, note)
    assert (
        "see `training_throughput.csv`: " in note and "`run_dir` (2 values)" in note and "`device` (2 values)" in note
    )
    csv = pd.read_csv(out / "training_throughput.csv")
    assert list(csv.columns) == training_tables.RUN_COLUMNS and (csv.driver == "550.54.15").all()
    scaling = (out / "scaling.md").read_text()
    assert header(scaling) == training_tables.SCALING_SHOWN and "`baseline_gpus` 1" in footnote(scaling)
    assert list(pd.read_csv(out / "scaling.csv").columns) == training_tables.SCALING_COLUMNS


@pytest.mark.stage
def test_time_to_accuracy_shows_the_readers_columns(tmp_path):
    points = [
        {
            "system": "dgx",
            "framework": "pytorch",
            "precision": "fp32",
            "gpus": 2,
            "nodes": 1,
            "run_dir": str(tmp_path / "missing"),
        }
    ]
    run_stage(
        "workflow",
        "workflow_scripts.results.time_to_accuracy",
        "--points",
        json.dumps(points),
        "--out",
        tmp_path / "tta.csv",
    )
    md = (tmp_path / "tta.md").read_text()
    assert header(md) == time_to_accuracy.SHOWN and "`run_dir` " + str(tmp_path / "missing") in footnote(md)
    assert list(pd.read_csv(tmp_path / "tta.csv").columns) == time_to_accuracy.COLUMNS


@pytest.mark.stage
def test_interconnect_shows_the_readers_columns(tmp_path):
    raw = {
        "source": "torch.distributed",
        "world_size": 2,
        "num_nodes": 1,
        "backend": "nccl",
        "device": "2x NVIDIA H100",
        "iterations": 5,
        "warmup": 1,
        "rank_hosts": ["gpu01", "gpu01"],
        "results": [
            {
                "collective": "all_reduce",
                "bytes": b,
                "median_s": 1e-5 * b,
                "min_s": 1e-5 * b,
                "max_s": 2e-5 * b,
                "algbw_GBps": 1e-4,
                "busbw_GBps": 1e-4,
            }
            for b in (8, 16)
        ],
    }
    (tmp_path / "raw.json").write_text(json.dumps(raw))
    points = [{"system": "dgx", "gpus": 2, "torch": str(tmp_path / "raw.json"), "nccl_tests": ""}]
    run_stage(
        "workflow",
        "workflow_scripts.interconnect.interconnect_table",
        "--points",
        json.dumps(points),
        "--out",
        tmp_path / "ic.csv",
    )
    md = (tmp_path / "ic.md").read_text()
    assert header(md) == interconnect_tables.SHOWN
    assert "`rank_hosts` gpu01 gpu01" in footnote(md) and "`device` 2x NVIDIA H100" in footnote(md)
    assert list(pd.read_csv(tmp_path / "ic.csv").columns) == interconnect_tables.COLUMNS


@pytest.mark.stage
def test_a_trainers_own_figure_becomes_a_column_of_the_runs_with_nothing_else_changed(tmp_path):
    """An adapter's figures() (train/loop.py) reaches training_throughput.csv as a column of its own,
    after the runs' columns, empty for a run without it; a figure named as one of the runs' own
    columns is refused, naming the run and the adapter method."""
    runs = tmp_path / "runs"
    points = [
        run_dir(runs, "pytorch", 1, 350.0, figures={"max_memory_allocated_gb": 3.25}),
        run_dir(runs, "mxnet", 1, 300.0, figures={}),
    ]
    out = tmp_path / "results"
    run_stage("workflow", "workflow_scripts.results.training_tables", "--points", json.dumps(points), "--out-dir", out)
    csv = pd.read_csv(out / "training_throughput.csv")
    assert list(csv.columns) == training_tables.RUN_COLUMNS + ["max_memory_allocated_gb"]
    memory = csv.set_index("framework")["max_memory_allocated_gb"]
    assert memory["pytorch"] == 3.25 and pd.isna(memory["mxnet"])
    clash = [run_dir(tmp_path / "clash", "pytorch", 1, 350.0, figures={"images_per_s": 1.0})]
    proc = run_stage(
        "workflow",
        "workflow_scripts.results.training_tables",
        "--points",
        json.dumps(clash),
        "--out-dir",
        tmp_path / "clash_out",
        check=False,
    )
    assert proc.returncode != 0 and "figures images_per_s are named as the runs' own columns" in proc.stderr
