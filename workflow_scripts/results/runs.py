"""One record per sweep point, read from the run's own outputs: what was measured, how, where,
and from which code and settings. A point whose run failed, or that has no output, is kept, with
why, so no table silently drops it."""

import json
from pathlib import Path

import pandas as pd

from ..cluster import netif
from ..common import frameworks
from ..common.errors import StageError
from ..common.input_bound import wait_share
from ..interconnect.efficiency_bounds import gradient_bytes
from . import guards

# Settings that legitimately differ between the points of one sweep; everything else in a run's
# arguments must be the same for its numbers to be comparable.
PER_POINT = {"precision", "batch_per_gpu", "data", "decode_threads", "out"}
# the package a framework's version is recorded under, where it is not the framework's name
VERSION_KEY = {f.name: f.package for f in frameworks.REGISTRY.values() if f.package != f.name}


def _node_facts(summary):
    nodes = summary.get("provenance", {}).get("nodes", {})
    return nodes, next(iter(nodes.values()), {})


def _device(facts):
    gpus = [g for g in facts.get("gpus") or [] if g.get("name")]  # not one NVML could not open
    if gpus:
        return f"{len(gpus)}x {gpus[0]['name']}"
    return f"CPU: {facts.get('cpu', '?')}" if facts else ""


def outcome(point):
    """(row, summary) of one point: row = the point with its status and why; summary = its run's
    summary.json, or None where there is nothing to read (missing, failed, or invalid)."""
    row = dict(point)
    path = Path(point["run_dir"]) / "summary.json"
    if not path.exists():
        return {**row, "status": "missing", "why": f"no {path}: the run has not completed"}, None
    s = json.loads(path.read_text())
    if s.get("status") == "failed":
        return {**row, "status": "failed", "why": f"{s['reason']} (log: {s['log']})"}, None
    ran_on = s.get("device_type") or ("cpu" if str(s.get("device", "")).lower().startswith("cpu") else "gpu")
    if point.get("gpu_request", "none") != "none" and ran_on != "gpu":
        # A CPU figure is never a GPU system's figure.
        return {
            **row,
            "status": "invalid",
            "why": f"ran on the CPU ({s.get('device')}), but system "
            f"{point['system']} requests GPUs: not a GPU figure ({path})",
        }, None
    return {**row, "status": "ok", "why": ""}, s


def provenance(summary):
    """Where and from what a run's figures came, as table columns."""
    nodes, first = _node_facts(summary)
    prov = summary.get("provenance", {})
    framework = summary.get("framework", "")
    return {
        "device": _device(first),
        "driver": first.get("driver", ""),
        "cuda_driver": first.get("cuda_driver", ""),
        "node_names": " ".join(sorted(nodes)),
        "slurm_job": summary["launch"].get("job_id", ""),
        "framework_version": summary["versions"].get(VERSION_KEY.get(framework, framework), ""),
        "settings_hash": prov.get("settings_hash", ""),
        "git_commit": prov.get("code", {}).get("commit", "")[:12],
        "_args": {k: v for k, v in summary["args"].items() if k not in PER_POINT},
    }


def evidence(s):
    """What a run ran as and beside what, from its summary (EVIDENCE, but the caveats)."""
    math, job, nccl = s.get("math") or {}, s.get("job") or {}, s.get("nccl") or {}
    return {
        # what the gradients travelled over, NCCL's own words (empty where no NCCL ran)
        "transport": nccl.get("described", ""),
        "transport_problem": nccl.get("problem") or "",
        # the sockets' interface between nodes, its link speed and any faster one up beside it
        "socket_interface": socket_text(s.get("socket_interface") or {}),
        "nccl_version": ", ".join(nccl.get("versions") or []),
        "isolated": guards.isolation_word(s),
        "isolation_why": (s.get("isolation") or {}).get("why", "the run recorded no isolation evidence"),
        "ran_as": math.get("ran_as", "not recorded"),
        # how the step ran (PyTorch: compile mode, CUDA graphs, DDP's graph); "" where not recorded
        "execution_mode": s.get("execution_mode", ""),
        "fp32_math": math.get("fp32_math", ""),
        "gpu_state": (s.get("gpu_state") or {}).get("note", ""),
        # the timed window's largest share of samples a GPU was held down (heat, a brake), and its Xids
        "gpu_slowed_share": (s.get("gpu_state") or {}).get("slowed_share"),
        "xid_errors": len((s.get("gpu_state") or {}).get("xid") or []),
        "slurm_exclusive": (s.get("slurm") or {}).get("exclusive"),
        "cache_scope": (s.get("cache_scope") or {}).get("used", ""),
        "cache_not_emptied": cache_not_emptied(s),
        # each GPU's power limit and application clocks as NVML gave them, and any below its default
        "gpu_limits": limits_text(s),
        "power_capped": power_capped(s),
        "started_at": job.get("started_at"),
        "ended_at": job.get("ended_at"),
    }


