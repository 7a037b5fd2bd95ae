"""The input capacity of a preflight data check: once on the pair's first node, in the framework's
interpreter (started by preflight_job through the launcher, one task a node, as the node checks):

    python -m workflow_scripts.preflight.input_task --framework pytorch --data DIR --settings JSON --out FILE

Each real-data input path of the sweep for this framework (settings["inputs"]) is timed alone for
settings["seconds"] by train/input_capacity.py (the trainer's own input, no model), with the decode
threads one rank gets when the node runs the sweep's largest number of ranks a node (the trainers'
thread rules on a rank's share of this node's CPUs, cluster/cpus.py), and the threads a rank gets at
each other number of ranks a node of the sweep are recorded beside it (common/input_bound.py scales
the capacity by them). A path whose measurement fails is recorded with its error: the check then
says so, and the sweep runs as it would have.
"""

import argparse
import dataclasses
import json
import os

from ..cluster import cpus
from ..cluster.rank_env import detect
from ..common.atomic import write_json
from ..common.input_bound import cpu_decoding
from .seams import decode_threads

# Batches taken before the timing; input_capacity raises it to what the path prepares ahead.
WARMUP_BATCHES = 2


def rank_share(launch, ranks, allowed=None, node_cpus=None, env=None, root=cpus.CPU_ROOT):
    """The CPUs one of `ranks` ranks of this node gets, from this process's (cluster/cpus.py's rule:
    its own set where SLURM binds each task, else the node's divided among the ranks; root: the CPUs'
    sysfs, where their cores are read)."""
    launch = dataclasses.replace(launch, local_size=ranks)
    return cpus.of(launch, env=env, root=root, allowed=allowed, node_cpus=node_cpus)


def threads_at(framework, path, settings, launch, **where):
    """{ranks a node: the decode threads a rank gets} for each number of ranks a node of the sweep."""
    gpu = settings["device"] == "gpu"
    return {
        str(r): decode_threads(
            framework,
            path,
            rank_share(launch, r, **where),
            gpu,
            settings["decode_threads"],
            settings["loader_workers"],
        )
        for r in sorted(set(settings["ranks_per_node"]))
    }


def measure_path(framework, data, path, settings, launch):
    """One input path's record: the measurement at the largest number of ranks a node, or its error."""
    most = max(settings["ranks_per_node"])
    at = threads_at(framework, path, settings, launch)
    entry = {
        "ranks_per_node": most,
        "threads_at": at,
        "decoder_asked": settings["decoder"] if path == "dali" else "",
        "cpu_decoding": cpu_decoding(framework, path, settings["decoder"], settings["device"]),
    }
    try:
        from ..train.input_capacity import measure  # the framework's environment: this task's own

        result = measure(
            framework,
            data,
            input=path,
            decoder=settings["decoder"],
            batch=settings["batch"],
            image_size=settings["image_size"],
            threads=at[str(most)],
            seconds=settings["seconds"],
            warmup_batches=WARMUP_BATCHES,
            device=settings["device"],
        )
    except Exception as exc:  # a path that cannot start (no DALI, no GPU decoder) is the check's answer
        return {**entry, "images_per_s": None, "threads": at[str(most)], "error": f"{type(exc).__name__}: {exc}"}
    keep = (
        "images_per_s",
        "images_per_s_per_core",
        "threads",
        "cpus",
        "physical_cores",
        "batch_time_cv",
        "batches_timed",
        "seconds_timed",
        "batch",
        "image_size",
        "device",
        "decoder",
        "input",
        "host",
    )
    return {**entry, **{k: result.get(k) for k in keep}, "error": ""}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--framework", required=True, choices=("tensorflow", "mxnet", "pytorch"))
    ap.add_argument("--data", required=True, help="the format's converted copy the runs read")
    ap.add_argument("--settings", required=True, help="JSON: the sweep's input settings (plan/input_plan.py)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    settings = json.loads(a.settings)
    launch = detect()
    inputs = {p: measure_path(a.framework, a.data, p, settings, launch) for p in settings["inputs"]}
    write_json(a.out, {"node": launch.hostname or os.uname().nodename, "inputs": inputs})


if __name__ == "__main__":
    main()
