"""The study's INT8 on a GPU cluster (issue 62): `snakemake -n --profile slurm all` with config.yaml and
presets/study.yaml alone, on a cluster of 16 nodes x 4 A100 with driver R535 faked only in its
commands (helpers/dry_run.py; its PyTorch route the CUDA 12 one, a stand-in that imports as it
would: helpers/stand_in.py), plans Table III and Fig. 9 as the study made them. What is read is the
plan's own text: the SLURM jobs the executor would submit; its INT8 part, with the price's line for
each job, is tests/snapshots/dry_run_study_int8_a100_r535.txt, for review. No TensorRT runs."""

import difflib
import json
import os
import re
from collections import defaultdict

import pytest
from helpers import REPO
from helpers.dry_run import cluster, resource, snakemake_slurm, submitted
from helpers.processes import interpreter

pytestmark = pytest.mark.stage

NETWORKS = {"resnet50", "resnet101", "resnet152", "vgg16", "vgg19", "googlenet", "alexnet"}
FIG9_BATCHES = {1, 2, 4, 8, 16, 32, 64, 128, 256}


def planned_int8(work):
    env = cluster(work, "a100_r535")
    by_rule = defaultdict(list)
    for group in submitted(snakemake_slurm(work, env, "-n", "all")):
        for job in group:
            if job["rule"].startswith("int8_"):
                by_rule[job["rule"]].append(job)
    return by_rule


def test_the_preset_alone_plans_table_iii_and_fig9_at_the_studys_settings(tmp_path):
    jobs = planned_int8(tmp_path)
    engines = [out for j in jobs["int8_engine"] for out in j["outputs"] if out.endswith(".engine")]
    # seven networks, each an FP32 and an INT8 TensorRT engine, each scored
    assert {re.search(r"/int8/(\w+)/tensorrt/(fp32|int8)\.engine$", e).groups() for e in engines} == {
        (n, p) for n in NETWORKS for p in ("fp32", "int8")
    }, engines
    assert len(jobs["int8_evaluate"]) == 14
    exports = {re.search(r"--network (\w+)", j["shell"]).group(1): j["shell"] for j in jobs["int8_export"]}
    assert set(exports) == NETWORKS
    for shell in exports.values():
        assert "--source torchvision" in shell and "--image-size 224" in shell, shell
    for j in jobs["int8_calibrate"]:
        assert "--batch-size 25" in j["shell"] and "--histogram-bins 2048" in j["shell"], j["shell"]
    timed = {
        int(b) for j in jobs["int8_throughput_run"] for out in j["outputs"] for b in re.findall(r"/bs(\d+)\.json$", out)
    }
    assert timed == FIG9_BATCHES
    for j in jobs["int8_throughput_run"]:
        assert all("/resnet50/tensorrt/" in out for out in j["outputs"]), j["outputs"]


def test_every_int8_gpu_job_runs_the_inference_systems_route_and_the_cpu_steps_envs_pytorch(tmp_path):
    jobs = planned_int8(tmp_path)
    route = str(tmp_path / ".envs" / "torch-cu126" / "bin" / "python")
    for rule in ("int8_engine", "int8_evaluate", "int8_throughput_run"):
        assert jobs[rule], rule
        for j in jobs[rule]:
            assert j["shell"].split(" -m ")[0].strip("'") == route, (rule, j["shell"][:300])
            assert resource(j, "gres") == "gpu:a100:1", (rule, j["resources"])
    # the CPU steps take no GPU, so not the GPU system's route either
    for rule in ("int8_export", "int8_calibrate", "int8_quantize"):
        for j in jobs[rule]:
            assert route not in j["shell"] and interpreter("pytorch") in j["shell"], (rule, j["shell"][:300])


def test_fig9_is_one_timing_job_holding_its_node_for_minutes_from_its_estimate(tmp_path):
    jobs = planned_int8(tmp_path)
    (timing,) = jobs["int8_throughput_run"]
    # 1 network x 9 batch sizes x 2 precisions x (3 s + 2 x 0.2 s) = 61.2 s, x 3 = 3.06 -> 4 minutes, + 5 to start
    assert resource(timing, "runtime") == "9", timing["resources"]
    assert "--exclusive" in resource(timing, "slurm_extra") and resource(timing, "gres") == "gpu:a100:1", timing
    assert "workflow_scripts.int8.timing_job" in timing["shell"], timing["shell"]
    assert "--batch-sizes 1 2 4 8 16 32 64 128 256 " in timing["shell"], timing["shell"]
    assert "--warmup-s=0.2 --duration-s=3" in timing["shell"], timing["shell"]


SNAPSHOT = REPO / "tests" / "snapshots" / "dry_run_study_int8_a100_r535.txt"


def int8_plan_text(work, env, said):
    """The INT8 part of the plan as reviewable text: each SLURM job the dry run would submit (rule,
    outputs, resources, command) and the price's line for it, this machine's paths left out."""
    jobs = [j for g in submitted(said) for j in g if j["rule"].startswith("int8_")]
    snakemake_slurm(work, env, "price", "--slurm-init-seconds-before-status-checks", "1")
    priced = {
        out: p
        for p in json.loads((work / "results" / "price.json").read_text())["jobs"]
        if p["stage"] == "INT8"
        for out in p["outputs"]
    }
    blocks = []
    for j in jobs:
        p = next((priced[o] for o in j["outputs"] if o in priced), None)
        price = f"{p['nodes']} node(s), {p['gpus']} GPU(s), {p['time_min']} min" if p else "NOT PRICED"
        resources = ", ".join(sorted(j["resources"].split(", ")))  # Snakemake lists them in no fixed order
        blocks.append(
            f"rule {j['rule']}\n  outputs: {', '.join(j['outputs'])}\n  resources: {resources}\n"
            f"  price: {price}\n  shell: {j['shell']}"
        )
    text = "\n\n".join(sorted(blocks)) + "\n"
    return text.replace(str(work), "WORK").replace(str(REPO), "REPO")


def test_the_presets_int8_plan_on_the_a100_r535_cluster_is_the_reviewed_snapshot(tmp_path):
    """tests/snapshots/dry_run_study_int8_a100_r535.txt, reviewed with each change that means to
    change it: DLSCALE_UPDATE_SNAPSHOTS=1 .venv/bin/pytest -n 0 tests/test_study_int8.py rewrites it."""
    env = cluster(tmp_path, "a100_r535")
    text = int8_plan_text(tmp_path, env, snakemake_slurm(tmp_path, env, "-n", "all"))
    if os.environ.get("DLSCALE_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.write_text(text)
    assert "NOT PRICED" not in text
    diff = "".join(difflib.unified_diff(SNAPSHOT.read_text().splitlines(True), text.splitlines(True), n=1))
    assert text == SNAPSHOT.read_text(), f"the INT8 plan changed (if meant: DLSCALE_UPDATE_SNAPSHOTS=1):\n{diff[:6000]}"