def socket_text(link):
    """e.g. "eth0 1 Gb/s; faster up: ib0 100 Gb/s"; "" where the run named no interface."""
    if not link:
        return ""
    text = f"{link['name']} {netif.gbps(link.get('speed_mbps'))}"
    faster = ", ".join(f"{n} {netif.gbps(v)}" for n, v in (link.get("faster_up") or {}).items())
    return text + (f"; faster up: {faster}" if faster else "")


def cache_not_emptied(s):
    """Why a run's reads may not have been cold, node by node, from its page-cache reports ("" where
    every node's clearing took and reached every cache): a cache of the file system's own that
    clearing does not reach (GPFS's pagepool, a FUSE daemon's, FS-Cache: cluster/mounts.py), its
    servers' (Lustre's OSS, an NFS server's), or an eviction that did not take (dataset_evicted
    false: pages still resident, or files this user may not write, whose pages mincore reports
    resident whatever happened: always so for a shared, read-only dataset)."""
    reports = s.get("page_cache") or {}
    nodes = {}
    for node, r in sorted(reports.items()):
        for why in _not_cold(r) if isinstance(r, dict) else ():
            nodes.setdefault(why, []).append(node)
    if not any(isinstance(r, dict) for r in reports.values()):
        nodes.setdefault("no page-cache report: clearing did not run before this run", [])
    return "; ".join(f"{', '.join(n) + ': ' if n else ''}{why}" for why, n in nodes.items())


def _not_cold(report):
    """What of one node's page-cache report (cluster/page_cache.py) leaves its reads possibly warm."""
    out = [f"{path}: {why}" for path, why in (report.get("dataset_evicted_unverifiable") or {}).items()]
    out += [f"{path}: {why}" for path, why in (report.get("servers_cache_not_emptied") or {}).items()]
    if report.get("dataset_evicted") is False:
        after, method = report.get("after") or {}, report.get("method", "clearing")
        if after.get("unverifiable_files"):
            out.append(
                f"the eviction ({method}) is not verified: {after['unverifiable_files']} of the dataset's "
                f"{after.get('files', '?')} files are ones this user may not write, whose pages mincore reports "
                "resident whatever the cache holds (a shared, read-only dataset)"
            )
        else:
            out.append(f"{after.get('resident_bytes', '?')} bytes of the dataset still cached after {method}")
    return out


def run_gpus(s):
    """(node, GPU record of provenance.node_facts) of the GPUs a run used: those its ranks were bound
    to (gpu_binding's PCI bus ids, node by node), else every GPU NVML opened on its nodes (a run
    that recorded no binding, or a node whose binding named no bus id)."""
    nodes, _ = _node_facts(s)
    bound = {}
    for r in (s.get("gpu_binding") or {}).get("ranks") or []:
        if r.get("bus_id"):
            bound.setdefault(r.get("node"), set()).add(r["bus_id"])
    out = []
    for node, facts in sorted(nodes.items()):
        gpus = [g for g in facts.get("gpus") or [] if g.get("name")]
        mine = [g for g in gpus if g.get("bus_id") in bound.get(node, ())]
        out += [(node, g) for g in (mine or gpus)]
    return out


def power_capped(s):
    """The run's GPUs held below their default power limit ("gpu3 on n1 at 250 W of its default
    300 W", NVML's index as in the telemetry), "" where none was or NVML gave no limits."""
    capped = [
        f"gpu{g['index']} on {node} at {g['power_limit_W']:g} W of its default {g['default_power_limit_W']:g} W"
        for node, g in run_gpus(s)
        if g.get("power_limit_W") and g.get("default_power_limit_W") and g["power_limit_W"] < g["default_power_limit_W"]
    ]
    return ", ".join(capped)


def limits_text(s):
    """The run's GPUs' power limits and application clocks, each distinct setting once: "300 W
    (default 300 W), application clocks SM / memory 1312 / 877 MHz (default 1312 / 877)"; "" without
    NVML's word."""

    def clocks(c):
        return " / ".join(str(c.get(k)) for k in ("sm", "mem")) if c and any(c.values()) else None

    said = []
    for _, g in run_gpus(s):
        watts, app = g.get("power_limit_W"), clocks(g.get("app_clocks_MHz"))
        default = g.get("default_power_limit_W")
        parts = [f"{watts:g} W (default {f'{default:g}' if default else '?'} W)"] if watts is not None else []
        if app:
            parts.append(
                f"application clocks SM / memory {app} MHz (default {clocks(g.get('default_app_clocks_MHz'))})"
            )
        if parts:
            said.append(", ".join(parts))
    return "; ".join(dict.fromkeys(said))


