"""Preflight's input check (docs/preflight.md#the-input-check): an input's capacity against the step
rate the sweep asks for, judged the same way in preflight's data table and in the training tables.
A doctored capacity marks a point input-bound, and the caveat, with the run's own input wait,
reaches training_throughput.md, scaling.md and conclusions.md; a capacity that fits marks nothing.
Built from small made-up records: no pipeline run, no process (the tables' mains run in-process)."""

import json
import shutil
import sys

import pandas as pd
import pytest
import yaml
from helpers import CONFIG, REPO, validated, with_overrides

from workflow_scripts.common import input_bound
from workflow_scripts.preflight import input_rows
from workflow_scripts.results import conclusions, guards, input_marks, training_tables
from workflow_scripts.results import runs as run_records

pytestmark = pytest.mark.unit

SAMPLE = REPO / "tests" / "data" / "conclusions_tables"
DEVICE = "NVIDIA H100 80GB HBM3"


def entry(images_per_s, threads_at, threads=None, cpu=True):
    """One input path's record of a data check: measured at the largest ranks a node."""
    most = max(threads_at, key=int)
    return {
        "images_per_s": images_per_s,
        "threads": threads or threads_at[most],
        "threads_at": threads_at,
        "cpu_decoding": cpu,
        "cpus": 8,
        "host": "n1",
        "error": "",
    }


# --- the comparison itself ---


def test_a_node_is_input_bound_below_the_demand_and_its_margin():
    # 4 ranks a node: 4,000 images/s of capacity against 3,600 needed fits with 10% to spare ...
    fits = input_bound.judge(1000.0, 900.0, 4, 0.1)
    assert fits == {"capacity": 4000.0, "demand": 3600.0, "bound": False, "shortfall": pytest.approx(-1 / 9)}
    assert (
        input_bound.sentence(fits, 4, 0.1) == "4,000 images/s a node of 3,600 needed at 4 GPU(s) a node: 11% to spare"
    )
    # ... but not within a margin of 20%, and a capacity below the demand is short by its share of it
    assert input_bound.judge(1000.0, 900.0, 4, 0.2)["bound"]
    assert "less than preflight.input_margin (20%)" in input_bound.sentence(
        input_bound.judge(1000.0, 900.0, 4, 0.2), 4, 0.2
    )
    short = input_bound.judge(600.0, 1000.0, 4, 0.1)
    assert short["bound"] and input_bound.sentence(short, 4, 0.1).endswith("needed at 4 GPU(s) a node: short by 40%")


def test_a_ranks_capacity_follows_its_decode_threads_where_it_decodes_on_the_cpu():
    """Measured at 4 ranks a node on 2 threads each: one rank alone on the node gets 14 and decodes
    seven times as much; a path that decodes on the GPU does not."""
    cpu = entry(500.0, {"1": 14, "4": 2})
    assert input_bound.capacity_per_rank(cpu, 4) == (500.0, False)
    assert input_bound.capacity_per_rank(cpu, 1) == (3500.0, True)
    assert input_bound.capacity_per_rank(entry(500.0, {"1": 14, "4": 2}, cpu=False), 1) == (500.0, False)
    assert input_bound.cpu_decoding("pytorch", "dali", "mixed", "gpu") is False
    assert input_bound.cpu_decoding("pytorch", "dali", "cpu", "gpu") and input_bound.cpu_decoding(
        "mxnet", "cpu", "", "gpu"
    )


def test_the_demand_is_the_synthetic_run_at_the_count_then_the_nearest_then_preflights_timing():
    runs = [
        {"gpus": 1, "images_per_s": 1000.0, "run": "h100/pytorch_fp32_1gpu_synthetic"},
        {"gpus": 4, "images_per_s": 3600.0, "run": "h100/pytorch_fp32_4gpu_synthetic"},
    ]
    timed = {"gpus": 8, "images_per_s": 6400.0, "steps": 5}
    assert input_bound.per_gpu_demand(runs, timed, 4) == (900.0, "the synthetic run h100/pytorch_fp32_4gpu_synthetic")
    per_gpu, source = input_bound.per_gpu_demand(runs, timed, 8)
    assert per_gpu == 900.0 and source.endswith("at 4 GPU(s), the nearest count run")
    assert input_bound.per_gpu_demand([], timed, 2) == (800.0, "preflight's 5 synthetic steps at 8 GPU(s) on one node")
    assert input_bound.per_gpu_demand([], None, 2)[0] is None
    # the repeats of a count: their mean
    two = input_bound.by_count([{**runs[0], "images_per_s": 900.0}, runs[0]])
    assert two == [{"gpus": 1, "images_per_s": 950.0, "run": "h100/pytorch_fp32_1gpu_synthetic (mean of 2 runs)"}]


