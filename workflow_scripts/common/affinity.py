"""The training thread on a physical core of its own (trainers' --main-core).

Why: on a GPU host of 16 vCPUs, DALI's decoding threads keep most cores busy; the one thread that
launches each step and reads its loss then competes with them for a core, and each time it waits
to be scheduled the GPU idles. Here that thread gets one CPU of a physical core that no other
thread of the process may use (nor that CPU's hyperthread siblings), and every other thread of the
process (decoding, telemetry, the CUDA driver's) is moved off those cores.

Threads and processes that the training thread starts afterwards inherit its single CPU, so this
is done after the warm-up steps, when the input's threads and workers and the compiler's exist.
"""
import os
import threading
from pathlib import Path

from .errors import StageError

CPU_ROOT = Path("/sys/devices/system/cpu")


def parse_cpu_list(text):
    """'0-3,8,10-11' (the kernel's list format) -> [0, 1, 2, 3, 8, 10, 11]."""
    cpus = []
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def core_groups(cpus, root=CPU_ROOT):
    """The CPUs in `cpus` grouped by physical core (hyperthread siblings together), ordered by their
    lowest CPU; a CPU whose topology the kernel does not show is a core of its own."""
    groups = {}
    for cpu in sorted(cpus):
        try:
            siblings = set(parse_cpu_list((root / f"cpu{cpu}/topology/thread_siblings_list").read_text()))
        except (OSError, ValueError):
            siblings = set()
        group = (siblings | {cpu}) & set(cpus)
        groups.setdefault(min(group), set()).update(group)
    return [sorted(g) for _, g in sorted(groups.items())]


def plan(local_rank=0, local_size=1, flag="--main-core", root=CPU_ROOT):
    """-> (the training thread's CPU, the CPUs kept for the ranks' training threads, the CPUs left to
    every other thread) for this rank. The last `local_size` physical cores of the allowed set are
    kept, one per local rank, so that ranks on one host agree on them."""
    allowed = os.sched_getaffinity(0)
    groups = core_groups(allowed, root)
    if len(groups) <= local_size:
        raise StageError(f"{flag} on: {len(groups)} physical core(s) allowed ({sorted(allowed)}) for "
                         f"{local_size} rank(s) on this host; it needs one per rank and at least one more")
    kept = groups[-local_size:]
    kept_cpus = {cpu for group in kept for cpu in group}
    return kept[local_rank][0], sorted(kept_cpus), sorted(set(allowed) - kept_cpus)


def isolate_calling_thread(cpu, kept_cpus, other_cpus):
    """Pins the calling thread to `cpu` and every other thread of this process to `other_cpus`
    (plan's answer). -> what was done, for the run's summary."""
    me = threading.get_native_id()
    moved = 0
    for entry in os.listdir("/proc/self/task"):
        tid = int(entry)
        if tid == me:
            continue
        try:
            os.sched_setaffinity(tid, other_cpus)
            moved += 1
        except (ProcessLookupError, PermissionError):
            pass  # the thread ended meanwhile, or it is not ours to move
    os.sched_setaffinity(0, {cpu})
    return {"cpu": cpu, "kept_cpus": kept_cpus, "other_cpus": other_cpus, "threads_moved": moved}
