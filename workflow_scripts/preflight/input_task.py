"""The decode threads of the input check: once on the pair's first node, in the framework's
interpreter (started by preflight_job through the launcher, one task a node, as the node checks):

    python -m workflow_scripts.preflight.input_task --framework pytorch --settings JSON --out FILE

For each real-data input path of the sweep for this framework (settings["inputs"]) it records the
decode threads a rank gets at each number of ranks a node of settings["ranks_per_node"] (the
trainers' thread rules on a rank's share of this node's CPUs, cluster/cpus.py), and whether the path
decodes on the CPU: common/input_bound.py estimates from them the check's real-data rate at the
sweep's other numbers of ranks a node.
"""

import argparse
import dataclasses
import json
import os

from ..cluster import cpus
from ..cluster.rank_env import detect
from ..common import frameworks
from ..common.atomic import write_json
from ..common.input_bound import cpu_decoding
from .owners import decode_threads


def rank_share(launch, ranks, allowed=None, node_cpus=None, env=None, root=cpus.CPU_ROOT):
    """The CPUs one of `ranks` ranks of this node gets, from this process's (cluster/cpus.py's rule:
    its own set where SLURM binds each task, else the node's divided among the ranks; root: the CPUs'
    sysfs, where their cores are read)."""
    launch = dataclasses.replace(launch, local_size=ranks)
    return cpus.of(launch, env=env, root=root, allowed=allowed, node_cpus=node_cpus)


def threads_at(framework, path, settings, launch, **where):
    """{ranks a node: the decode threads a rank gets} for each number of ranks a node of settings."""
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


def path_threads(framework, path, settings, launch, **where):
    """One input path's record: its threads at each number of ranks a node, and whether more of them
    decode more (PyTorch's DALI decoder auto as the trainer resolves it for the check's own run, at
    the fewest ranks a node)."""
    decoder = settings["decoder"]
    if framework == "pytorch" and decoder == "auto":
        from ..train.pytorch_options import dali_decoder

        decoder = dali_decoder(decoder, rank_share(launch, min(settings["ranks_per_node"]), **where).per_rank)
    return {
        "threads_at": threads_at(framework, path, settings, launch, **where),
        "cpu_decoding": cpu_decoding(framework, path, decoder, settings["device"]),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--framework", required=True, choices=frameworks.NAMES)
    ap.add_argument("--settings", required=True, help="JSON: the input check's settings (plan/input_plan.py)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    settings = json.loads(a.settings)
    launch = detect()
    inputs = {p: path_threads(a.framework, p, settings, launch) for p in settings["inputs"]}
    write_json(a.out, {"node": launch.hostname or os.uname().nodename, "inputs": inputs})


if __name__ == "__main__":
    main()