# --- what the data check measures (plan/input_plan.py) ---


def test_the_check_measures_the_sweeps_real_inputs_at_its_ranks_a_node():
    from workflow_scripts.plan.commands import TrainerCommands
    from workflow_scripts.plan.input_plan import InputPlan
    from workflow_scripts.plan.sweep import Sweep

    gpu = {"gpus_per_node": 4, "max_nodes": 2, "gpu_request": "gpus-per-node", "cpus_per_task": 8}
    config = validated(
        with_overrides(
            CONFIG,
            systems={"g": gpu},
            training__systems=["g"],
            training__precisions=["fp32", "fp16"],
            training__gpus=[1, 4, 8],
            training__inputs=["auto", "synthetic", "cpu"],
        )
    )
    plan = Sweep(config, embedded=False)
    inputs = InputPlan(
        config, plan, TrainerCommands(config, plan, {("g", f): "envs_gpu" for f in CONFIG["training"]["frameworks"]})
    )
    torch = inputs.settings("g", "pytorch", plan.sweep())
    assert torch["inputs"] == ["dali", "cpu"] and torch["device"] == "gpu" and torch["ranks_per_node"] == [1, 4]
    assert torch["counts"][-1] == {"gpus": 8, "nodes": 2, "ranks_per_node": 4}
    assert torch["batch"] == 2 * CONFIG["training"]["batch_per_gpu"]["pytorch"]  # fp16's, the largest
    assert {(r["precision"], r["gpus"]) for r in torch["synthetic_runs"] if r["repeat"] == 1} == {
        (p, g) for p in ("fp32", "fp16") for g in (1, 4, 8)
    }
    words = torch["timing"]["fp16"]
    assert words[words.index("--data-source") + 1] == "synthetic" and words[words.index("--steps") + 1] == str(
        CONFIG["preflight"]["demand_steps"]
    )
    assert torch["trainer"] == "pytorch_ddp" and "--dali-decoder" in words
    tf = inputs.settings("g", "tensorflow", plan.sweep())
    assert tf["inputs"] == ["cpu"] and tf["loader_workers"] == 0 and "--dali-decoder" not in tf["timing"]["fp32"]
    none = validated(with_overrides(config, training__inputs=["synthetic"], preflight__demand_steps=0))
    plan = Sweep(none, embedded=False)
    assert InputPlan(none, plan, TrainerCommands(none, plan, {})).settings("g", "mxnet", plan.sweep()) is None


# --- preflight's data table ---


def data_check(images_per_s, threads_at, timed=4000.0, inputs=("cpu",), framework="tensorflow", synthetic=()):
    """A data check's result (results/preflight/<system>/<framework>/<N>gpu.data.json) with its input
    check: 1 and 4 GPUs of a 4-GPU node, fp32, preflight's timing at 4 GPUs."""
    return {
        "system": "h100",
        "framework": framework,
        "nodes": 1,
        "tasks": 4,
        "log": "x.log",
        "rows": [],
        "input_capacity": {
            "settings": {
                "inputs": list(inputs),
                "precisions": ["fp32"],
                "counts": [
                    {"gpus": 1, "nodes": 1, "ranks_per_node": 1},
                    {"gpus": 4, "nodes": 1, "ranks_per_node": 4},
                ],
                "ranks_per_node": [1, 4],
                "batch": 128,
                "image_size": 224,
                "seconds": 5,
                "device": "gpu",
                "demand_steps": 5,
            },
            "inputs": {i: entry(images_per_s, threads_at) for i in inputs},
            "demand": {
                "fp32": {
                    "synthetic": list(synthetic),
                    "timed": {"gpus": 4, "nodes": 1, "images_per_s": timed, "steps": 5} if timed else None,
                    "error": "",
                }
            },
        },
    }


