"""Which GPU each rank of a node takes: the one next to its CPUs, each rank on a GPU of its own.

srun binds each task to its own block of CPUs; taking the GPU of the task's local rank pairs them
only where GPU i happens to sit next to CPU block i. On a DGX A100 or H100 it does not (GPU 0 hangs
off the second socket, or off NUMA node 3), and a rank whose CPUs are on the other socket decodes,
stages and copies every batch across the inter-socket link. So each rank takes, among the GPUs CUDA
shows it, the one whose NUMA node holds its CPUs (os.sched_getaffinity; which GPU is which and
which CPUs are near it: gpu_identity.py).

How the ranks of a node agree. A rank knows only its own CPU set, and a rule that each rank applies
to its own set alone cannot keep two ranks off one GPU: under SLURM's default distribution
(block:cyclic) task 1 sits on the second socket, under block on the first, and which one a rank is
cannot be told from its own CPUs. Two ranks on one GPU is far worse than a GPU on the far socket
(NCCL refuses a communicator with a duplicate GPU; two trainers share one GPU's memory and time).
So the ranks of a node exchange their CPU sets, through small files in the run's folder (one
folder per node and SLURM step; the ranks of a node are one file-system client, so they see each
other's files at once), and the first rank to see all of them (or to give up waiting) computes the
whole node's assignment and publishes it with an atomic link: every rank then reads the one
published decision, so none can differ from another. The assignment is a maximum-weight matching
of ranks to GPUs (Hungarian algorithm): first the most CPUs shared between each rank and its GPU,
then, among equally good ones, the most ranks keeping their local rank's GPU (so nothing changes
where local rank already pairs well), every rank on a GPU of its own.

It falls back to the local rank's GPU, and says why in the record, where affinity cannot decide:
no CUDA driver or NVML to say which GPU CUDA index i is and which CPUs are near it, GPUs that all
have the same affinity (one NUMA node: nothing to choose), ranks that share one CPU set (no task
binding), ranks that see different GPUs, or a rank that did not report within TIMEOUT_S (the
published fallback is then the local rank for every rank, which is collision-free too).

SLURM's own `--gpu-bind=closest` / `single:1` would do the pairing in srun, but it hides the other
GPUs from each task (the GPU check expects every task to see the node's GPUs) and, with a device
cgroup per task, NCCL's direct GPU-to-GPU paths within a node; the choice here needs nothing from
the cluster.

The functions that decide (assign, decide, exchange) take plain data, so they are tested with
made-up layouts (tests/test_gpu_choice.py).
"""

import json
import os
import re
import time
import uuid
from pathlib import Path

from .gpu_identity import cpu_text, visible_gpus

FOLDER = ".gpu_choice"  # in the run's (or preflight check's) folder: <host>-<step>/rank<l>.json, decision.json
TIMEOUT_S = 120.0  # how long a rank waits for the other ranks of its node to report their CPUs
AFFINITY, LOCAL_RANK = "affinity", "local_rank"
OK, WARN = "ok", "warning"


# ---- plain data: the assignment ----------------------------------------------------------------------


