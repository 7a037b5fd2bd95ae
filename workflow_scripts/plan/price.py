"""What a sweep costs before it is submitted: every SLURM job `snakemake all` would submit, by stage
and node count, the largest allocation, node-hours and GPU-hours reserved at the jobs' time limits,
an estimate of use from what the tool has measured (an earlier run's job time, else preflight's step
rate and first-kernel time), else the time limits, saying which, and each stage's time limit beside
what preflight measured.

    snakemake price --profile slurm          # writes results/price.md and price.json, and prints them

rules/price.smk hands over, stage by stage, the files the plan's jobs write (the plan objects' and the
rules' own lists) and the resources their rules ask SLURM for; each file's job is found by
Snakemake's own matching of the rules' outputs (producer), so the price lists the jobs a dry run
does. A job's nodes, GPUs and time limit are read from those resources, as sbatch gets them: a job
that takes its nodes alone (--exclusive) is charged all of their GPUs; one that asks for neither a
GPU nor a whole node is a CPU job, listed and counted, and in no node- or GPU-hours. Config
budget_gpu_hours makes any invocation but `price` itself refuse a plan whose reserve is over it
(check_budget), naming the jobs that cost most.
"""

import json
import math
import shlex
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

from workflow_scripts.plan.sweep import ConfigProblem, requests_gpus

MEASURED, SIMILAR, LIMIT = "measured (this job's last run)", "measured (like runs)", "time limit"
PREFLIGHT = "preflight (its step rate and first kernel)"
WEAKEST = (LIMIT, PREFLIGHT, SIMILAR, MEASURED)  # a job of several runs is estimated as well as its least known run
# A time limit this many times the estimate of the longest job under it is named: far past any margin
# the estimate needs, it is a reserve nothing uses.
LONG_LIMIT = 10
# The suggested limit is twice the estimate: the estimate counts the steps and the first kernel only
# (no interpreter start, page-cache clearing, data check or rendezvous), at one node's rate per GPU;
# a run that meets its limit is lost (recorded failed, never resubmitted unchanged), an idle reserve
# only costs queue priority.
SUGGEST_FACTOR = 2


def producer(rules):
    """path -> (rule name, wildcards) of the one rule whose output matches it, by Snakemake's own
    matching (rule.is_producer, rule.get_wildcards): rules/price.smk passes workflow.rules."""
    rules = list(rules)

    def find(path):
        found = [r for r in rules if r.is_producer(path)]
        if len(found) != 1:
            names = ", ".join(r.name for r in found) or "none"
            raise LookupError(f"the price cannot tell which job writes {path}: rules {names} match it")
        return found[0].name, dict(found[0].get_wildcards(path))

    return find


def default_minutes(defaults):
    """The runtime of the profile's default-resources (what a job without its own runtime is given),
    in minutes; None where it sets none (the partition's default limit: not known here)."""
    try:
        value = defaults["runtime"]
    except (KeyError, TypeError):
        return None
    value = getattr(value, "value", value)  # Snakemake's Resource
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def gpus_asked(resources):
    """(GPUs a node, GPUs a job, whether exclusive) of a job's resources as the SLURM plugin passes
    them: --gpus-per-node=[type:]K and --exclusive in slurm_extra, gres gpu:[type:]K, gpu K."""
    words = shlex.split(resources.get("slurm_extra") or "")
    per_node = 0
    for w in words:
        if w.startswith("--gpus-per-node="):
            per_node = int(w.split("=", 1)[1].rsplit(":", 1)[-1])
    if resources.get("gres"):
        per_node = int(str(resources["gres"]).rsplit(":", 1)[-1])
    return per_node, int(resources.get("gpu") or 0), "--exclusive" in words


ASKED = ("nodes", "runtime", "slurm_extra", "gres", "gpu")  # what the price reads of a job's resources


class Reader:
    def __init__(self, config, find, default_min):
        """find: producer(); default_min: default_minutes() of the profile."""
        self.config, self.find, self.default_min = config, find, default_min

    def job(self, stage, path, resources, system=None):
        """The job that writes `path`, asking SLURM for `resources` (a rule's resources: values or
        functions of the job's wildcards); `system` where its wildcards name none (the INT8 jobs'
        inference.system), whose nodes' GPUs an exclusive job is charged."""
        rule, wildcards = self.find(path)
        w = SimpleNamespace(**wildcards)
        r = {k: (v(w) if callable(v) else v) for k, v in resources.items() if k in ASKED}
        system = wildcards.get("system", system)
        sysc = self.config["systems"].get(system) if system else None
        per_node, per_job, exclusive = gpus_asked(r)
        nodes = int(r.get("nodes") or 1)
        if exclusive and sysc and requests_gpus(sysc):
            gpus = nodes * sysc["gpus_per_node"]
        else:
            gpus = nodes * per_node + per_job
        limit = r.get("runtime") or self.default_min
        return {
            "stage": stage,
            "rule": rule,
            "name": path,
            "outputs": [path],
            "system": system,
            "nodes": nodes,
            "gpus": gpus,
            "exclusive": exclusive,
            "gpu_job": bool(gpus or exclusive),
            "time_min": limit,
            "estimate_min": limit,
            "estimate_source": LIMIT,
        }

    def jobs(self, stage, paths, resources, system=None):
        return [self.job(stage, p, resources, system) for p in dict.fromkeys(paths)]


