"""What the training job adds to a finished run's summary once every rank has exited (train/training_job.py):
whether anything else used its nodes in its timed window (cluster/neighbours.py), the GPUs' own
state in that window (clock limiters, Xid errors), SLURM's word on whether the job held its nodes
alone, the page-cache clearing it chose and why, and when the job ran. Reads only the run
directory's files, so it also serves a run directory copied elsewhere."""

import csv
import json
from pathlib import Path

from ..cluster import nccl_log, neighbours
from ..common.atomic import write_json

# NVML's clocks event reasons (nvmlClocksEventReason*, formerly ClocksThrottleReason*), by bit.
LIMITERS = {
    0x1: "idle",
    0x2: "applications clocks setting",
    0x4: "power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "power brake",
    0x100: "display clock setting",
}
# Limiters that mean the GPU ran slower than it would have on its own: heat, a brake, a fault.
# (A power cap under full load is how a busy GPU normally runs; it is recorded, not flagged.)
SLOWED = {"hardware slowdown", "software thermal slowdown", "hardware thermal slowdown", "power brake"}


def _jsonl(path):
    out = []
    for line in Path(path).read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:  # a line cut short by a killed rank
            continue
    return out


def timed_window(run_dir, summary):
    """(start, end) in wall-clock seconds of what images/s (or the long test's time) counts: the
    timed steps; in mode accuracy this job's, from its first step to its last (a resumed long test's
    earlier jobs are judged each in its own job: job_evidence)."""
    steps = _jsonl(Path(run_dir) / "steps.jsonl")
    steps = [s for s in steps if "wall_end" in s]
    if not steps:
        return None
    if summary.get("args", {}).get("mode") == "accuracy":
        return steps[0]["wall_end"] - steps[0]["wall_s"], steps[-1]["wall_end"]
    timed = [s for s in steps if s["phase"] == "timed"]
    if not timed:
        return None
    return timed[0]["wall_end"] - timed[0]["wall_s"], timed[-1]["wall_end"]


def _node_of(path, prefix):
    return path.name[len(prefix) : -len(path.suffix)]


def gpu_state(run_dir, start, end):
    """Per node and GPU over the window: the share of samples each clock limiter was on, and the
    Xid errors NVML reported; a note naming what slowed a GPU (heat, a brake, a fault)."""
    state, notes = {}, []
    for meta_path in sorted(Path(run_dir).glob("telemetry.*.json")):
        node = _node_of(meta_path, "telemetry.")
        meta = json.loads(meta_path.read_text())
        csv_path = meta_path.with_suffix(".csv")
        if not csv_path.exists():
            continue
        counts = {}
        with open(csv_path, newline="") as f:
            for row in csv.DictReader(f):
                if row["metric"] != "gpu_clock_limiters":
                    continue
                t = meta["wall_origin"] + float(row["time_s"])
                if not start < t <= end + meta.get("interval", 1.0):
                    continue
                bits = int(float(row["value"]))
                gpu = counts.setdefault(row["device"], {"samples": 0})
                gpu["samples"] += 1
                for bit, name in LIMITERS.items():
                    if bits & bit:
                        gpu[name] = gpu.get(name, 0) + 1
        for gpu, c in counts.items():
            n = c.pop("samples")
            shares = {name: round(k / n, 3) for name, k in sorted(c.items())}
            state[f"{node}/{gpu}"] = {"samples": n, "limiters": shares}
            slowed = sorted(set(shares) & SLOWED)
            if slowed:
                notes.append(f"{node} {gpu}: {', '.join(f'{s} in {shares[s]:.0%} of samples' for s in slowed)}")
    xids = []
    for path in sorted(Path(run_dir).glob("neighbours.*.jsonl")):
        node = _node_of(path, "neighbours.")
        for line in _jsonl(path):
            for x in line.get("xid", []):
                if start < line["t"] <= end + 60:
                    xids.append({"node": node, **x})
    notes += [f"{x['node']} gpu{x['gpu']}: Xid {x['xid']}" for x in xids]
    # the largest share of a GPU's samples any slowing limiter was on: what results/guards.py judges
    slowed = max((v for g in state.values() for k, v in g["limiters"].items() if k in SLOWED), default=0.0)
    return {"gpus": state, "xid": xids, "slowed_share": slowed, "note": "; ".join(notes)}


