"""What a sweep costs before it is submitted: its SLURM jobs by stage and node count, the largest
allocation, node-hours and GPU-hours reserved at the jobs' time limits, and an estimate of use from
what the tool has measured (earlier runs' job times), else the time limits, saying which.

    snakemake price --profile slurm          # writes results/price.md and price.json, and prints them

rules/price.smk lists the jobs when the workflow is parsed (plan_jobs); config budget_gpu_hours makes
any invocation but `price` itself refuse a plan whose reserve is over it (check_budget), naming the
jobs that cost most. A job that takes its nodes alone (--exclusive) is charged all of their GPUs.
"""

import json
import statistics
import sys
from pathlib import Path

from workflow_scripts.plan.sweep import ConfigProblem

MEASURED, SIMILAR, LIMIT = "measured (this job's last run)", "measured (like runs)", "time limit"


def job(stage, name, system, nodes, per_node, time_min, exclusive, gpus_per_node, estimate=None, source=LIMIT):
    """One job: `nodes` nodes of `per_node` GPUs each for at most `time_min` minutes; reserved GPUs a
    node are the node's all (gpus_per_node) where it is exclusive."""
    return {
        "stage": stage,
        "name": name,
        "system": system,
        "nodes": nodes,
        "gpus": nodes * (gpus_per_node if exclusive and per_node else per_node),
        "time_min": time_min,
        "exclusive": exclusive,
        "estimate_min": min(estimate, time_min) if estimate is not None else time_min,
        "estimate_source": source if estimate is not None else LIMIT,
    }


def run_minutes(summary_path):
    """Minutes the job of an earlier run took, from its summary's job record; None if unknown."""
    try:
        j = json.loads(Path(summary_path).read_text())["job"]
        return (j["ended_at"] - j["started_at"]) / 60
    except (OSError, ValueError, KeyError, TypeError):
        return None


def training_jobs(config, points, stage="training", minutes=run_minutes, group=lambda point: None):
    """A job per sweep run, or per group of a point's runs that share one (group: Sweep.point_group),
    reserving the sum of their time limits; a run's estimate from its own last run, else the median
    of the runs of the same system, framework and precision (a short test's steps take about as long
    at any GPU count), else its time limit."""
    took = [minutes(f"{p['run_dir']}/summary.json") for p in points]  # each summary read once
    seen = {}
    for p, m in zip(points, took):
        if m is not None:
            seen.setdefault((p["system"], p["framework"], p["precision"]), []).append(m)
    out = []
    for p, own in zip(points, took):
        sysc = config["systems"][p["system"]]
        like = seen.get((p["system"], p["framework"], p["precision"]))
        est, src = (
            (own, MEASURED) if own is not None else ((statistics.median(like), SIMILAR) if like else (None, LIMIT))
        )
        per_node = p["gpus"] // p["nodes"] if sysc["gpu_request"] != "none" else 0
        name = Path(p["run_dir"]).name
        out.append(
            job(
                stage,
                f"{p['system']}/{name}",
                p["system"],
                p["nodes"],
                per_node,
                sysc["time_min"],
                bool(sysc["exclusive"]),
                sysc["gpus_per_node"],
                est,
                src,
            )
        )
    return _shared(out, [group(p) for p in points])


WEAKEST = (LIMIT, SIMILAR, MEASURED)  # a job of several runs is estimated as well as its least known run


def _shared(jobs, groups):
    """The runs of one group as one job: the first run's shape, the sum of the time limits and of
    the estimates, and how many runs it holds."""
    out, seen = [], {}
    for j, g in zip(jobs, groups):
        if g is None:
            out.append(j)
        elif g not in seen:
            point = g.removeprefix("train_").removeprefix(f"{j['system']}_")
            seen[g] = {**j, "name": f"{j['system']}/{point}", "runs": 1}
            out.append(seen[g])
        else:
            one = seen[g]
            one["runs"] += 1
            one["time_min"] += j["time_min"]
            one["estimate_min"] += j["estimate_min"]
            one["estimate_source"] = min(one["estimate_source"], j["estimate_source"], key=WEAKEST.index)
    for j in seen.values():
        j["name"] += f" ({j['runs']} runs in turn)"
    return out


def long_test_jobs(config, points):
    """The long test: a run of up to training.long_test.max_jobs jobs, each at its time limit, so it
    reserves max_jobs x the limit at most (its estimate: the same, until it has run)."""
    acc = config["training"]["long_test"]
    out = []
    for p in points:
        sysc = config["systems"][p["system"]]
        limit = acc["time_min"] or sysc["time_min"]
        per_node = p["gpus"] // p["nodes"] if sysc["gpu_request"] != "none" else 0
        one = job(
            "long test",
            f"{p['system']}/accuracy/{Path(p['run_dir']).name} (up to {acc['max_jobs']} jobs)",
            p["system"],
            p["nodes"],
            per_node,
            limit * acc["max_jobs"],
            bool(sysc["exclusive"]),
            sysc["gpus_per_node"],
        )
        out.append({**one, "up_to_jobs": acc["max_jobs"]})
    return out


def point_jobs(config, stage, pairs):
    """Jobs at (system, GPUs, name) of the sweep's geometry and time limit (preflight, interconnect)."""
    out = []
    for system, gpus, nodes, name in pairs:
        sysc = config["systems"][system]
        per_node = gpus // nodes if sysc["gpu_request"] != "none" else 0
        out.append(
            job(stage, name, system, nodes, per_node, sysc["time_min"], bool(sysc["exclusive"]), sysc["gpus_per_node"])
        )
    return out