def test_preflight_marks_the_gpu_counts_its_input_cannot_feed():
    """600 images/s a rank on 6 threads at 4 ranks a node, 28 for a rank alone: 1,000 needed a GPU.
    At 4 GPUs a node the input is short by 40%; a rank alone decodes enough."""
    [r] = input_rows.rows(data_check(600.0, {"1": 28, "4": 6}), 0.1)
    assert r["check"] == "input_capacity" and r["status"] == "warning", r
    assert r["figure"].startswith("cpu fp32: 2,400 images/s a node of 4,000 needed at 4 GPU(s) a node: short by 40%")
    assert "preflight's 5 synthetic steps at 4 GPU(s)" in r["figure"]
    assert r["cause"].startswith("input-bound at 4 GPU(s): the runs there will measure the input")
    assert "systems.h100.cpus_per_task" in r["fix"] and "training.decode_threads" in r["fix"]
    assert "conversion.shorter_cap" in r["fix"] and "preflight.input_bound_expected" in r["fix"]
    # with the same threads at every count (SLURM binds each rank to its CPUs) both counts are short
    [r] = input_rows.rows(data_check(600.0, {"1": 6, "4": 6}), 0.1)
    assert r["cause"].startswith("input-bound at 1, 4 GPU(s)")


def test_preflight_marks_nothing_where_the_input_keeps_up():
    [r] = input_rows.rows(data_check(1300.0, {"1": 28, "4": 6}), 0.1)
    assert r["status"] == "ok" and r["cause"] == "" and "to spare" in r["figure"], r
    assert input_bound.sentence(input_bound.judge(900.0, 100.0, 2, 0.1), 2, 0.1).endswith(": 9.0x what it needs")


def test_preflight_says_when_it_has_no_step_rate_or_no_capacity():
    [r] = input_rows.rows(data_check(600.0, {"1": 28, "4": 6}, timed=None), 0.1)
    assert r["status"] == "not applicable" and r["cause"].startswith("demand unknown: no synthetic step rate")
    assert "preflight.demand_steps" in r["fix"]
    res = data_check(600.0, {"1": 28, "4": 6})
    res["input_capacity"]["inputs"]["cpu"] = {"images_per_s": None, "error": "StageError: no DALI"}
    [r] = input_rows.rows(res, 0.1)
    assert r["status"] == "warning" and "could not be measured (StageError: no DALI)" in r["cause"]
    assert input_rows.rows({**res, "input_capacity": None}, 0.1) == []


def test_an_input_asked_to_be_measured_input_bound_is_said_so_not_warned_of():
    [r] = input_rows.rows(data_check(600.0, {"1": 28, "4": 6}, framework="pytorch", inputs=["cpu"]), 0.1, ["cpu"])
    assert r["status"] == "ok" and "asked for (preflight.input_bound_expected lists cpu)" in r["cause"], r


# --- the runs: the caveat, and the three tables it reaches ---


def run_dir(root, gpus, images_per_s, input_wait_s, data_source="real"):
    """A completed TensorFlow run of an H100 system, vouched for but for what the test doctors."""
    name = f"tensorflow_fp32_{gpus}gpu" + ("_synthetic" if data_source == "synthetic" else "")
    d = root / name
    d.mkdir(parents=True)
    summary = {
        "status": "ok",
        "device_type": "gpu",
        "framework": "tensorflow",
        "num_nodes": 1,
        "global_batch": 128 * gpus,
        "images_per_s": images_per_s,
        "step_images_per_s_cv": 0.01,
        "stable": True,
        "warmup_steps": 10,
        "timed_steps": 100,
        "seconds_timed": 10.0,
        "input_wait_s_timed": input_wait_s,
        "train_images": 1281167,
        "args": {"batch_per_gpu": 128, "mode": "steps", "epochs": 1, "data_source": data_source, "image_size": 224},
        "gradients": {"bytes": 102228128, "elements": 25557032, "element_bytes": 4, "dtype": "float32"},
        "launch": {"job_id": ""},
        "versions": {"tensorflow": "2.16.1"},
        "isolation": {"isolated": True, "why": "nothing else on n1"},
        "math": {"ran_as": "float32"},
        "provenance": {
            "settings_hash": "feedbeef0001",
            "code": {"commit": "0123456789abcdef"},
            "nodes": {"n1": {"gpus": [{"name": DEVICE}] * gpus, "driver": "550.54.15", "cuda_driver": "12.4"}},
        },
    }
    (d / "summary.json").write_text(json.dumps(summary))
    return {
        "system": "h100",
        "framework": "tensorflow",
        "precision": "fp32",
        "gpus": gpus,
        "input": "synthetic" if data_source == "synthetic" else "cpu",
        "nodes": 1,
        "gpu_request": "gpus-per-node",
        "run_dir": str(d),
    }


