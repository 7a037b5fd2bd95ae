"""The input check (docs/preflight.md#the-input-check): a path's images/s on real data against the
same trainer's on synthetic data, judged the same way in preflight's data table and in the training
tables. Before the sweep the check's two runs decide (at other ranks a node estimated by the decode
threads a rank gets); after it a run's own images/s against the sweep's synthetic runs of its point
win over the prediction, either way, and the prediction stands where the point has none. Built
from small made-up records: no pipeline run, no process (the tables' mains run in-process)."""

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
TOLERANCE = 0.03


def real(images_per_s, gpus=4, threads=6, threads_at=None, cpu=True):
    """One path's record of an input check's run on real data (preflight_job.real_figures, with
    input_task's threads): at `gpus` ranks on one node."""
    return {
        "images_per_s": images_per_s,
        "gpus": gpus,
        "nodes": 1,
        "ranks_per_node": gpus,
        "steps": 30,
        "device": DEVICE,
        "execution_mode": "",
        "error": "",
        "input_wait_share": 0.02,
        "threads": threads,
        "threads_at": {"1": 28, "4": 6} if threads_at is None else threads_at,
        "cpu_decoding": cpu,
    }


def synthetic_run(images_per_s, gpus=4):
    return {"images_per_s": images_per_s, "gpus": gpus, "nodes": 1, "ranks_per_node": gpus, "steps": 30, "error": ""}


# --- the comparison itself ---


def test_a_node_is_input_bound_below_the_synthetic_rate_less_the_tolerance():
    # 4 ranks a node: 3,960 images/s on real data against 4,000 on synthetic is within 3% ...
    fits = input_bound.judge(990.0, 1000.0, 4, TOLERANCE)
    assert not fits["bound"] and (fits["capacity"], fits["demand"]) == (3960.0, 4000.0)
    assert fits["ratio"] == pytest.approx(0.99)
    assert input_bound.sentence(fits, 4, TOLERANCE) == (
        "3,960 images/s a node on real data against 4,000 on synthetic at 4 GPU(s) a node, 99.0% of synthetic: "
        "keeps up (within preflight.input_tolerance 3%)"
    )
    # ... not within 1%, and 96% is short by 4% of 3%'s
    assert input_bound.judge(990.0, 1000.0, 4, 0.005)["bound"]
    short = input_bound.judge(960.0, 1000.0, 4, TOLERANCE)
    assert short["bound"] and input_bound.sentence(short, 4, TOLERANCE).endswith(
        "96.0% of synthetic: input-bound, short by 4.0%"
    )
    assert input_bound.sentence(input_bound.judge(1010.0, 1000.0, 1, TOLERANCE), 1, TOLERANCE).endswith(
        "101.0% of synthetic: keeps up"
    )


def test_a_ranks_rate_at_another_count_follows_its_decode_threads_where_it_decodes_on_the_cpu():
    """The check ran 4 ranks a node on 6 decode threads each: at 4 ranks its rate as it ran; one rank
    alone on the node gets 28 threads, so 28 / 6 of it, estimated; a path that decodes on the GPU is
    estimated at the rate it ran at."""
    cpu = real(2000.0)
    assert input_bound.capacity_per_rank(cpu, 4) == (500.0, False)
    rate, estimated = input_bound.capacity_per_rank(cpu, 1)
    assert estimated and rate == pytest.approx(500.0 * 28 / 6)
    assert input_bound.capacity_per_rank(real(2000.0, cpu=False), 1) == (500.0, True)
    assert input_bound.capacity_per_rank(real(2000.0, threads=None), 1) == (500.0, True)  # threads unknown
    assert input_bound.cpu_decoding("pytorch", "dali", "mixed", "gpu") is False
    assert input_bound.cpu_decoding("pytorch", "dali", "cpu", "gpu") and input_bound.cpu_decoding(
        "mxnet", "cpu", "", "gpu"
    )