def isolation(run_dir, summary):
    """neighbours.evidence over the run's timed window, from every node's samples."""
    run_dir = Path(run_dir)
    window = timed_window(run_dir, summary)
    lines = {_node_of(p, "neighbours."): _jsonl(p) for p in sorted(run_dir.glob("neighbours.*.jsonl"))}
    if window is None:
        return {"isolated": None, "why": "no timed window in steps.jsonl", "rule": neighbours.RULE, "nodes": {}}
    nodes = summary.get("provenance", {}).get("nodes", {})
    cpus = {n: facts.get("cpus") for n, facts in nodes.items()}
    intervals = [json.loads(p.read_text()).get("interval", 1.0) for p in run_dir.glob("telemetry.*.json")]
    ev = neighbours.evidence(lines, *window, cpus, max(intervals, default=1.0))
    blind = {node: ln["nvml_unavailable"] for node, ls in lines.items() for ln in ls if "nvml_unavailable" in ln}
    if summary.get("device_type") == "gpu" and blind and ev["isolated"] is not False:
        # Other processes on the GPUs cannot be seen without NVML: the GPU half of the rule is unjudged.
        ev["isolated"] = None
        ev["why"] = "; ".join(
            f"{node}: NVML unavailable ({why}): other processes on its GPUs cannot be seen (install nvidia-ml-py)"
            for node, why in sorted(blind.items())
        )
    return neighbours.slurm_half(ev, summary.get("slurm"), lines)


def job_summary(run_dir, mode, device_type, slurm):
    """What isolation() reads of a summary, for a job that wrote none (a long test stopped to be
    resumed): the nodes' CPUs from their provenance files."""
    nodes = {}
    for p in sorted(Path(run_dir).glob("provenance.*.json")):
        try:
            nodes[_node_of(p, "provenance.")] = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
    return {"args": {"mode": mode}, "provenance": {"nodes": nodes}, "device_type": device_type, "slurm": slurm}


def jobs_file(run_dir):
    """Beside the run directory (which each attempt empties): the long test's jobs' isolation, one line each."""
    run_dir = Path(run_dir)
    return run_dir.parent / f".{run_dir.name}.jobs.jsonl"


def keep_job_evidence(run_dir, summary, attempt):
    """This job's isolation over its own steps, kept for the run's last job to judge all of them."""
    ev = isolation(run_dir, summary)
    with open(jobs_file(run_dir), "a") as f:
        f.write(json.dumps({"attempt": attempt, "isolated": ev["isolated"], "why": ev["why"]}) + "\n")


def across_jobs(ev, run_dir):
    """The last job's isolation judged with every earlier job's of the same run: false where any job
    was not isolated, unknown where any is unknown, true only where every one was."""
    earlier = _jsonl(jobs_file(run_dir)) if jobs_file(run_dir).exists() else []
    if not earlier:
        return ev
    every = [*earlier, {"attempt": "last", "isolated": ev["isolated"], "why": ev["why"]}]
    verdicts = [j["isolated"] for j in every]
    ev["isolated"] = False if False in verdicts else (None if None in verdicts else True)
    ev["why"] = "; ".join(f"job {j['attempt']}: {j['why']}" for j in every)
    ev["jobs"] = every
    return ev


def nccl(run_dir, summary):
    """What NCCL ran over (nccl_log.read_logs of the ranks' logs; None where no NCCL ran: a CPU, one
    GPU), its table cell, and the problem where it used sockets between nodes that have InfiniBand."""
    parsed = nccl_log.read_logs(run_dir)
    if parsed is None:
        return None
    env = summary.get("nccl_env") or {}
    nodes = summary.get("provenance", {}).get("nodes", {})
    ports = [{**port, "node": node} for node, facts in nodes.items() for port in facts.get("infiniband") or []]
    return {
        **parsed,
        "described": nccl_log.describe(parsed, env),
        "problem": nccl_log.transport_problem(parsed, summary.get("num_nodes", 1), ports, env),
    }


def add_to_summary(run_dir, extra):
    """The run's summary.json with `extra` and the evidence above, rewritten whole; a failed run's
    record is left as it is."""
    path = Path(run_dir) / "summary.json"
    if not path.exists():
        return None
    summary = json.loads(path.read_text())
    if summary.get("status") != "ok":
        return summary
    summary.update(extra)
    summary["nccl"] = nccl(run_dir, summary)
    summary["isolation"] = isolation(run_dir, summary)
    if summary.get("args", {}).get("mode") == "accuracy":
        summary["isolation"] = across_jobs(summary["isolation"], run_dir)
    window = summary["isolation"].get("window")
    summary["gpu_state"] = gpu_state(run_dir, window["start"], window["end"]) if window else None
    write_json(path, summary)
    return summary