def estimated(j, minutes, source):
    """j with an estimate of `minutes` from `source` (at most its time limit); unchanged for None."""
    if minutes is None:
        return j
    limit = j["time_min"]
    return {**j, "estimate_min": min(minutes, limit) if limit else minutes, "estimate_source": source}


def run_minutes(summary_path):
    """Minutes the job of an earlier run took, from its summary's job record; None if unknown."""
    try:
        j = json.loads(Path(summary_path).read_text())["job"]
        return (j["ended_at"] - j["started_at"]) / 60
    except (OSError, ValueError, KeyError, TypeError):
        return None


def preflight_share(j, measured, point, test, split=1):
    """j with preflight's estimate of one of its runs (preflight_min) and of one job's share of it,
    which its time limit holds (limit_estimate_min: a run spread over `split` jobs), or why there is
    none (limit_unestimated)."""
    if not measured:
        return j
    minutes = measured.run_minutes(point, test)
    if minutes is None:
        return {**j, "limit_unestimated": measured.why_not(point)}
    return {**j, "limit_estimate_min": minutes / split, "preflight_min": minutes}


def training_jobs(reader, points, resources, group=lambda point: None, minutes=run_minutes, measured=None):
    """A job per sweep run, or per group of a point's runs that share one (group: Sweep.point_group),
    reserving the sum of their time limits; a run's estimate from its own last run, else the median
    of the runs of the same system, framework and precision (a short test's steps take about as long
    at any GPU count), else preflight's step rate and first kernel (measured: Measured), else its
    time limit."""
    took = [minutes(f"{p['run_dir']}/summary.json") for p in points]  # each summary read once
    seen = {}
    for p, m in zip(points, took):
        if m is not None:
            seen.setdefault((p["system"], p["framework"], p["precision"]), []).append(m)
    out = []
    for p, own in zip(points, took):
        j = reader.job("training", f"{p['run_dir']}/summary.json", resources)
        j = {**j, "name": f"{p['system']}/{Path(p['run_dir']).name}", "limit_key": f"systems.{p['system']}.time_min"}
        j = preflight_share(j, measured, p, "short")
        like = seen.get((p["system"], p["framework"], p["precision"]))
        if own is not None:
            j = estimated(j, own, MEASURED)
        elif like:
            j = estimated(j, statistics.median(like), SIMILAR)
        else:
            j = estimated(j, j.get("preflight_min"), PREFLIGHT)
        out.append(j)
    return _shared(out, [group(p) for p in points])


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
            one["outputs"] = one["outputs"] + j["outputs"]
            one["time_min"] += j["time_min"]
            one["estimate_min"] += j["estimate_min"]
            one["estimate_source"] = min(one["estimate_source"], j["estimate_source"], key=WEAKEST.index)
    for j in seen.values():
        j["name"] += f" ({j['runs']} runs in turn)"
    return out


def long_test_jobs(reader, points, resources, max_jobs, measured=None):
    """The long test: a run of up to training.long_test.max_jobs jobs, each at its time limit, so it
    reserves max_jobs x the limit at most; its estimate, preflight's over its epochs where preflight
    measured a step rate and the data's manifest gives the images, else that reserve."""
    own = reader.config["training"]["long_test"]["time_min"]
    out = []
    for p in points:
        one = reader.job("long test", f"{p['run_dir']}/summary.json", resources)
        one = {
            **one,
            "name": f"{p['system']}/accuracy/{Path(p['run_dir']).name} (up to {max_jobs} jobs)",
            "time_min": one["time_min"] * max_jobs,
            "estimate_min": one["time_min"] * max_jobs,
            "up_to_jobs": max_jobs,
            "limit_key": "training.long_test.time_min" if own else f"systems.{p['system']}.time_min",
        }
        # spread over its jobs, each holding one epoch at least (it saves once an epoch)
        split = max(1, min(max_jobs, math.floor(reader.config["training"]["long_test"]["epochs"])))
        one = preflight_share(one, measured, p, "long", split)
        out.append(estimated(one, one.get("preflight_min"), PREFLIGHT))
    return out


