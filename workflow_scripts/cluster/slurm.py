"""What the pipeline asks SLURM itself: the nodes of a job, what a partition can hold and which GPU
types it has (checked when the workflow is parsed), and why submitted jobs are still waiting.

    python -m workflow_scripts.cluster.slurm pending     # this user's waiting jobs, with SLURM's reason,
                                                        # and the sweep's failed runs with their causes
"""

import argparse
import functools
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

from ..common import failed_runs
from .rank_env import expand_nodelist


def _run(cmd, timeout=30):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True).stdout


def job_hosts(job_id):
    """The nodes of a job in allocation order. Read from squeue, because Snakemake's job step
    removes SLURM_JOB_NODELIST from the environment of a rule's shell."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or _run(["squeue", "-h", "-j", str(job_id), "-o", "%N"]).strip()
    return expand_nodelist(nodelist)


@dataclass
class Node:
    name: str
    cpus: int
    memory_mb: int
    gpus: int
    state: str
    gpu_types: tuple = ()  # the GRES types of its GPUs ('gpu:v100:4' -> v100); none where untyped ('gpu:4')
    gres: str = ""  # sinfo's GRES column as it is


def _gpus(gres):
    """GPUs in sinfo's GRES column: 'gpu:4', 'gpu:v100:4(S:0-1)', 'gpu:a:2,gpu:b:2' -> count."""
    return sum(int(m.group(1)) for m in re.finditer(r"gpu(?::[^:,()]+)?:(\d+)", gres or ""))


def _gpu_types(gres):
    """The types in sinfo's GRES column: 'gpu:v100:4(S:0-1)' -> ('v100',), 'gpu:4' -> ()."""
    return tuple(dict.fromkeys(m.group(1) for m in re.finditer(r"gpu:([^:,()]+):\d+", gres or "")))


@functools.cache  # one sinfo per partition, however many sweep points use it
def partition_nodes(partition):
    """The nodes of a partition, or None when this machine has no sinfo (not a cluster)."""
    if not shutil.which("sinfo"):
        return None
    try:
        out = _run(["sinfo", "-h", "-N", "-p", partition, "-o", "%N|%c|%m|%G|%T"])
    except (OSError, subprocess.SubprocessError) as exc:
        # No controller to ask (a laptop with the client installed, a dry run): sbatch will say.
        print(f"dlscale: could not check partition {partition!r} with sinfo ({exc}); not checked", file=sys.stderr)
        return None
    nodes = {}
    for line in out.splitlines():
        name, cpus, mem, gres, state = line.split("|")
        nodes[name] = Node(
            name, int(cpus.rstrip("+")), int(re.sub(r"\D", "", mem) or 0), _gpus(gres), state, _gpu_types(gres), gres
        )
    return tuple(nodes.values())


UNUSABLE = ("drain", "down", "fail", "maint", "reserved", "inval")  # sinfo %T states no job starts on now


def parse_time_limit(text):
    """sinfo's time limit (%l: 'infinite', 'UNLIMITED', '30:00', '12:00:00', '1-12:00:00') -> minutes,
    None for no limit or an answer it does not read."""
    text = text.strip()
    if not text or text.lower() in ("infinite", "unlimited", "n/a"):
        return None
    days, _, rest = text.rpartition("-")
    try:
        parts = [int(x) for x in rest.split(":")]
        day = int(days) if days else 0
    except ValueError:
        return None
    if days:  # days-hours[:minutes[:seconds]]
        h, m, sec = (parts + [0, 0])[:3]
    else:  # minutes, minutes:seconds, hours:minutes:seconds
        h, m, sec = {1: (0, parts[0], 0), 2: (0, *parts)}.get(len(parts), tuple(parts[:3]))
    return day * 1440 + h * 60 + m + (1 if sec else 0)


@functools.cache
def partition_max_minutes(partition):
    """A partition's MaxTime in minutes (None: no limit, or no sinfo to ask)."""
    if not shutil.which("sinfo"):
        return None
    try:
        out = _run(["sinfo", "-h", "-p", partition, "-o", "%l"])
    except (OSError, subprocess.SubprocessError):
        return None
    limits = [parse_time_limit(line) for line in out.splitlines() if line.strip()]
    known = [x for x in limits if x is not None]
    return max(known) if known and len(known) == len(limits) else None


def time_problem(partition, minutes, key):
    """Why a job of `minutes` could never start in `partition`: its MaxTime is shorter."""
    limit = partition_max_minutes(partition)
    if limit is None or minutes <= limit:
        return None
    return (
        f"config {key} = {minutes}: partition {partition!r} allows at most {limit} minutes a job (sinfo -p "
        f"{partition} -o %l), so SLURM would never start it. Fix: set {key} to {limit} or less"
    )


