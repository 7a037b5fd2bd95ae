"""One task of a preflight check, started by the launcher exactly as a training rank is, in the
framework's interpreter (or container):

    python -m workflow_scripts.preflight.rank --framework pytorch --precisions fp32 --out DIR \
        [--require-gpu --gpu-type v100 --env-key envs_gpu.pytorch] [--cpus-per-task 10] [--allreduce-elements N]

The framework sees a GPU per task (of the system's type) and runs a tiny conv net forward and
backward on it per precision; an all-reduce over all ranks through the framework's own path gives
the right sum, and one of --allreduce-elements float32 values is timed; the CPUs this task may run on and
the threads the trainer will start; on a node's first task, the telemetry sources. Each phase is
marked (phase_markers.py) before it starts. Writes DIR/rank<r>.json (rows); exits 1 if a check failed,
so that the launcher stops the other ranks rather than leaving them in a collective.
"""

import argparse
import glob
import importlib
import math
import os
import sys
from pathlib import Path

from ..cluster import cpus, gpu_choice, netif
from ..cluster.rank_env import detect
from ..common import frameworks
from ..common.atomic import write_json
from ..train.harness import gpu_problem
from .check_rows import FAILED, NA, OK, WARN, row
from .owners import classify, spare_cores, thread_counts
from .phase_markers import Markers

RESNET50_GRADIENTS = 25_557_032  # ResNet-50's trainable parameters: one step's fp32 gradients


def gpu_row(info, a, launch, where, index=None):
    """The GPUs the framework sees, and the task's own (index: gpu_choice's, else its local rank's)."""
    if not a.require_gpu:
        return row("gpu", NA, cause="the system requests no GPUs (the tiny net runs on the CPU)")
    problem = gpu_problem(
        launch, where, a.env_key, info["count"], info["cuda_build"], info["nccl"] if launch.world_size > 1 else None
    )
    if problem:
        return row("gpu", FAILED, f"{info['count']} GPU(s)", *problem)
    index = launch.local_rank if index is None else index
    name = info["names"][index] if info["names"] else f"GPU {index}"
    wanted = a.gpu_type.lower().replace("-", "").split("_")[0]
    if wanted and info["names"] and wanted not in name.lower().replace("-", "").replace(" ", ""):
        return row(
            "gpu",
            FAILED,
            name,
            f"the task's GPU is {name}, not the system's gpu_type {a.gpu_type!r}",
            "check systems.<name>.gpu_type / constraint: the job landed on other GPUs",
        )
    return row("gpu", OK, f"{name}; {info['count']} visible for {launch.local_size} task(s)")


def binding_row(binding):
    """Which GPU the task took, by CPU affinity or by local rank, and why (cluster/gpu_choice.py): a
    warning where it may sit on another NUMA node than the task's CPUs."""
    figure = gpu_choice.describe(binding, why=False)
    if binding["status"] == "ok":
        return row("gpu_binding", OK, f"{figure}: {binding['why']}")
    return row(
        "gpu_binding",
        WARN,
        figure,
        f"{binding['why']}: the task's decoding and host-to-device copies may cross sockets (its CPUs "
        f"{binding['cpus']}, the GPU's {binding['gpu_cpus'] or 'unknown'})",
        "let SLURM bind each task to CPUs of its own (TaskPlugin task/affinity or task/cgroup), and give the "
        "framework's environment nvidia-ml-py (docs/faults.md)",
    )


def cpu_row(a, launch, threads, mine=None):
    """The task's CPUs against the system's cpus_per_task (failed where fewer), and its physical cores
    against what its framework's thread rule needs on a GPU (a warning where fewer: hyper-threads)."""
    mine = mine or cpus.of(launch)
    how = "its own" if mine.bound else f"shared by {launch.local_size} task(s): {mine.per_rank} each"
    figure = f"{mine.allowed} CPU(s) on {mine.cores} core(s), {how}; threads " + ", ".join(
        f"{k} {v}" for k, v in threads.items()
    )
    if a.cpus_per_task and mine.allowed < a.cpus_per_task:
        return row(
            "cpus",
            FAILED,
            figure,
            f"the task may run on {mine.allowed} CPU(s), the system asks {a.cpus_per_task} per task",
            "check systems.<name>.cpus_per_task against the partition's nodes",
            value=mine.allowed,
            unit="CPUs",
        )
    spare = spare_cores(a.framework, a.require_gpu)
    need, short = mine.cores_short(spare) if spare is not None else (0, 0)
    if short:
        tpc = mine.threads_per_core
        ht = f" ({tpc} hardware threads per core: SLURM counts each as a CPU)" if tpc > 1 else ""
        return row(
            "cpus",
            WARN,
            figure,
            f"the task has {mine.cores_per_rank} physical core(s){ht}; {a.framework}'s thread rule keeps {spare} "
            f"for the GPU's own threads and decodes on the rest, {max(0, mine.cores_per_rank - spare)} here, fewer "
            f"than {cpus.MIN_DECODE_CORES}: the runs will be input-bound and measure the decoding, not the framework",
            f"raise systems.<name>.cpus_per_task to {need * tpc} or more per task"
            + (f" (it counts hardware threads: {need * tpc} CPUs are {need} cores here)" if tpc > 1 else ""),
            value=mine.allowed,
            unit="CPUs",
        )
    return row("cpus", OK, figure, value=mine.allowed, unit="CPUs")


