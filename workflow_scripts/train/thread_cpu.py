"""How a rank's CPUs were shared during its timed steps: the CPU time of each of the process's
threads between two snapshots, summed over threads of one name, in cores (CPU seconds per
second). A run that waited for its input says with it whether the input's threads had the CPUs
they were given (docs/training.md, "Where a rank's CPUs went")."""

import os
import re
import time

import psutil

MAIN = "main"  # the interpreter's first thread: the training loop


def snapshot():
    """(monotonic seconds, {thread id: (name, CPU seconds)}) of this process now, or None where
    the platform lists no threads."""
    try:
        threads = psutil.Process().threads()
    except (psutil.Error, NotImplementedError):
        return None
    pid, out = os.getpid(), {}
    for t in threads:
        out[t.id] = (MAIN if t.id == pid else _name(t.id), t.user_time + t.system_time)
    return time.monotonic(), out


def _name(tid):
    try:
        with open(f"/proc/self/task/{tid}/comm") as f:
            name = f.read().strip()
    except OSError:
        return "?"
    # a pool's threads differ by a number: one group
    return re.sub(r"[\s_#-]*\d+$", "", name) or name


def cores(before, after):
    """{'seconds', 'cores', 'by_thread': {name: cores}} between two snapshots; threads started
    between them count from zero, threads that ended are lost (their time is not listed)."""
    if not before or not after or after[0] <= before[0]:
        return None
    seconds = after[0] - before[0]
    groups = {}
    for tid, (name, cpu) in after[1].items():
        used = cpu - before[1].get(tid, (name, 0.0))[1]
        groups[name] = groups.get(name, 0.0) + max(0.0, used)
    by = {k: round(v / seconds, 3) for k, v in sorted(groups.items(), key=lambda kv: -kv[1])}
    return {"seconds": round(seconds, 3), "cores": round(sum(by.values()), 3), "by_thread": by}