def placement_problem(partition, nodes, per_node, cpus_per_task, gpus_per_node, mem_mb, now=True):
    """Why `nodes` nodes of `per_node` tasks could never start in `partition` (None if they can,
    or if there is no sinfo to ask). A job SLURM can never place waits in the queue forever.
    now=False counts the nodes whatever their state (drained or down ones too): whether the
    partition could ever hold it, rather than whether it can now."""
    found = partition_nodes(partition)
    if found is None:
        return None
    if not found:
        return f"partition {partition!r} does not exist or has no nodes (sinfo -p {partition})"
    fit = [
        n
        for n in found
        if n.cpus >= per_node * max(cpus_per_task, 1)
        and n.gpus >= gpus_per_node
        and (not mem_mb or n.memory_mb >= mem_mb)
        and (not now or not n.state.lower().startswith(UNUSABLE))
    ]
    if len(fit) < nodes:
        return (
            f"partition {partition!r} has {len(fit)} usable node(s) with {per_node * max(cpus_per_task, 1)} CPUs"
            f"{f', {gpus_per_node} GPUs' if gpus_per_node else ''}{f', {mem_mb} MB' if mem_mb else ''} each; "
            f"the run needs {nodes} (sinfo -N -p {partition}: "
            + ", ".join(f"{n.name} {n.cpus} CPUs {n.gpus} GPUs {n.memory_mb} MB {n.state}" for n in found)
            + ")"
        )
    return None


def gpu_type_problem(partition, gpu_type):
    """Why a GPU request of GRES type `gpu_type` could never be met in `partition` (None if one of
    its nodes has GPUs of that type, or if there is no sinfo or no such partition to ask: then
    placement_problem says so, or nothing is checked). SLURM would refuse the job at sbatch, or it
    would wait for ever."""
    found = partition_nodes(partition)
    if not found or not gpu_type:
        return None
    types = list(dict.fromkeys(t for n in found for t in n.gpu_types))
    if gpu_type.lower() in (t.lower() for t in types):
        return None
    listed = ", ".join(types) if types else "none (GRES: " + ", ".join(dict.fromkeys(n.gres for n in found)) + ")"
    return (
        f"partition {partition!r} has no GPUs of GRES type {gpu_type!r}; the GPU types sinfo lists for it "
        f"(sinfo -N -p {partition} -o %G) are: {listed}"
    )


def job_sharing(job_id):
    """SLURM's own word on whether a job holds its nodes alone: {job, oversubscribe, exclusive}
    from `scontrol show job` (OverSubscribe=NO is sbatch --exclusive; OK, YES, USER, MCS let other
    jobs onto its nodes), or None where scontrol cannot say."""
    try:
        out = _run(["scontrol", "show", "job", "-o", str(job_id)])
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"\bOverSubscribe=(\S+)", out)
    if not m:
        return None
    return {"job": str(job_id), "oversubscribe": m.group(1), "exclusive": m.group(1) == "NO"}


def pending(user=None):
    """[(job id, name, comment, state, reason)] of the user's jobs that have not started."""
    out = _run(
        ["squeue", "-h", "-u", user or os.environ.get("USER") or "root", "-t", "PENDING", "-o", "%i|%j|%k|%T|%r"]
    )
    return [tuple(line.split("|", 4)) for line in out.splitlines() if line.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("pending",))
    ap.add_argument("--user", default=None)
    ap.add_argument("--results", default="results", help="config results_dir: its failed runs are listed too")
    a = ap.parse_args()
    runs = failed_runs.failed_runs(a.results)
    if runs:
        print(f"failed runs ({len(runs)}; `python -m workflow_scripts.common.failed_runs --retry` readies them):")
        print("\n".join(failed_runs.lines(runs)))
    try:
        rows = pending(a.user)
    except subprocess.CalledProcessError as exc:  # no controller to ask: squeue's own words, not a traceback
        said = (exc.stderr or "").strip() or (exc.stdout or "").strip() or f"exited with status {exc.returncode}"
        sys.exit(f"squeue failed: {said}")
    except subprocess.TimeoutExpired as exc:
        sys.exit(f"squeue did not answer in {exc.timeout:g} s: is the SLURM controller reachable?")
    except OSError as exc:
        sys.exit(f"squeue could not be run ({exc}): not on a SLURM login node?")
    if not rows:
        print("no pending jobs")
    for job, name, comment, state, reason in rows:
        # Snakemake's SLURM plugin puts the rule and wildcards in the job comment.
        print(f"{job}\t{comment or name}\t{state}\treason: {reason}")


if __name__ == "__main__":
    main()
