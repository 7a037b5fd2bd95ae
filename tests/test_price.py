"""The sweep's price (workflow_scripts/plan/price.py): a doctored 8-node x 8-GPU cluster's plan,
its figures against arithmetic done by hand, and a budget that refuses it naming the costliest."""

import pytest
from helpers import CONFIG, validated, with_overrides

from workflow_scripts.plan import price
from workflow_scripts.plan.sweep import ConfigProblem, Sweep

pytestmark = pytest.mark.unit

H100 = {"gpus_per_node": 8, "max_nodes": 8, "gpu_request": "gpus-per-node", "cpus_per_task": 12, "time_min": 60}


def _plan(max_minutes=None, **overrides):
    settings = {
        "systems": {"h100": H100},
        "training__systems": ["h100"],
        "training__frameworks": ["tensorflow", "mxnet", "pytorch"],
        "training__precisions": ["fp32", "fp16"],
        "training__gpus": [1, 2, 4, 8, 16, 32, 64],
        "training__repeats": 3,
        "training__long_test__gpus": [],
    }
    config = validated(with_overrides(CONFIG, **{**settings, **overrides}))
    sweep = Sweep(config, embedded=False)
    sweep.max_minutes = max_minutes or {}

    def preflight_gpus(system):  # plan/preflight_plan.py's gpus: one node's tasks, and two nodes'
        return [8, 16]

    return config, price.plan_jobs(
        config, sweep.sweep(), sweep.long_test(), sweep.placement, preflight_gpus, sweep.point_group
    )


def test_the_price_of_an_8_node_sweep_by_hand():
    _, jobs = _plan()
    s = price.summary(jobs)
    # training: 3 frameworks x 2 precisions = 6 points at each of 7 GPU counts, each point's 3 repeats
    # one job of 3 h (no MaxTime known); preflight: 3 frameworks x (1 node, 2 nodes); interconnect:
    # the 6 counts over 1 GPU
    assert s["by_stage"] == {"training": 42, "preflight": 6, "interconnect": 6}
    # nodes of 1, 2, 4, 8, 16, 32, 64 GPUs: 1, 1, 1, 1, 2, 4, 8
    assert s["by_nodes"] == {1: 6 * 4 + 3 + 3, 2: 6 + 3 + 1, 4: 6 + 1, 8: 6 + 1}
    node_hours = 6 * 3 * (1 + 1 + 1 + 1 + 2 + 4 + 8) + 3 * (1 + 2) + (1 + 1 + 1 + 2 + 4 + 8)  # 324 + 9 + 17
    assert s["node_hours_reserved"] == node_hours == 350
    assert s["gpu_hours_reserved"] == 8 * node_hours  # exclusive: every GPU of every node, even for 1 GPU
    assert s["largest"]["nodes"] == 8 and s["largest"]["gpus"] == 64
    assert s["estimate_sources"] == {price.LIMIT: 54} and s["gpu_hours_estimated"] == 2800
    three = [j for j in jobs if j["stage"] == "training" and j["name"] == "h100/pytorch_fp16_64gpu (3 runs in turn)"]
    assert len(three) == 1 and three[0]["time_min"] == 180 and three[0]["runs"] == 3


def test_a_partitions_max_time_splits_a_points_repeats_into_jobs_that_fit():
    """MaxTime 150 min at time_min 60: two runs a job, so each point's 3 repeats are 2 jobs (2 + 1)."""
    hours = {**H100, "partition": "gpu"}
    _, jobs = _plan(max_minutes={"gpu": 150}, systems={"h100": hours})
    training = [j for j in jobs if j["stage"] == "training"]
    assert len(training) == 6 * 7 * 2
    assert sorted({(j["runs"], j["time_min"]) for j in training}) == [(1, 60), (2, 120)]
    assert price.summary(jobs)["node_hours_reserved"] == 350  # the same reserve, in more jobs


def test_a_shared_node_is_charged_its_own_gpus_only():
    _, jobs = _plan(systems={"h100": {**H100, "exclusive": False}}, training__gpus=[1, 8], training__repeats=1)
    assert all("runs" not in j for j in jobs)  # one repeat: each run its own job
    training = [j for j in jobs if j["stage"] == "training"]
    assert sorted({j["gpus"] for j in training}) == [1, 8]


def test_a_budget_under_the_reserve_is_refused_naming_the_costliest():
    config, jobs = _plan()
    price.check_budget(jobs, 2800)  # exactly the reserve: allowed
    price.check_budget(jobs, None)
    with pytest.raises(ConfigProblem) as e:
        price.check_budget(jobs, 2799)
    said = str(e.value)
    assert "budget_gpu_hours = 2799" in said and "2,800 GPU-hours" in said and "64gpu" in said


def test_earlier_runs_price_the_estimate():
    config, _ = _plan(training__gpus=[8, 16], training__frameworks=["pytorch"], training__precisions=["fp16"])
    points = Sweep(config, embedded=False).sweep()
    took = {f"{points[0]['run_dir']}/summary.json": 12.0}  # one run of the six has a job record
    jobs = price.training_jobs(config, points, minutes=took.get)
    assert [j["estimate_source"] for j in jobs] == [price.MEASURED] + [price.SIMILAR] * 5
    assert all(j["estimate_min"] == 12.0 for j in jobs)
    assert price.summary(jobs)["gpu_hours_estimated"] == (3 * 8 + 3 * 16) * 12 / 60


def test_only_a_price_alone_escapes_the_budget():
    rules = ["all", "training", "price"]
    assert price.targets_only_price(["snakemake", "--profile", "slurm", "price"], rules)
    assert not price.targets_only_price(["snakemake", "price", "all"], rules)
    assert not price.targets_only_price(["snakemake", "--profile", "slurm"], rules)  # all, the default target