def test_the_demand_is_the_synthetic_run_at_the_count_then_the_nearest_then_the_checks_own():
    runs = [
        {"gpus": 1, "images_per_s": 1000.0, "run": "h100/pytorch_fp32_1gpu_synthetic"},
        {"gpus": 4, "images_per_s": 3600.0, "run": "h100/pytorch_fp32_4gpu_synthetic"},
    ]
    timed = synthetic_run(6400.0, gpus=8)
    assert input_bound.per_gpu_demand(runs, timed, 4) == (900.0, "the synthetic run h100/pytorch_fp32_4gpu_synthetic")
    per_gpu, source = input_bound.per_gpu_demand(runs, timed, 8)
    assert per_gpu == 900.0 and source.endswith("at 4 GPU(s), the nearest count run")
    assert input_bound.per_gpu_demand([], timed, 2) == (800.0, "the check's 30 synthetic steps at 8 GPU(s) on one node")
    assert input_bound.per_gpu_demand([], {"images_per_s": None}, 2)[0] is None
    # the repeats of a count: their mean
    two = input_bound.by_count([{**runs[0], "images_per_s": 900.0}, runs[0]])
    assert two == [{"gpus": 1, "images_per_s": 950.0, "run": "h100/pytorch_fp32_1gpu_synthetic (mean of 2 runs)"}]


# --- what the check runs (plan/input_plan.py, plan/commands.py) ---


def gpu_plan(**overrides):
    from workflow_scripts.plan.commands import TrainerCommands
    from workflow_scripts.plan.input_plan import InputPlan
    from workflow_scripts.plan.sweep import Sweep

    gpu = {"gpus_per_node": 4, "max_nodes": 2, "gpu_request": "gpus-per-node", "cpus_per_task": 8}
    config = validated(
        with_overrides(
            CONFIG,
            systems={"g": gpu},
            training__systems=["g"],
            **{
                "training__precisions": ["fp32", "fp16"],
                "training__gpus": [1, 4, 8],
                "training__inputs": ["auto", "synthetic", "cpu"],
                **overrides,
            },
        )
    )
    sweep = Sweep(config, embedded=False)
    commands = TrainerCommands(config, sweep, {("g", f): "envs_gpu" for f in CONFIG["training"]["frameworks"]})
    return InputPlan(config, sweep, commands), sweep, commands


def flag(words, name):
    return words[words.index(name) + 1]


def test_the_check_runs_the_sweeps_runs_on_synthetic_and_on_each_real_input_for_its_own_steps():
    plan, sweep, commands = gpu_plan(training__mode="epochs", preflight__input_steps=7)
    torch = plan.settings("g", "pytorch", sweep.sweep())
    assert torch["inputs"] == ["dali", "cpu"] and torch["device"] == "gpu" and torch["ranks_per_node"] == [1, 4]
    assert torch["counts"] == [
        {"gpus": 1, "nodes": 1, "ranks_per_node": 1},
        {"gpus": 4, "nodes": 1, "ranks_per_node": 4},
        {"gpus": 8, "nodes": 2, "ranks_per_node": 4},
    ]
    assert set(torch["runs"]) == {"fp32", "fp16"} and set(torch["runs"]["fp16"]["real"]) == {"dali", "cpu"}
    synthetic, dali = torch["runs"]["fp16"]["synthetic"], torch["runs"]["fp16"]["real"]["dali"]
    assert flag(synthetic, "--data-source") == "synthetic" and flag(dali, "--data-source") == "real"
    assert flag(dali, "--input") == "dali" and flag(torch["runs"]["fp16"]["real"]["cpu"], "--input") == "cpu"
    # the sweep's run words but for its schedule: mode steps, the sweep's warm-up, the check's steps
    warmup = str(CONFIG["training"]["warmup_steps"])
    for words in (synthetic, dali):
        assert (flag(words, "--mode"), flag(words, "--warmup-steps"), flag(words, "--steps")) == ("steps", warmup, "7")
    schedule = {"--mode", "--warmup-steps", "--steps", "--epochs"}

    def unscheduled(words):
        return [w for i, w in enumerate(words) if w not in schedule and words[i - 1] not in schedule]

    assert unscheduled(dali) == unscheduled(commands.sweep_run("g", "pytorch", "fp16", "dali"))
    assert torch["trainer"] == "pytorch_ddp" and "--dali-decoder" in dali
    tf = plan.settings("g", "tensorflow", sweep.sweep())
    assert (
        tf["inputs"] == ["cpu"]
        and tf["loader_workers"] == 0
        and "--dali-decoder" not in tf["runs"]["fp32"]["real"]["cpu"]
    )