def plan_jobs(config, sweep, long_test, placement, preflight_gpus, group=lambda point: None):
    """Every job of the plan that holds GPU nodes: the sweep's training runs (a point's repeats one
    job where they share one: group, Sweep.point_group), the long test's jobs,
    preflight's checks (one a system, framework and task count) and the interconnect measurement
    (one a system and GPU count over 1)."""
    t = config["training"]
    checks = [
        (s, g, placement(s, g)[0] if g <= config["systems"][s]["gpus_per_node"] else 2, f"{s}/{f} {g} GPUs")
        for s in t["systems"]
        for f in t["frameworks"]
        for g in preflight_gpus(s)
    ]
    links = [(s, g, placement(s, g)[0], f"{s} {g} GPUs") for s in t["systems"] for g in t["gpus"] if g > 1]
    return (
        training_jobs(config, sweep, group=group)
        + long_test_jobs(config, long_test)
        + point_jobs(config, "preflight", checks)
        + point_jobs(config, "interconnect", links)
    )


def targets_only_price(argv, rule_names):
    """Whether this invocation asks for the price alone (its budget is then not enforced): of the
    command line's words that name a rule, `price` is the only one. Snakemake does not tell a
    Snakefile its targets while it is parsed, so its command line is read."""
    asked = set(argv[1:]) & set(rule_names)
    return asked == {"price"}


def summary(jobs):
    """The figures of the price: jobs by stage and by node count, the largest allocation, node- and
    GPU-hours reserved at the time limits and estimated."""
    by_stage, by_nodes = {}, {}
    for j in jobs:
        by_stage[j["stage"]] = by_stage.get(j["stage"], 0) + 1
        by_nodes[j["nodes"]] = by_nodes.get(j["nodes"], 0) + 1
    largest = max(jobs, key=lambda j: (j["nodes"], j["gpus"]), default=None)
    return {
        "jobs": len(jobs),
        "by_stage": by_stage,
        "by_nodes": dict(sorted(by_nodes.items())),
        "largest": {"name": largest["name"], "nodes": largest["nodes"], "gpus": largest["gpus"]} if largest else None,
        "node_hours_reserved": sum(j["nodes"] * j["time_min"] for j in jobs) / 60,
        "gpu_hours_reserved": sum(j["gpus"] * j["time_min"] for j in jobs) / 60,
        "node_hours_estimated": sum(j["nodes"] * j["estimate_min"] for j in jobs) / 60,
        "gpu_hours_estimated": sum(j["gpus"] * j["estimate_min"] for j in jobs) / 60,
        "estimate_sources": {
            s: sum(1 for j in jobs if j["estimate_source"] == s)
            for s in dict.fromkeys(j["estimate_source"] for j in jobs)
        },
    }


def costliest(jobs, n=5):
    return sorted(jobs, key=lambda j: -j["gpus"] * j["time_min"])[:n]


def check_budget(jobs, budget):
    """A plan whose GPU-hours reserved exceed config budget_gpu_hours is refused, naming the jobs
    that cost most (None or 0: no budget)."""
    if not budget:
        return
    s = summary(jobs)
    if s["gpu_hours_reserved"] <= budget:
        return
    top = "; ".join(f"{j['name']} {j['gpus'] * j['time_min'] / 60:,.0f}" for j in costliest(jobs))
    raise ConfigProblem(
        f"config budget_gpu_hours = {budget}: the plan reserves {s['gpu_hours_reserved']:,.0f} GPU-hours at its "
        f"time limits ({s['jobs']} jobs; `snakemake price` lists them). The costliest, GPU-hours: {top}. Fix: fewer "
        f"points (training.gpus, frameworks, precisions, repeats), shorter systems.<name>.time_min, or a larger budget"
    )


def markdown(jobs):
    s = summary(jobs)
    lines = [
        "# The sweep's price, before it is submitted",
        "",
        f"{s['jobs']} SLURM jobs that hold GPU nodes (conversion and the other CPU jobs are not counted; a "
        "long-test run counts once, reserving its most jobs; a point's repeats that run in turn in one job count once, "
        "reserving the sum of their time limits). "
        "Reserved: at each job's time limit, an exclusive job charged all of its nodes' GPUs. Estimated: "
        + ", ".join(f"{n} from {src}" for src, n in s["estimate_sources"].items())
        + ".",
        "",
        "| | |",
        "|---|---|",
        "| jobs by stage | " + ", ".join(f"{k}: {v}" for k, v in s["by_stage"].items()) + " |",
        "| jobs by node count | " + ", ".join(f"{k} node(s): {v}" for k, v in s["by_nodes"].items()) + " |",
    ]
    if s["largest"]:
        big = s["largest"]
        lines.append(f"| largest allocation | {big['nodes']} node(s), {big['gpus']} GPUs ({big['name']}) |")
    lines += [
        f"| node-hours reserved | {s['node_hours_reserved']:,.1f} |",
        f"| GPU-hours reserved | {s['gpu_hours_reserved']:,.1f} |",
        f"| node-hours estimated | {s['node_hours_estimated']:,.1f} |",
        f"| GPU-hours estimated | {s['gpu_hours_estimated']:,.1f} |",
        "",
        "The costliest jobs (GPU-hours reserved):",
        "",
    ]
    lines += [f"- {j['name']}: {j['gpus'] * j['time_min'] / 60:,.1f}" for j in costliest(jobs) if j["gpus"]]
    return "\n".join(lines) + "\n"


def write(jobs, md_path, json_path, log_path=None):
    """The price as results/price.md and price.json; printed, and into the rule's log."""
    Path(json_path).write_text(json.dumps({"summary": summary(jobs), "jobs": jobs}, indent=1))
    text = markdown(jobs)
    Path(md_path).write_text(text)
    if log_path:
        Path(log_path).write_text(text)
    sys.stdout.write(text)
