"""Progress markers: each rank rewrites markers/rank<r>.json as it enters a phase, so a check job
that has to stop a hung run can say which phase hung on which rank and node."""

import json
import os
import time
from pathlib import Path

from ..common.atomic import write_json

# In order; a rank's marker names the phase it entered last.
PHASES = ("start", "devices", "kernel", "init", "allreduce", "done")
CHECK_OF_PHASE = {
    "start": "import",
    "devices": "gpu",
    "kernel": "kernel",
    "init": "allreduce",
    "allreduce": "allreduce",
    "done": "allreduce",
}


class Markers:
    def __init__(self, folder, rank, node):
        self.path = Path(folder) / "markers" / f"rank{rank}.json"
        self.state = {"rank": rank, "node": node, "pid": os.getpid(), "phases": []}

    def enter(self, phase):
        self.state["phase"] = phase
        self.state["phases"].append({"phase": phase, "t": time.time()})
        write_json(self.path, self.state)


def read(folder):
    """{rank: marker} of every rank that wrote one."""
    out = {}
    for p in sorted((Path(folder) / "markers").glob("rank*.json")):
        try:
            m = json.loads(p.read_text())
        except (OSError, ValueError):  # replaced while read: the next look sees it
            continue
        out[m["rank"]] = m
    return out


def last_change(folder):
    """The newest marker's modification time, or None."""
    times = [p.stat().st_mtime for p in (Path(folder) / "markers").glob("rank*.json")]
    return max(times) if times else None