def tables_from(tmp_path, monkeypatch, capacity, expected=()):
    """The training tables and the verdict table of a sweep of TensorFlow at 1 and 4 GPUs (the
    scale-out whitepaper's 97% within a node: ours 98%), preflight's data check with `capacity`
    images/s a rank, beside the sample's other tables."""
    out = tmp_path / "results"
    shutil.copytree(SAMPLE, out)
    runs = tmp_path / "runs"
    points = [run_dir(runs, 1, 1000.0, 0.2), run_dir(runs, 4, 3920.0, 3.1)]
    check = tmp_path / "4gpu.data.json"
    check.write_text(json.dumps(data_check(capacity, {"1": 28, "4": 6})))
    argv = ["training_tables", "--points", json.dumps(points), "--preflight", str(check), "--input-margin", "0.1"]
    argv += ["--input-bound-expected", *expected] if expected else []
    monkeypatch.setattr(sys, "argv", [*argv, "--out-dir", str(out)])
    training_tables.main()
    monkeypatch.setattr(sys, "argv", ["conclusions", "--tables", str(out), "--out", str(out / "conclusions.csv")])
    conclusions.main()
    verdict = pd.read_csv(out / "conclusions.csv").set_index("id").loc["short_test_efficiency_node"]
    return out, verdict


def test_a_doctored_capacity_marks_the_run_and_its_caveat_reaches_the_three_tables(tmp_path, monkeypatch):
    out, verdict = tables_from(tmp_path, monkeypatch, 600.0)
    runs = pd.read_csv(out / "training_throughput.csv").set_index("gpus")
    assert runs.loc[4, "input_bound"] == "yes" and runs.loc[1, "input_bound"] == "no"
    assert runs.loc[4, "input_wait_share"] == pytest.approx(0.31)
    says = "input-bound: h100/tensorflow_fp32_4gpu: its input cannot feed its GPUs: 2,400 images/s a node of 4,000"
    assert says in runs.loc[4, "caveats"] and "it waited for its input 31% of its timed steps" in runs.loc[4, "caveats"]
    assert "input-bound" not in str(runs.loc[1, "caveats"])
    for table in ("training_throughput.md", "scaling.md", "conclusions.md"):
        assert says in (out / table).read_text(), table
    assert verdict.verdict == conclusions.NOT_DECIDED and says in verdict.why


def test_a_capacity_that_fits_marks_nothing_and_the_verdict_stands(tmp_path, monkeypatch):
    out, verdict = tables_from(tmp_path, monkeypatch, 2000.0)
    runs = pd.read_csv(out / "training_throughput.csv")
    assert set(runs.input_bound) == {"no"} and not runs.caveats.notna().any()
    for table in ("training_throughput.md", "scaling.md", "conclusions.md"):
        assert "input-bound:" not in (out / table).read_text(), table  # no caveat: the note counts 0
    assert "0 input-bound" in (out / "training_throughput.md").read_text()
    assert verdict.verdict == conclusions.HOLDS, verdict.why


def test_a_run_asked_to_be_input_bound_says_so_and_still_decides_no_scaling(tmp_path, monkeypatch):
    out, verdict = tables_from(tmp_path, monkeypatch, 600.0, expected=["cpu"])
    says = "input-bound (asked for: preflight.input_bound_expected): h100/tensorflow_fp32_4gpu: 2,400 images/s"
    assert says in (out / "scaling.md").read_text()
    assert verdict.verdict == conclusions.NOT_DECIDED and says in verdict.why