def socket_row(env=None, addrs=None, root=netif.NET_ROOT):
    """The interface the ranks' sockets use between nodes (Gloo, Horovod's rendezvous, NCCL's
    bootstrap, and NCCL's data where it has no InfiniBand or RoCE) and its link speed: a warning
    where a faster interface is up beside it, as when the route to the peers is a management LAN."""
    env = os.environ if env is None else env
    link = netif.describe(env, addrs, root)
    if not link:
        return row("socket_interface", NA, cause="no interface given to the ranks: one node, left to NCCL and Gloo")
    figure = f"{link['name']}: {netif.gbps(link['speed_mbps'])}"
    if not link["faster_up"]:
        return row("socket_interface", OK, figure, value=link["speed_mbps"], unit="Mb/s")
    faster = ", ".join(f"{n} ({netif.gbps(v)})" for n, v in link["faster_up"].items())
    are = "are" if len(link["faster_up"]) > 1 else "is"
    return row(
        "socket_interface",
        WARN,
        figure,
        f"the ranks' sockets between nodes go over {link['name']} ({netif.gbps(link['speed_mbps'])}), the route "
        f"to the other nodes, while {faster} {are} up: NCCL sends its data over these sockets where it has no "
        "InfiniBand or RoCE",
        f"set config {netif.KEY} to the faster interface if the nodes reach each other over it",
        value=link["speed_mbps"],
        unit="Mb/s",
    )


def telemetry_rows(gpu_system):
    rows = []
    try:
        import pynvml

        pynvml.nvmlInit()
        rows.append(row("telemetry_nvml", OK, f"NVML: {pynvml.nvmlDeviceGetCount()} GPU(s)"))
    except Exception as exc:  # no module, no driver, no library: all mean no GPU columns
        cause = f"NVML unavailable ({type(exc).__name__}: {exc})"
        # The runs train without it (a stock NGC image has no nvidia-ml-py): what goes missing is said.
        rows.append(
            row(
                "telemetry_nvml",
                WARN,
                "",
                cause + ": the runs' telemetry will have no GPU rows (utilisation, memory, power, clocks and their "
                "limiters), their gpu_state no limiters or Xid errors, and their isolation will be unknown, since "
                "other processes on the GPUs cannot be seen: no verdict will rest on them",
                "install nvidia-ml-py in the framework's environment or image; check the node's driver",
            )
            if gpu_system
            else row("telemetry_nvml", NA, cause=cause + " (the system requests no GPUs)")
        )
    ib = glob.glob("/sys/class/infiniband/*/ports/*/counters")
    rows.append(
        row("telemetry_ib", OK, f"{len(ib)} InfiniBand port(s) with counters")
        if ib
        else row(
            "telemetry_ib",
            NA,
            cause="no /sys/class/infiniband/*/ports/*/counters: Fig. 8 has no InfiniBand bytes from this node",
        )
    )
    return rows


def allreduce_row(fw, launch, elements):
    """The sum of rank + 1 over the ranks, checked in every element; the second call is timed."""
    want = launch.world_size * (launch.world_size + 1) / 2
    lo, hi, _ = fw.allreduce(elements, launch.rank + 1)
    if not lo == hi == want:
        return row(
            "allreduce",
            FAILED,
            f"{lo:g}..{hi:g}",
            f"{fw.backend} all-reduce of {elements} values gave {lo:g}..{hi:g}, not {want:g} everywhere",
            "check the framework's collective build and the network",
        )
    _, _, seconds = fw.allreduce(elements, launch.rank + 1)
    return row(
        "allreduce",
        OK,
        f"{fw.backend}: sum right; {elements} fp32 in {seconds:.3g} s across "
        f"{launch.world_size} ranks, {launch.num_nodes} node(s)",
        value=seconds,
        unit="s",
    )