def _max_weight_matching(weight):
    """Rows to distinct columns (len(rows) <= len(columns)) with the largest total weight: the
    Hungarian algorithm (O(n^2 m)) on integer weights; -> the column of each row. Deterministic."""
    n, m = len(weight), len(weight[0])
    cost = [[-w for w in row] for row in weight]
    inf = float("inf")
    u, v, p, way = [0] * (n + 1), [0] * (m + 1), [0] * (m + 1), [0] * (m + 1)
    for i in range(1, n + 1):
        p[0], j0 = i, 0
        minv, used = [inf] * (m + 1), [False] * (m + 1)
        while True:
            used[j0] = True
            i0, delta, j1 = p[j0], inf, 0
            for j in range(1, m + 1):
                if not used[j]:
                    cur = cost[i0 - 1][j - 1] - u[i0] - v[j]
                    if cur < minv[j]:
                        minv[j], way[j] = cur, j0
                    if minv[j] < delta:
                        delta, j1 = minv[j], j
            for j in range(m + 1):
                if used[j]:
                    u[p[j]] += delta
                    v[j] -= delta
                else:
                    minv[j] -= delta
            j0 = j1
            if p[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            p[j0] = p[j1]
            j0 = j1
    cols = [0] * n
    for j in range(1, m + 1):
        if p[j]:
            cols[p[j] - 1] = j - 1
    return cols


def assign(tasks, gpu_cpus):
    """The node's pairing: tasks {local rank: its CPU set}, gpu_cpus [the CPUs near CUDA GPU i] ->
    {local rank: CUDA index}, every rank on a GPU of its own. Maximizes first the CPUs a rank shares
    with its GPU's NUMA node (summed over the ranks), then the ranks that keep their local rank's GPU
    (ties: no change from today's pairing where it is as good). Needs len(tasks) <= len(gpu_cpus)."""
    ranks = sorted(tasks)
    if len(ranks) > len(gpu_cpus):
        raise ValueError(f"{len(ranks)} ranks for {len(gpu_cpus)} GPUs")
    scale = len(ranks) + 1  # one CPU more outweighs every rank keeping its local rank's GPU
    weight = [
        [len(set(tasks[r]) & set(near or ())) * scale + (1 if j == r else 0) for j, near in enumerate(gpu_cpus)]
        for r in ranks
    ]
    return dict(zip(ranks, _max_weight_matching(weight)))


def _fallback(why, status=WARN):
    return {"how": LOCAL_RANK, "why": why, "status": status, "gpus": None}


def _views(entries):
    return {json.dumps([(g.get("bus_id"), g.get("uuid")) for g in e["gpus"]]) for e in entries.values()}


def settled(entries):
    """Whether the reports so far decide the node whatever the others say: a rank that cannot tell
    its GPUs apart, or ranks that see different GPUs, make it local rank for every rank."""
    return any(e.get("problem") for e in entries.values()) or len(_views(entries)) > 1


def decide(entries, local_size):
    """The node's decision from its ranks' reports ({local rank: report}; report: 'cpus', 'gpus'
    (CUDA's GPUs in order, each with 'bus_id', 'uuid', 'cpus' (near CPUs or None)), 'problem' (why
    they could not be read, or None)): {'how': affinity | local_rank, 'why', 'status' (ok, or
    warning where a rank may sit far from its GPU), 'gpus': {local rank as text: CUDA index} (None:
    each its local rank's)}. A plain dict that survives JSON, as the ranks read it."""
    problems = "; ".join(sorted({e["problem"] for e in entries.values() if e.get("problem")}))
    if len(_views(entries)) > 1:
        return _fallback("the ranks of this node see different GPUs (a per-task CUDA_VISIBLE_DEVICES or --gpu-bind)")
    gpus = entries[min(entries)]["gpus"] if entries else []
    if len(gpus) == 1 and local_size == 1:
        return _fallback("one GPU visible: nothing to choose", OK)
    if problems:
        return _fallback(problems)
    late = [r for r in range(local_size) if r not in entries]
    if late:
        return _fallback(f"local rank(s) {', '.join(map(str, late))} did not report their CPUs")
    if len(gpus) < local_size:
        return _fallback(f"{len(gpus)} GPU(s) for {local_size} rank(s)")
    near = [g.get("cpus") for g in gpus]
    if all(n is None for n in near):
        return _fallback("no GPU's CPU affinity is known")
    if len({json.dumps(n) for n in near}) == 1:
        return _fallback(f"every GPU is as near as any other to every CPU (affinity {cpu_text(near[0])})", OK)
    tasks = {r: e["cpus"] for r, e in entries.items()}
    overlap = {r: [len(set(c) & set(n or ())) for n in near] for r, c in tasks.items()}
    if all(len(set(row)) == 1 for row in overlap.values()):
        sets = {json.dumps(sorted(c)) for c in tasks.values()}
        return _fallback(
            f"the ranks share one CPU set ({cpu_text(tasks[0])}): no task binding"
            if len(sets) == 1
            else "no rank's CPUs are nearer one GPU than another"
        )
    pairing = assign(tasks, near)
    moved = sum(1 for r, g in pairing.items() if g != r)
    far = [r for r, g in sorted(pairing.items()) if overlap[r][g] == 0]
    why = "the GPU whose NUMA node holds the rank's CPUs, each rank on its own" + (
        f" ({moved} of {local_size} rank(s) not on their local rank's GPU)" if moved else " (as local rank)"
    )
    if far:
        why += f"; local rank(s) {', '.join(map(str, far))} share no NUMA node with any free GPU"
    return {"how": AFFINITY, "why": why, "status": WARN if far else OK, "gpus": {str(r): g for r, g in pairing.items()}}


# ---- the exchange between a node's ranks --------------------------------------------------------------


def _read(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):  # not there yet, or an O_EXCL writer not done
        return None


def _write(path, obj):
    scratch = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    scratch.write_text(json.dumps(obj, sort_keys=True))
    os.replace(scratch, path)


def _publish(path, obj):
    """Create `path` holding obj unless it exists: the first writer wins, whole (a link of a
    complete file), or, where the file system has no hard links, by an exclusive create."""
    scratch = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    scratch.write_text(json.dumps(obj, sort_keys=True))
    try:
        os.link(scratch, path)
    except FileExistsError:
        pass
    except OSError:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(obj, sort_keys=True))
    finally:
        scratch.unlink(missing_ok=True)