def test_input_steps_auto_times_the_sweeps_own_steps_on_a_system_that_requests_gpus():
    """preflight.input_steps auto: where the system requests GPUs, the sweep's timed steps (training.steps)
    if it times steps, input_plan.INPUT_STEPS_GPU if it times epochs; INPUT_STEPS_CPU where it does not
    (each step there takes seconds); a number given is kept on both."""
    from workflow_scripts.plan.input_plan import INPUT_STEPS_CPU, INPUT_STEPS_GPU

    plan, sweep, _ = gpu_plan(preflight__input_steps="auto", training__mode="steps", training__steps=37)
    gpu = plan.settings("g", "pytorch", sweep.sweep())
    assert gpu["input_steps"] == 37
    assert (
        flag(gpu["runs"]["fp16"]["real"]["dali"], "--steps")
        == flag(gpu["runs"]["fp16"]["synthetic"], "--steps")
        == "37"
    )
    plan, sweep, _ = gpu_plan(preflight__input_steps="auto", training__mode="epochs", training__steps=37)
    assert plan.settings("g", "pytorch", sweep.sweep())["input_steps"] == INPUT_STEPS_GPU != INPUT_STEPS_CPU
    plan.config["systems"]["g"]["gpu_request"] = "none"
    cpu = plan.settings("g", "pytorch", sweep.sweep())
    assert cpu["device"] == "cpu" and cpu["input_steps"] == INPUT_STEPS_CPU
    assert flag(cpu["runs"]["fp16"]["synthetic"], "--steps") == str(INPUT_STEPS_CPU)
    plan, sweep, _ = gpu_plan(preflight__input_steps=5)
    assert plan.settings("g", "pytorch", sweep.sweep())["input_steps"] == 5


def test_no_steps_no_runs_and_no_dataset_no_check():
    plan, sweep, _ = gpu_plan(preflight__input_steps=0)
    assert plan.settings("g", "mxnet", sweep.sweep())["runs"] == {}
    plan, sweep, _ = gpu_plan(training__inputs=["synthetic"])
    assert plan.settings("g", "mxnet", sweep.sweep()) is None


# --- preflight's data table ---


def check(real_rate, synthetic_rate=4000.0, inputs=("cpu",), framework="tensorflow", **real_kw):
    """An input check's result (results/preflight/<system>/<framework>/<N>gpu.input.json): its runs at
    4 GPUs of a 4-GPU node, fp32, for a sweep at 1 and 4 GPUs."""
    return {
        "system": "h100",
        "framework": framework,
        "nodes": 1,
        "tasks": 4,
        "log": "x.log",
        "rows": [],
        "input_check": {
            "settings": {
                "inputs": list(inputs),
                "precisions": ["fp32"],
                "counts": [
                    {"gpus": 1, "nodes": 1, "ranks_per_node": 1},
                    {"gpus": 4, "nodes": 1, "ranks_per_node": 4},
                ],
                "ranks_per_node": [1, 4],
                "device": "gpu",
                "decoder": "cpu",
                "input_steps": 30,
            },
            "node": "n1",
            "runs": {
                "fp32": {
                    "synthetic": synthetic_run(synthetic_rate)
                    if synthetic_rate
                    else {"images_per_s": None, "error": "the run synthetic_fp32 exited 1, see x.log"},
                    "real": {i: real(real_rate, **real_kw) for i in inputs},
                }
            },
        },
    }