def stamp(rows, launch):
    return [{**r, "node": launch.hostname, "rank": launch.rank} for r in rows]


def checks(a, launch, marks, out):
    """The task's rows, in order; stops at the first failure of this task's own checks."""
    rows, where = [], f"{a.framework} in {sys.executable} (config {a.env_key})"
    try:
        fw = importlib.import_module(f".{frameworks.of(a.framework).preflight}", __package__).Framework(
            launch, thread_counts(a.framework, launch, a.require_gpu)
        )
        info = fw.devices()
    except Exception as exc:
        cause, fix = classify(exc, a.framework, a.env_key)
        return [row("import", FAILED, cause=f"{where} cannot start: {cause}", fix=fix)]
    marks.enter("devices")
    binding = None
    if a.require_gpu and info["cuda_build"] and info["count"] >= launch.local_size:
        # agreed with the node's other tasks, in the check's folder, as the training ranks do
        binding = gpu_choice.choose(launch, Path(out).parent, seen=info["count"])
    rows.append(gpu_row(info, a, launch, where, None if binding is None else binding["cuda_index"]))
    if rows[-1]["status"] == FAILED:
        return rows
    if a.require_gpu:
        fw.use_gpu(None if binding is None else binding["cuda_index"])
        if binding is not None:
            rows.append(binding_row(binding))
    marks.enter("kernel")
    for p in dict.fromkeys(["fp32", *a.precisions]):
        try:
            seconds, loss = fw.kernel(p)
            ok = math.isfinite(loss)
            rows.append(
                row(
                    f"kernel_{p}",
                    OK if ok else FAILED,
                    f"{'gpu' if fw.gpu else 'cpu'}: forward + backward in {seconds:.3g} s (first call, JIT included)",
                    "" if ok else f"loss {loss}",
                    "" if ok else "see the check job's log",
                    value=seconds,
                    unit="s",
                )
            )
        except Exception as exc:
            cause, fix = classify(exc, a.framework, a.env_key)
            rows.append(row(f"kernel_{p}", FAILED, cause=cause, fix=fix))
    mine = cpus.of(launch)
    rows.append(cpu_row(a, launch, thread_counts(a.framework, launch, a.require_gpu, mine), mine))
    if launch.local_rank == 0:
        rows += telemetry_rows(a.require_gpu) + [socket_row()]
    write_json(out, stamp(rows, launch))  # what is known so far, should the collective hang
    if any(r["status"] == FAILED for r in rows):
        return rows
    if launch.world_size == 1:
        return rows + [row("allreduce", NA, cause="one task: nothing to all-reduce")]
    try:
        marks.enter("init")
        fw.init()
        marks.enter("allreduce")
        return rows + [allreduce_row(fw, launch, a.allreduce_elements)]
    except Exception as exc:  # a refused connection, a collective's error: named, not a traceback
        cause, fix = classify(exc, a.framework, a.env_key)
        return rows + [row("allreduce", FAILED, cause=f"{fw.backend}: {cause}", fix=fix)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--framework", required=True, choices=frameworks.NAMES)
    ap.add_argument("--precisions", nargs="*", default=["fp32"], choices=("fp32", "fp16"))
    ap.add_argument("--out", required=True, help="the check's working folder")
    ap.add_argument("--require-gpu", action="store_true")
    ap.add_argument("--gpu-type", default="", help="config systems.<name>.gpu_type")
    ap.add_argument("--env-key", default="envs", help="the config key that chose this interpreter")
    ap.add_argument("--cpus-per-task", type=int, default=0)
    ap.add_argument(
        "--allreduce-elements", type=int, default=RESNET50_GRADIENTS, help="float32 values in the timed all-reduce"
    )
    a = ap.parse_args()
    launch = detect()
    marks = Markers(a.out, launch.rank, launch.hostname)
    marks.enter("start")
    out = Path(a.out) / f"rank{launch.rank}.json"
    rows = stamp(checks(a, launch, marks, out), launch)
    write_json(out, rows)
    marks.enter("done")
    sys.exit(1 if any(r["status"] == FAILED for r in rows) else 0)


if __name__ == "__main__":
    main()