def exchange(folder, local_rank, local_size, report, timeout_s=TIMEOUT_S, sleep=time.sleep, clock=time.monotonic):
    """Write this rank's report into `folder` (one per node and launch), wait for the node's other
    ranks' and return the node's one decision (decide): the first rank to see every report (or a
    report that settles it, or to wait timeout_s) publishes it; every rank returns the published
    one. The folder is new for each launch (the run's folder is made anew for each attempt)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    _write(folder / f"rank{local_rank}.json", {**report, "local_rank": local_rank})
    target = folder / "decision.json"
    deadline, delay = clock() + timeout_s, 0.01
    while True:
        decision = _read(target)
        if decision is not None:
            return decision
        entries = {}
        for p in folder.glob("rank*.json"):
            e = _read(p)
            if e is not None:
                entries[int(e["local_rank"])] = e
        complete = all(r in entries for r in range(local_size))
        if complete or settled(entries) or clock() >= deadline:
            decision = decide(entries, local_size)
            if decision["why"].endswith("did not report their CPUs"):
                decision["why"] += f" within {timeout_s:g} s"
            _publish(target, decision)
            continue  # read back whichever decision won
        sleep(delay)
        delay = min(0.5, delay * 2)


def folder_for(base, launch, env=None):
    """This node's exchange folder for this launch: one per host and SLURM step (srun), or per
    rendezvous port (the local launcher)."""
    env = os.environ if env is None else env
    host = re.sub(r"[^A-Za-z0-9._-]", "_", launch.hostname or os.uname().nodename)
    if "SLURM_STEP_ID" in env:
        key = f"{env.get('SLURM_JOB_ID', '')}.{env['SLURM_STEP_ID']}.{env.get('SLURM_RESTART_COUNT', '0')}"
    else:
        key = f"port{launch.master_port}"
    return Path(base) / FOLDER / f"{host}-{key}"


# ---- a rank's choice ---------------------------------------------------------------------------------


def choose(launch, base, seen=None, cpus=None, visible=None, env=None, timeout_s=TIMEOUT_S):
    """This rank's GPU: its record, {'cuda_index', 'bus_id', 'uuid', 'numa_node', 'gpu_cpus', 'cpus',
    'shared_cpus', 'how', 'why', 'status', 'identity', 'affinity'}. base: the run's (or check's)
    folder, where the node's ranks exchange their CPU sets (folder_for); seen: the GPUs the
    framework sees (a different count from the driver's falls back to local rank); cpus, visible:
    the rank's CPU set and visible_gpus()'s answer, read here when not given."""
    env = os.environ if env is None else env
    try:
        cpus = sorted(os.sched_getaffinity(0) if cpus is None else cpus)
    except (AttributeError, OSError):  # a system without sched_getaffinity
        cpus = []
    found, notes = visible_gpus(env) if visible is None else visible
    problem = notes.get("problem")
    if found is not None and seen is not None and len(found) != seen:
        problem = f"the framework sees {seen} GPU(s), the {notes['identity']} {len(found)}"
    report = {"cpus": cpus, "gpus": found or [], "problem": problem}
    try:
        if launch.local_size <= 1:
            decision = decide({0: report}, 1)
        else:
            decision = exchange(folder_for(base, launch, env), launch.local_rank, launch.local_size, report, timeout_s)
    except OSError as exc:  # the run's folder unwritable: the others time out and fall back alike
        decision = _fallback(f"the node's ranks could not exchange their CPUs ({exc})")
    index = int((decision.get("gpus") or {}).get(str(launch.local_rank), launch.local_rank))
    gpu = (found or [])[index] if found and index < len(found) else {}
    shared = len(set(cpus) & set(gpu.get("cpus") or ())) if gpu.get("cpus") else None
    return {
        "local_rank": launch.local_rank,
        "cuda_index": index,
        "bus_id": gpu.get("bus_id"),
        "uuid": gpu.get("uuid"),
        "numa_node": gpu.get("numa_node"),
        "gpu_cpus": cpu_text(gpu["cpus"]) if gpu.get("cpus") else None,
        "cpus": cpu_text(cpus),
        "shared_cpus": shared,
        "how": decision["how"],
        "why": decision["why"],
        "status": decision["status"],
        "identity": notes.get("identity"),
        "affinity": notes.get("affinity"),
    }


def describe(record, why=True):
    """One line for a log (why: with the reason and both CPU sets) or a preflight row's figure."""
    numa = f", NUMA node {record['numa_node']}" if record.get("numa_node") is not None else ""
    where = f" ({record['bus_id']}{numa})" if record.get("bus_id") else ""
    how = "by CPU affinity" if record["how"] == AFFINITY else "by local rank"
    line = f"local rank {record['local_rank']} -> GPU {record['cuda_index']}{where} {how}"
    if not why:
        return line
    near = f"; its CPUs {record['cpus']}, the GPU's {record['gpu_cpus']}" if record.get("gpu_cpus") else ""
    return f"{line}: {record['why']}{near}"