def test_a_real_rate_within_the_tolerance_keeps_up():
    [r] = input_rows.rows(check(3900.0), TOLERANCE)
    assert r["check"] == "input_capacity" and r["status"] == "ok" and r["cause"] == "", r
    assert r["figure"] == (
        "cpu fp32: 3,900 images/s a node on real data against 4,000 on synthetic at 4 GPU(s) a node, 97.5% of "
        "synthetic: keeps up (within preflight.input_tolerance 3%) (real: 30 timed steps on NVIDIA H100 80GB HBM3, "
        "6 decode thread(s), waited for its input 2% of them (not itself a verdict); synthetic: 30 timed steps)"
    )


def test_a_real_rate_below_it_is_input_bound_and_says_the_keys():
    """1,136 images/s on real data against 4,000: 28.4% at 4 GPUs a node; a rank alone, on 28 decode
    threads, is estimated to keep up."""
    [r] = input_rows.rows(check(1136.0), TOLERANCE)
    assert r["status"] == "warning", r
    assert r["figure"].startswith("cpu fp32: 1,136 images/s a node on real data against 4,000 on synthetic at 4 GPU(s)")
    assert "28.4% of synthetic: input-bound, short by 71.6%" in r["figure"]
    assert r["cause"].startswith("input-bound at 4 GPU(s): the runs there will measure the input")
    assert "systems.h100.cpus_per_task" in r["fix"] and "training.decode_threads" in r["fix"]
    assert "conversion.shorter_cap" in r["fix"] and "preflight.input_bound_expected" in r["fix"]
    # with the same threads at every count (SLURM binds each rank to its CPUs) both counts are short
    [r] = input_rows.rows(check(1136.0, threads_at={"1": 6, "4": 6}), TOLERANCE)
    assert r["cause"].startswith("input-bound at 1, 4 GPU(s):") and "stand in" not in r["cause"]
    # CPU processes standing in for GPUs decode on the cores they compute on: the row says so
    res = check(1136.0)
    res["input_check"]["settings"]["device"] = "cpu"
    [r] = input_rows.rows(res, TOLERANCE)
    assert r["cause"].startswith("input-bound at 4 GPU(s) (CPU processes stand in for GPUs here: ")


def test_an_estimated_count_can_be_short_where_the_checks_own_keeps_up():
    """At 4 ranks a node 97.5%; a rank alone gets 2 decode threads of the 6 it ran on: a third of it."""
    [r] = input_rows.rows(check(3900.0, threads_at={"1": 2, "4": 6}), TOLERANCE)
    assert r["status"] == "warning" and "97.5% of synthetic: keeps up" in r["figure"], r
    assert r["cause"].startswith(
        "input-bound at 1 GPU(s) (1 GPU(s): 325 images/s a node on real data (estimated from the check's real-data "
        "run by the decode threads a rank gets) against 1,000 on synthetic at 1 GPU(s) a node, 32.5% of synthetic: "
        "input-bound, short by 67.5%)"
    )


def test_preflight_says_when_it_has_no_synthetic_rate_no_real_one_or_ran_nothing():
    [r] = input_rows.rows(check(1136.0, synthetic_rate=None), TOLERANCE)
    assert r["status"] == "not applicable" and r["cause"].startswith("demand unknown: the check's synthetic run")
    assert "x.log" in r["fix"]
    res = check(1136.0)
    res["input_check"]["runs"]["fp32"]["real"]["cpu"] = {"images_per_s": None, "error": "the run cpu_fp32 exited 1"}
    [r] = input_rows.rows(res, TOLERANCE)
    assert r["status"] == "warning" and r["figure"] == "cpu fp32: not measured" and "exited 1" in r["cause"]
    res["input_check"]["runs"], res["input_check"]["settings"]["input_steps"] = {}, 0
    [r] = input_rows.rows(res, TOLERANCE)
    assert r["status"] == "not applicable" and r["cause"].startswith("preflight.input_steps is 0")
    assert input_rows.rows({**res, "input_check": None}, TOLERANCE) == []