def measured_checks(jobs, measured):
    """Preflight's own jobs: each estimated by its last run (its result's start and end) where one
    ran, against systems.<name>.time_min, their limit."""
    out = []
    for j in jobs:
        j = {**j, "limit_key": f"systems.{j['system']}.time_min", "limit_unestimated": "it has not run yet"}
        took = measured.took.get(j["outputs"][0]) if measured else None
        if took is not None:
            j = {**estimated(j, took, MEASURED), "limit_estimate_min": took}
        out.append(j)
    return out


def targets_only_price(argv, rule_names):
    """Whether this invocation asks for the price alone (its budget is then not enforced): of the
    command line's words that name a rule, `price` is the only one. Snakemake does not tell a
    Snakefile its targets while it is parsed, so its command line is read."""
    asked = set(argv[1:]) & set(rule_names)
    return asked == {"price"}


def done(jobs, exists):
    """Each job marked done where every output it writes exists already (exists: os.path.exists)."""
    return [{**j, "done": all(exists(o) for o in j["outputs"])} for j in jobs]


def _hours(jobs, what, minutes):
    return sum(j[what] * (j[minutes] or 0) for j in jobs if j["gpu_job"]) / 60


def summary(jobs):
    """The figures of the price: jobs by stage, the GPU jobs (a GPU or a whole node) by node count,
    the largest allocation, node- and GPU-hours reserved at the time limits and estimated; the CPU
    jobs counted apart; jobs without a time limit (the partition's default) counted, not priced."""
    by_stage, by_nodes = {}, {}
    gpu = [j for j in jobs if j["gpu_job"]]
    for j in jobs:
        by_stage[j["stage"]] = by_stage.get(j["stage"], 0) + 1
    for j in gpu:
        by_nodes[j["nodes"]] = by_nodes.get(j["nodes"], 0) + 1
    largest = max(gpu, key=lambda j: (j["nodes"], j["gpus"]), default=None)
    left = [j for j in jobs if not j.get("done")]
    return {
        "jobs": len(jobs),
        "gpu_jobs": len(gpu),
        "cpu_jobs": len(jobs) - len(gpu),
        "by_stage": by_stage,
        "by_nodes": dict(sorted(by_nodes.items())),
        "largest": {"name": largest["name"], "nodes": largest["nodes"], "gpus": largest["gpus"]} if largest else None,
        "node_hours_reserved": _hours(jobs, "nodes", "time_min"),
        "gpu_hours_reserved": _hours(jobs, "gpus", "time_min"),
        "node_hours_estimated": _hours(jobs, "nodes", "estimate_min"),
        "gpu_hours_estimated": _hours(jobs, "gpus", "estimate_min"),
        "no_time_limit": [j["name"] for j in gpu if not j["time_min"]],
        "to_run": {"jobs": len(left), "gpu_hours_reserved": _hours(left, "gpus", "time_min")},
        "estimate_sources": {
            s: sum(1 for j in gpu if j["estimate_source"] == s)
            for s in dict.fromkeys(j["estimate_source"] for j in gpu)
        },
    }


def _ceil_to(minutes, step=5):
    return max(step, step * math.ceil(minutes / step))


def time_limits(jobs):
    """Each time limit's key against preflight's estimate of the longest job's share under it (a
    run's, or a long-test job's): {key: {limit, estimate_min, longest, suggested, long, unestimated:
    [(job, why)]}}; long where the limit is LONG_LIMIT times that estimate or more."""
    rows = {}
    for j in jobs:
        key = j.get("limit_key")
        if not key:
            continue
        limit = j["time_min"] / j.get("runs", 1) / j.get("up_to_jobs", 1)
        row = rows.setdefault(key, {"limit": limit, "estimate_min": None, "longest": "", "unestimated": []})
        share = j.get("limit_estimate_min")
        if share is None:
            row["unestimated"].append((j["name"], j.get("limit_unestimated") or "not estimated"))
        elif row["estimate_min"] is None or share > row["estimate_min"]:
            row.update(estimate_min=share, longest=j["name"])
    for row in rows.values():
        e = row["estimate_min"]
        row["suggested"] = _ceil_to(SUGGEST_FACTOR * e) if e else None
        row["long"] = bool(e) and row["limit"] >= LONG_LIMIT * e
    return rows


def unmeasured(jobs, why):
    """Jobs under their system's time limit that nothing of preflight's estimates (the interconnect
    measurement): a suggestion for that limit does not cover them, and says so."""
    return [{**j, "limit_key": f"systems.{j['system']}.time_min", "limit_unestimated": why} for j in jobs]


def costliest(jobs, n=5):
    return sorted((j for j in jobs if j["gpu_job"]), key=lambda j: -j["gpus"] * (j["time_min"] or 0))[:n]