def test_the_sweeps_own_synthetic_run_is_the_demand_once_it_ran(tmp_path):
    """Preflight timed 4,000 images/s at 4 GPUs; the sweep's synthetic run at 4 GPUs did 2,000: at
    2,400 images/s a node the input keeps up with what the GPUs really ask for."""
    points = [run_dir(tmp_path, 4, 2100.0, 0.0), run_dir(tmp_path, 4, 2000.0, 0.0, data_source="synthetic")]
    runs = run_records.load(points)
    records = {("h100", "tensorflow"): data_check(600.0, {"1": 28, "4": 6})["input_capacity"]}
    marked = input_marks.mark(runs, records, 0.1).set_index("input")
    assert marked.loc["cpu", "input_bound"] == "no" and marked.loc["cpu", "input_demand"] == pytest.approx(2000.0)
    assert "h100/tensorflow_fp32_4gpu_synthetic" in marked.loc["cpu", "input_check"]
    assert pd.isna(marked.loc["synthetic", "input_bound"])  # a synthetic run has no input to judge


def test_a_telemetry_finding_still_reads_an_input_bound_run():
    """The storage and network findings measure the input's traffic: an input-bound run is their
    figure, not a caveat of it."""
    from workflow_scripts.results import measure_nodes

    cell = guards.join(["input-bound: h100/x: short", "not isolated: h100/x: busy"])
    assert measure_nodes._telemetry_caveats(pd.DataFrame({"caveats": [cell]})) == ["not isolated: h100/x: busy"]


def test_the_uncached_case_decides_caffe2s_stability_on_input_bound_runs(tmp_path):
    """The study's uncached case: PyTorch across nodes, its input unable to keep up. Its step CV is
    the finding's figure, and so is its input: the caveat decides nothing there."""
    out = tmp_path / "results"
    shutil.copytree(SAMPLE, out)
    df = pd.read_csv(out / "training_throughput.csv")
    run = {"system": "local", "framework": "pytorch", "precision": "fp32", "input": "cpu", "nodes": 2, "gpus": 8}
    caveat = "input-bound: local/pytorch_fp32_8gpu: its input cannot feed its GPUs: short by 40%"
    row = {**run, "status": "ok", "device": "8x Tesla V100-SXM2-16GB", "step_cv": 0.10, "caveats": caveat}
    pd.concat([df, pd.DataFrame([row])], ignore_index=True).to_csv(out / "training_throughput.csv", index=False)
    spec = yaml.safe_load(conclusions.FINDINGS.read_text())
    v = conclusions.conclusions(conclusions.load_tables(out), spec).set_index("id").loc["caffe2_unstable_across_nodes"]
    assert v.verdict == conclusions.HOLDS, v.why


def test_a_ranks_decode_threads_follow_its_share_of_the_node(tmp_path):
    """Where the ranks share the node's CPUs (the local launcher) a rank's share shrinks as the
    ranks grow; where SLURM binds each task to its cpus_per_task, it is those CPUs at any count."""
    from workflow_scripts.cluster.rank_env import Launch
    from workflow_scripts.preflight import input_task

    settings = {"device": "gpu", "decode_threads": 0, "loader_workers": 0, "ranks_per_node": [1, 2, 8]}
    # every CPU a core of its own: a sysfs with no topology (tmp_path)
    shared = {"allowed": set(range(32)), "node_cpus": 32, "env": {}, "root": tmp_path}
    at = input_task.threads_at("mxnet", "cpu", settings, Launch(source="env"), **shared)
    # MXNet's 16 a GPU, fewer where the rank has fewer CPUs, and at most 32 / 2 - 1 of them started
    assert at == {"1": 15, "2": 15, "8": 4}
    bound = {"allowed": set(range(8)), "node_cpus": 64, "env": {"SLURM_CPUS_PER_TASK": "8"}, "root": tmp_path}
    # bound to 8 CPUs: the rule asks 8, MXNet's parser starts 8 / 2 - 1
    assert input_task.threads_at("mxnet", "cpu", settings, Launch(source="slurm"), **bound) == {"1": 3, "2": 3, "8": 3}
    assert (
        input_task.threads_at("mxnet", "cpu", {**settings, "decode_threads": 3}, Launch(source="env"), **shared)["8"]
        == 3
    )