def test_an_input_asked_to_be_measured_input_bound_is_said_so_not_warned_of():
    [r] = input_rows.rows(check(1136.0, framework="pytorch"), TOLERANCE, ["cpu"])
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
        "repeat": 1,
        "nodes": 1,
        "gpu_request": "gpus-per-node",
        "run_dir": str(d),
    }


def tables_from(tmp_path, monkeypatch, real_rate, expected=()):
    """The training tables and the verdict table of a sweep of TensorFlow at 1 and 4 GPUs on real
    data and none on synthetic (the scale-out whitepaper's 97% within a node: ours 98%), preflight's
    input check with `real_rate` images/s on real data against 4,000 on synthetic at 4 GPUs, beside
    the sample's other tables."""
    out = tmp_path / "results"
    shutil.copytree(SAMPLE, out)
    runs = tmp_path / "runs"
    points = [run_dir(runs, 1, 1000.0, 0.2), run_dir(runs, 4, 3920.0, 3.1)]
    result = tmp_path / "4gpu.input.json"
    result.write_text(json.dumps(check(real_rate)))
    argv = ["training_tables", "--points", json.dumps(points), "--preflight", str(result)]
    argv += ["--input-tolerance", str(TOLERANCE), *(["--input-bound-expected", *expected] if expected else [])]
    monkeypatch.setattr(sys, "argv", [*argv, "--out-dir", str(out)])
    training_tables.main()
    monkeypatch.setattr(sys, "argv", ["conclusions", "--tables", str(out), "--out", str(out / "conclusions.csv")])
    conclusions.main()
    verdict = pd.read_csv(out / "conclusions.csv").set_index("id").loc["short_test_efficiency_node"]
    return out, verdict


def test_a_predicted_shortfall_marks_the_run_and_its_caveat_reaches_the_three_tables(tmp_path, monkeypatch):
    out, verdict = tables_from(tmp_path, monkeypatch, 1136.0)
    runs = pd.read_csv(out / "training_throughput.csv").set_index("gpus")
    assert runs.loc[4, "input_bound"] == "yes" and runs.loc[1, "input_bound"] == "no"
    assert set(runs.input_judged_by) == {"predicted"}
    assert runs.loc[4, "input_wait_share"] == pytest.approx(0.31)
    says = (
        "input-bound: h100/tensorflow_fp32_4gpu: its input is predicted not to keep up with its GPUs: predicted by "
        "preflight: 1,136 images/s a node on real data against 4,000 on synthetic at 4 GPU(s) a node, 28.4% of "
        "synthetic: input-bound, short by 71.6% (demand: the check's 30 synthetic steps at 4 GPU(s) on one node)"
    )
    assert says in runs.loc[4, "caveats"] and "it waited for its input 31% of its timed steps" in runs.loc[4, "caveats"]
    assert "input-bound" not in str(runs.loc[1, "caveats"])
    for table in ("training_throughput.md", "scaling.md", "conclusions.md"):
        assert says in (out / table).read_text(), table
    assert verdict.verdict == conclusions.NOT_DECIDED and says in verdict.why


def test_a_prediction_that_keeps_up_marks_nothing_and_the_verdict_stands(tmp_path, monkeypatch):
    out, verdict = tables_from(tmp_path, monkeypatch, 3960.0)
    runs = pd.read_csv(out / "training_throughput.csv")
    assert set(runs.input_bound) == {"no"} and not runs.caveats.notna().any()
    for table in ("training_throughput.md", "scaling.md", "conclusions.md"):
        assert "input-bound:" not in (out / table).read_text(), table  # no caveat: the note counts 0
    note = "the input check judged 2 run(s) on real data (0 against the sweep's synthetic runs of their point, 2 by"
    assert (
        note in (out / "training_throughput.md").read_text()
        and "0 input-bound" in (out / "training_throughput.md").read_text()
    )
    assert verdict.verdict == conclusions.HOLDS, verdict.why