def record(point):
    """A row for one sweep point: point = {system, framework, precision, gpus, nodes, run_dir}."""
    row, s = outcome(point)
    if s is None:
        return row
    args = s["args"]
    grad_bytes, grad_from = gradient_bytes(s, point["framework"], point["precision"])
    row = {
        **row,
        "repeat": point.get("repeat", 1),
        **evidence(s),
        "nodes": s["num_nodes"],
        "batch_per_gpu": args["batch_per_gpu"],
        "global_batch": s["global_batch"],
        "images_per_s": s["images_per_s"],
        "step_cv": s["step_images_per_s_cv"],
        # images/s over windows of steps, as the study's frameworks reported it: what "stable" judges
        "window_cv": s.get("window_images_per_s_cv"),
        "stable": s["stable"],
        "warmup_steps": s["warmup_steps"],
        "timed_steps": s["timed_steps"],
        "mode": args["mode"],
        "epochs": args["epochs"] if args["mode"] == "epochs" else None,
        "data_source": args["data_source"],
        "image_size": args["image_size"],
        **epoch_turnover(s, args),
        # the share of its timed steps rank 0 waited for its input (the input-bound caveat quotes it)
        "input_wait_share": wait_share(s),
        "gradient_bytes": grad_bytes,
        "gradient_bytes_from": grad_from,
        **provenance(s),
    }
    return {**row, **run_figures(s, point["run_dir"]), "caveats": guards.join(guards.run_caveats(row))}


def run_figures(s, run_dir):
    """The trainer's own per-run figures (its adapter's figures(): train/loop.py), as columns."""
    figures = s.get("figures") or {}
    clash = sorted(set(figures) & set(COLUMNS))
    if clash:
        raise StageError(
            f"{run_dir}/summary.json: the trainer's figures {', '.join(clash)} are named as the runs' own "
            "columns; rename them in its adapter's figures()"
        )
    return figures


def figure_columns(runs):
    """The columns of load()'s rows that trainers' figures() added, in their order."""
    return [c for c in runs.columns if c not in COLUMNS]


def epoch_turnover(s, args):
    """The training images and how many steps an epoch of them lasts (train images / global batch),
    for a steps-mode run on real data: the guards read it (results/guards.py, epoch turnover)."""
    images = s.get("train_images") or None
    real = args["data_source"] == "real" and args["mode"] == "steps" and images
    return {"train_images": images, "steps_per_epoch": images / s["global_batch"] if real else None}


# Where and with what a run ran: every table built from runs carries these.
PROVENANCE = [
    "device",
    "driver",
    "cuda_driver",
    "node_names",
    "slurm_job",
    "framework_version",
    "settings_hash",
    "git_commit",
]
# What the run ran as and beside what: the verdict guards read these (results/guards.py).
EVIDENCE = [
    "transport",
    "transport_problem",
    "socket_interface",
    "nccl_version",
    "isolated",
    "isolation_why",
    "ran_as",
    "execution_mode",
    "fp32_math",
    "gpu_state",
    "gpu_slowed_share",
    "xid_errors",
    "slurm_exclusive",
    "cache_scope",
    "cache_not_emptied",
    "gpu_limits",
    "power_capped",
    "started_at",
    "ended_at",
    # the input check, run by run (results/input_marks.py; empty where it judged none)
    "input_wait_share",
    "input_bound",
    "input_judged_by",
    "input_capacity",
    "input_demand",
    "input_check",
    "caveats",
]
# a run's batch and what it measured, in this order in every table of runs (training_tables too)
FIGURES = ["batch_per_gpu", "global_batch", "images_per_s", "step_cv", "window_cv", "stable"]
COLUMNS = [
    "system",
    "framework",
    "precision",
    "gpus",
    "input",
    "repeat",
    "nodes",
    "status",
    "why",
    "run_dir",
    *FIGURES,
    "warmup_steps",
    "timed_steps",
    "mode",
    "epochs",
    "data_source",
    "image_size",
    "train_images",
    "steps_per_epoch",
    *EVIDENCE,
    *PROVENANCE,
    "gradient_bytes",
    "gradient_bytes_from",
    "_args",
]


def load(points):
    """All sweep points (plan/sweep.py's, each with its input path and repeat), every column present
    even when no run succeeded."""
    rows = pd.DataFrame([record(p) for p in points])
    return rows.reindex(columns=COLUMNS + [c for c in rows.columns if c not in COLUMNS])


def _differing(arg_dicts):
    """Settings two of these runs hold with different values (only those all of them have:
    each framework also has options of its own)."""
    common = set.intersection(*(set(a) for a in arg_dicts))
    return sorted(k for k in common if len({json.dumps(a[k], sort_keys=True) for a in arg_dicts}) > 1)


def mixed_settings(runs):
    """A note when the table's runs were not all made with the same settings (or code): across
    all runs for the settings they share, and within each framework for all of its own."""
    ok = runs[runs.status == "ok"]
    if ok.empty:
        return []
    notes = []
    differing = set(_differing(list(ok._args)))
    for _, g in ok.groupby("framework"):
        differing |= set(_differing(list(g._args)))
    if differing:
        notes.append(
            "runs were made with different settings, so their figures are not directly comparable: "
            + ", ".join(
                f"{k} ({', '.join(sorted({json.dumps(a.get(k)) for a in ok._args}))})" for k in sorted(differing)
            )
        )
    if ok.git_commit.nunique() > 1:
        notes.append(
            f"runs come from {ok.git_commit.nunique()} different code versions: "
            + ", ".join(sorted(ok.git_commit.unique()))
        )
    return notes