def check_budget(jobs, budget):
    """A plan whose GPU-hours reserved exceed config budget_gpu_hours is refused, naming the jobs
    that cost most (None or 0: no budget)."""
    if not budget:
        return
    s = summary(jobs)
    if s["gpu_hours_reserved"] <= budget:
        return
    top = "; ".join(f"{j['name']} {j['gpus'] * (j['time_min'] or 0) / 60:,.0f}" for j in costliest(jobs))
    raise ConfigProblem(
        f"config budget_gpu_hours = {budget}: the plan reserves {s['gpu_hours_reserved']:,.0f} GPU-hours at its "
        f"time limits ({s['gpu_jobs']} GPU jobs of {s['jobs']}; `snakemake price` lists them). The costliest, "
        f"GPU-hours: {top}. Fix: fewer points (training.gpus, frameworks, precisions, repeats; inference.models, "
        f"throughput.batch_sizes), shorter time limits (systems.<name>.time_min, the profile's runtime), or a "
        f"larger budget"
    )


def _limits_lines(jobs, preflight_found):
    """The time limits against what preflight measured (time_limits), or why nothing is estimated."""
    lines = ["## Time limits and what preflight measured", ""]
    if not preflight_found:
        return lines + [
            "No preflight result yet (`snakemake preflight` writes them under results/preflight/): nothing is "
            "estimated from it.",
            "",
        ]
    lines += [
        f"Preflight's estimate of a run: its first kernel, then its steps at the synthetic step rate its input check "
        f"timed (per GPU, on one node); of a preflight check: its last run. Suggested: {SUGGEST_FACTOR} x the "
        f"longest estimate, in 5 minutes.",
        "",
        "| time limit | a job's limit | preflight's estimate of the longest | suggested | |",
        "|---|---|---|---|---|",
    ]
    for key, row in time_limits(jobs).items():
        left = row["unestimated"]
        if row["estimate_min"] is None:
            lines.append(f"| `{key}` | {row['limit']:,.0f} min | not estimated: {left[0][1]} | | |")
            continue
        warn = f"the limit is {row['limit'] / row['estimate_min']:,.0f}x the estimate" if row["long"] else ""
        but = f" (not for the {len(left)} job(s) not estimated, e.g. {left[0][0]}: {left[0][1]})" if left else ""
        lines.append(
            f"| `{key}` | {row['limit']:,.0f} min | {row['estimate_min']:,.1f} min ({row['longest']}) | "
            f"{row['suggested']} min{but} | {warn} |"
        )
    return lines + [""]


def markdown(jobs, preflight_found=0):
    s = summary(jobs)
    lines = [
        "# The sweep's price, before it is submitted",
        "",
        f"{s['jobs']} SLURM jobs, those `snakemake -n all` lists where nothing has run yet "
        f"({s['to_run']['jobs']} of them still to run, reserving {s['to_run']['gpu_hours_reserved']:,.1f} GPU-hours; "
        f"the others' outputs exist): {s['gpu_jobs']} hold GPUs or whole nodes, {s['cpu_jobs']} are CPU jobs "
        "(no GPU, the node shared), counted in no hours. A long-test run counts once, reserving its most jobs; a "
        "point's repeats that run in turn in one job count once, reserving the sum of their time limits. Reserved: "
        "at each job's time limit, an exclusive job charged all of its nodes' GPUs. Estimated: "
        + (", ".join(f"{n} from {src}" for src, n in s["estimate_sources"].items()) or "nothing")
        + ".",
        "",
        "| | |",
        "|---|---|",
        "| jobs by stage | " + ", ".join(f"{k}: {v}" for k, v in s["by_stage"].items()) + " |",
        "| GPU jobs by node count | " + ", ".join(f"{k} node(s): {v}" for k, v in s["by_nodes"].items()) + " |",
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
    ]
    if s["no_time_limit"]:
        lines += [
            f"Not priced: {len(s['no_time_limit'])} GPU job(s) without a time limit (the profile's default-resources "
            f"has no runtime; SLURM gives them the partition's default): {', '.join(s['no_time_limit'][:5])}.",
            "",
        ]
    lines += _limits_lines(jobs, preflight_found)
    lines += ["The costliest jobs (GPU-hours reserved):", ""]
    lines += [
        f"- {j['name']}: {j['gpus'] * j['time_min'] / 60:,.1f}" for j in costliest(jobs) if j["gpus"] and j["time_min"]
    ]
    return "\n".join(lines) + "\n"


def write(jobs, md_path, json_path, log_path=None, preflight_found=0):
    """The price as results/price.md and price.json; printed, and into the rule's log."""
    limits = time_limits(jobs)
    Path(json_path).write_text(json.dumps({"summary": summary(jobs), "time_limits": limits, "jobs": jobs}, indent=1))
    text = markdown(jobs, preflight_found)
    Path(md_path).write_text(text)
    if log_path:
        Path(log_path).write_text(text)
    sys.stdout.write(text)