def test_a_run_asked_to_be_input_bound_says_so_and_still_decides_no_scaling(tmp_path, monkeypatch):
    out, verdict = tables_from(tmp_path, monkeypatch, 1136.0, expected=["cpu"])
    says = "input-bound (asked for: preflight.input_bound_expected): h100/tensorflow_fp32_4gpu: predicted by preflight"
    assert says in (out / "scaling.md").read_text()
    assert verdict.verdict == conclusions.NOT_DECIDED and says in verdict.why


def marked(tmp_path, real_rate, synthetic_at, records):
    """input_marks over a real-data TensorFlow run at 4 GPUs doing `real_rate` images/s and the
    sweep's synthetic runs {gpus: images/s}: the rows by (input, gpus)."""
    points = [run_dir(tmp_path / "real", 4, real_rate, 0.4)]
    points += [run_dir(tmp_path / "synthetic", g, v, 0.0, data_source="synthetic") for g, v in synthetic_at.items()]
    return input_marks.mark(run_records.load(points), records, TOLERANCE).set_index(["input", "gpus"])


def test_a_runs_own_figure_overrules_a_prediction_of_input_bound(tmp_path):
    """Preflight predicted 28.4% of synthetic; the run did 1,990 images/s beside the sweep's
    synthetic 2,000 at its point: it kept up, and is not marked."""
    runs = marked(tmp_path, 1990.0, {4: 2000.0}, {("h100", "tensorflow"): check(1136.0)["input_check"]})
    run = runs.loc[("cpu", 4)]
    assert (run.input_bound, run.input_judged_by) == ("no", "measured")
    assert run.input_check == (
        "measured: 1,990 images/s, 99.5% of the sweep's synthetic runs at this point (2,000); preflight predicted 28.4%"
    )
    assert (run.input_capacity, run.input_demand) == (1990.0, 2000.0) and "input-bound" not in str(run.caveats)
    assert pd.isna(runs.loc[("synthetic", 4), "input_bound"])  # a synthetic run has no input to judge


def test_a_runs_own_figure_overrules_a_prediction_that_it_keeps_up(tmp_path):
    """Preflight predicted 99.0%; the run did 1,500 images/s beside the sweep's synthetic 2,000: it is
    marked, by its own figures, and without preflight's record just the same."""
    records = {("h100", "tensorflow"): check(3960.0)["input_check"]}
    run = marked(tmp_path / "a", 1500.0, {4: 2000.0}, records).loc[("cpu", 4)]
    assert (run.input_bound, run.input_judged_by) == ("yes", "measured")
    said = (
        "measured: 1,500 images/s, 75.0% of the sweep's synthetic runs at this point (2,000), input-bound, short by "
        "25.0%"
    )
    assert run.input_check == f"{said}; preflight predicted 99.0%"
    assert f"h100/tensorflow_fp32_4gpu: its input did not keep up with its GPUs: {said}" in run.caveats
    assert "it waited for its input 4% of its timed steps" in run.caveats
    alone = marked(tmp_path / "b", 1500.0, {4: 2000.0}, {}).loc[("cpu", 4)]
    assert (alone.input_bound, alone.input_check) == ("yes", said)


def test_the_prediction_stands_where_the_sweep_has_no_synthetic_run_at_the_point(tmp_path):
    """The sweep's synthetic run is at 1 GPU only (1,100 images/s): the 4-GPU run is judged by
    preflight's figures at its 4 ranks a node against it; with neither, it is not judged."""
    records = {("h100", "tensorflow"): check(1136.0)["input_check"]}
    run = marked(tmp_path / "a", 3920.0, {1: 1100.0}, records).loc[("cpu", 4)]
    assert (run.input_bound, run.input_judged_by) == ("yes", "predicted")
    assert run.input_check == (
        "predicted by preflight: 1,136 images/s a node on real data against 4,400 on synthetic at 4 GPU(s) a node, "
        "25.8% of synthetic: input-bound, short by 74.2% (demand: the synthetic run "
        "h100/tensorflow_fp32_1gpu_synthetic at 1 GPU(s), the nearest count run)"
    )
    assert pd.isna(marked(tmp_path / "b", 3920.0, {1: 1100.0}, {}).loc[("cpu", 4), "input_bound"])


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
