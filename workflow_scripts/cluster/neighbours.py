"""What else used a node while a run measured (docs/training.md#isolation).

The telemetry thread of each node's first rank takes a sample at every interval: the CPU time the
node's processes used since the last one, split into the run's own processes (those started with
the run's DLSCALE_RUN marker in their environment: the launcher, the ranks, their workers), kernel
threads, and every other process, by name; the processes on the node's GPUs that are not the run's
(NVML); the Xid errors NVML reports; and, under SLURM, the other jobs running on the node (squeue,
every `squeue_every` seconds, not every sample: the controller serves the whole cluster). One JSON
line per sample, `neighbours.<node>.jsonl` beside the telemetry; `evidence()` turns a run's lines
into its isolation verdict for the timed window (the training job does that once every rank has
exited, train/training_job.py).

The node's busy CPU time from /proc/stat counts processes that came and went between two samples
too: what neither the run nor a process still alive accounts for is kept as `unattributed_s`
(short-lived processes, interrupts), evidence beside the per-process figures.
"""

import os
import shutil
import subprocess
import threading
import time

import psutil

MARKER = "DLSCALE_RUN"
# host:pid,pid,...: the processes that started the run's job on its first node (the job's shell, the
# workflow that waits for it): they have no marker, and are the run's own, not neighbours.
PARENTS = "DLSCALE_RUN_PARENTS"


def mark_run(value):
    """Marks this process and everything it starts from now on as one run's (the training job calls
    it first), its ancestors with it."""
    os.environ[MARKER] = value
    parents = [str(p.pid) for p in psutil.Process().parents()]
    os.environ[PARENTS] = f"{os.uname().nodename}:{','.join(parents)}"


# Not isolated: processes that are not the run's used more than this share of the node's CPUs over
# the timed window (why this share: docs/decisions.md#isolation).
FOREIGN_CPU_SHARE = 0.02
TOP = 5  # other processes named in the verdict's sentence, the busiest first
# A sample lists every other process that used at least this share of one CPU since the last one: on
# a crowded node a neighbour is still named, and a quiet node's dozens of idle daemons are not.
LISTED_SHARE = 0.01
RULE = (
    f"not isolated when processes that are not the run's used more than {FOREIGN_CPU_SHARE:.0%} of a node's CPUs "
    "over the timed window, any other process ran on the node's GPUs, or another SLURM job ran on one of its nodes"
)


ISOLATED = (
    f"other processes used at most {FOREIGN_CPU_SHARE:.0%} of each node's CPUs over the timed window, none ran on "
    "its GPUs, and no other SLURM job ran on its nodes"
)


def _busy(times):
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def _user(proc):
    try:
        return proc.username()
    except (psutil.Error, KeyError):  # gone, or a uid with no name
        return "?"


def _kernel_thread(info):
    return info["pid"] == 2 or info["ppid"] == 2


COMMAND_CHARS = 300  # of a neighbour's command line: enough to tell `snakemake all` from a build


def _described(proc):
    """{command, cwd} of a process: "python" alone does not say whose or which ("?" where it cannot
    be read: another user's, or gone)."""
    try:
        command = " ".join(proc.cmdline())[:COMMAND_CHARS] or "?"
    except psutil.Error:
        command = "?"
    try:
        cwd = proc.cwd()
    except psutil.Error:
        cwd = "?"
    return {"command": command, "cwd": cwd}


class NodeSampler:
    """One sample per call of sample(): a dict for one JSON line. `gpus` is telemetry's NVML wrapper
    (its handles and module), or None on a node without GPUs."""

    def __init__(self, marker=None, gpus=None, squeue_every=30.0, node=None):
        self.marker = marker if marker is not None else os.environ.get(MARKER, "")
        self.gpus = gpus
        self.node = node or os.environ.get("SLURMD_NODENAME") or os.uname().nodename
        self.job = os.environ.get("SLURM_JOB_ID", "")
        self.squeue_every = squeue_every if self.job and shutil.which("squeue") else None
        self._own = {}  # (pid, create_time) -> whether the process is the run's
        host, _, pids = os.environ.get(PARENTS, "").partition(":")
        self._parents = {int(p) for p in pids.split(",") if p.isdigit()} if host == os.uname().nodename else set()
        self._cpu = {}  # (pid, create_time) -> cpu seconds at the last sample
        self._busy = None
        self._t = None
        self._squeued = None
        self._events = self._register_xid() if gpus and gpus.nvml else None
        self._told = set()  # (pid, create_time) of the others whose command line a sample gave

    def _is_own(self, proc, key):
        if key not in self._own:
            if proc.pid == os.getpid() or proc.pid in self._parents:
                self._own[key] = True
            else:
                try:
                    self._own[key] = bool(self.marker) and proc.environ().get(MARKER) == self.marker
                except (psutil.Error, OSError):  # another user's process: not the run's
                    self._own[key] = False
        return self._own[key]

    def _processes(self, since, now):
        """(own s, kernel s, others s, [(pid, name, user, s)] of the others, {pid: {command, cwd}} of
        those listed for the first time) since the last sample."""
        own = kernel = others = 0.0
        named, seen = [], {}
        # Only /proc/<pid>/stat for every process: its user is read for the ones a sample lists.
        users, created = {}, {}
        for proc in psutil.process_iter(["pid", "ppid", "name", "cpu_times", "create_time"]):
            info = proc.info
            if info["cpu_times"] is None or info["create_time"] is None:
                continue
            key = (info["pid"], info["create_time"])
            cpu = info["cpu_times"].user + info["cpu_times"].system
            seen[key] = cpu
            if key in self._cpu:
                used = cpu - self._cpu[key]
            elif since is not None and info["create_time"] >= since - 0.01:
                used = cpu  # started since the last sample: all its time is new
            else:
                continue  # first sight of a process older than the last sample: a baseline only
            if used <= 0:
                continue
            if _kernel_thread(info):
                kernel += used
            elif self._is_own(proc, key):
                own += used
            else:
                others += used
                named.append((info["pid"], info["name"] or "?", round(used, 3)))
                users[info["pid"]], created[info["pid"]] = proc, key
        self._cpu = seen
        self._own = {k: v for k, v in self._own.items() if k in seen}
        floor = LISTED_SHARE * (now - since) if since is not None else 0.0
        listed = sorted((n for n in named if n[2] >= floor), key=lambda n: -n[2])
        # each listed process's command line and folder once: a neighbour in every sample says it once
        new = [pid for pid, _, _ in listed if created[pid] not in self._told]
        self._told |= {created[pid] for pid in new}
        described = {str(pid): _described(users[pid]) for pid in new}
        return own, kernel, others, [(pid, name, _user(users[pid]), used) for pid, name, used in listed], described

    def _gpu_processes(self, own_pids):
        """(other processes on the node's GPUs, whether any of the run's own showed up there). A pid
        this node's process table does not show is another PID namespace's (a container's), or
        NVML gave the host's pids to a process in a container: the second, when none of the run's
        own pids shows up either (evidence() then cannot judge those)."""
        nvml, out, own_seen = self.gpus.nvml, [], False
        for i, h in self.gpus.handles.items():
            procs = []
            for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
                read = getattr(nvml, name, None)
                if read is None:
                    continue
                try:
                    procs += read(h)
                except Exception:  # not supported on this GPU or driver: nothing to read
                    continue
            for p in procs:
                if p.pid in own_pids:
                    own_seen = True
                    continue
                try:
                    name, visible = psutil.Process(p.pid).name(), True
                except psutil.Error:
                    name, visible = "not visible from here", False
                used = getattr(p, "usedGpuMemory", None)
                out.append(
                    {
                        "gpu": i,
                        "pid": p.pid,
                        "name": name,
                        "visible": visible,
                        "used_MB": used / 2**20 if used else None,
                    }
                )
        return out, own_seen

    def _register_xid(self):
        nvml = self.gpus.nvml
        try:
            events = nvml.nvmlEventSetCreate()
        except Exception as exc:
            return f"unsupported: {type(exc).__name__}: {exc}"
        registered = 0
        for h in self.gpus.handles.values():
            try:
                nvml.nvmlDeviceRegisterEvents(h, nvml.nvmlEventTypeXidCriticalError, events)
                registered += 1
            except Exception:
                continue
        return events if registered else "unsupported: no GPU accepts Xid event registration"

    def _xids(self):
        if self._events is None or isinstance(self._events, str):
            return []
        nvml, found = self.gpus.nvml, []
        while True:
            try:
                data = nvml.nvmlEventSetWait_v2(self._events, 0)
            except Exception:  # the timeout: no event waiting
                return found
            try:
                gpu = nvml.nvmlDeviceGetIndex(data.device)
            except Exception:
                gpu = None
            found.append({"gpu": gpu, "xid": int(data.eventData)})

    def _slurm_jobs(self, now):
        """The other jobs running on this node, every squeue_every seconds (None between)."""
        if self.squeue_every is None or (self._squeued is not None and now - self._squeued < self.squeue_every):
            return None
        self._squeued = now
        try:
            out = subprocess.run(
                ["squeue", "-h", "-w", self.node, "-t", "RUNNING,COMPLETING", "-o", "%A|%u|%j|%T"],
                capture_output=True,
                text=True,
                timeout=20,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return [{"error": f"squeue: {exc}"}]
        if out.returncode != 0:
            return [{"error": f"squeue: {out.stderr.strip()[:200]}"}]
        jobs = []
        for line in out.stdout.splitlines():
            job, user, name, state = (line.split("|") + ["", "", "", ""])[:4]
            if job.strip() and job.split("_")[0].split("+")[0] != self.job:
                jobs.append({"job": job, "user": user, "name": name, "state": state})
        return jobs

    def sample(self):
        now = time.time()
        busy = _busy(psutil.cpu_times())
        own, kernel, others, named, described = self._processes(self._t, now)
        line = {"t": now}
        if self._busy is not None:
            line.update(
                busy_s=round(busy - self._busy, 3),
                own_s=round(own, 3),
                kernel_s=round(kernel, 3),
                others_s=round(others, 3),
                unattributed_s=round(max(0.0, busy - self._busy - own - kernel - others), 3),
                others=named,
            )
            if described:
                line["described"] = described
        else:
            line["baseline"] = True
            if self.gpus is not None and self.gpus.nvml is None:
                line["nvml_unavailable"] = self.gpus.unavailable
        self._busy, self._t = busy, now
        if self.gpus and self.gpus.nvml:
            own_pids = {pid for (pid, _), mine in self._own.items() if mine}
            line["gpu_others"], line["gpu_own_seen"] = self._gpu_processes(own_pids)
            line["xid"] = self._xids()
            if isinstance(self._events, str):
                line["xid_unsupported"] = self._events
        jobs = self._slurm_jobs(now)
        if jobs is not None:
            line["slurm_jobs"] = jobs
        return line


def _in_window(line, start, end, interval):
    """A sample covers (its t - interval, its t]: it counts where that overlaps the window."""
    return line["t"] > start and line["t"] - interval < end


def node_evidence(lines, start, end, cpus, interval):
    """One node's figures over [start, end] (wall-clock seconds)."""
    window = [ln for ln in lines if "busy_s" in ln and _in_window(ln, start, end, interval)]
    # squeue ran on some samples only: the last answer before the window and every one inside it.
    asked = [ln for ln in lines if "slurm_jobs" in ln and ln["t"] <= end]
    before = [ln for ln in asked if ln["t"] <= start][-1:]
    slurm = [ln for ln in asked if ln["t"] > start] + before
    total = {k: sum(ln[k] for ln in window) for k in ("busy_s", "own_s", "kernel_s", "others_s", "unattributed_s")}
    by_process = {}
    # a process's command line and folder, from whichever sample first listed it (the window's or earlier)
    described = {int(pid): d for ln in lines for pid, d in ln.get("described", {}).items()}
    for ln in window:
        for pid, name, user, used in ln["others"]:
            entry = by_process.setdefault((pid, name), {"name": name, "user": user, "pids": [pid], "cpu_s": 0.0})
            entry.update(described.get(pid, {}))
            entry["cpu_s"] += used
    listed = sorted(by_process.values(), key=lambda e: -e["cpu_s"])
    seconds = max(end - start, 1e-9)
    # An invisible pid counts only where the run's own pids showed up on the GPUs (NVML's pids are
    # this node's): else NVML may be giving a container the host's pids, and it cannot be told apart.
    own_seen = any(ln.get("gpu_own_seen") for ln in window)
    gpu_others = {
        (p["gpu"], p["pid"]): p for ln in window for p in ln.get("gpu_others", []) if p.get("visible", True) or own_seen
    }
    unjudged = {p["pid"] for ln in window for p in ln.get("gpu_others", []) if not p.get("visible", True)} - {
        pid for _, pid in gpu_others
    }
    jobs = {j.get("job") or j.get("error"): j for ln in slurm for j in ln["slurm_jobs"]}
    return {
        "samples": len(window),
        "cpus": cpus,
        **{k: round(v, 3) for k, v in total.items()},
        "others_cpu_share": round(total["others_s"] / seconds / max(cpus, 1), 4),
        "top_others": [{**e, "cpu_s": round(e["cpu_s"], 3)} for e in listed[:TOP]],
        # every other process a sample listed (LISTED_SHARE), the busiest first
        "other_processes": [{**e, "cpu_s": round(e["cpu_s"], 3)} for e in listed],
        "gpu_others": list(gpu_others.values()),
        "gpu_pids_unjudged": sorted(unjudged),
        "xid": [x for ln in window for x in ln.get("xid", [])],
        "slurm_jobs": [j for j in jobs.values() if "job" in j],
        "slurm_errors": [j["error"] for j in jobs.values() if "error" in j],
    }


def in_words(entry):
    """A neighbour in words: its name, pid, user and CPU time, and what it runs where."""
    what = f" `{entry['command']}` in {entry.get('cwd', '?')}" if entry.get("command") else ""
    return f"{entry['name']} (pid {entry['pids'][0]}, {entry['user']}, {entry['cpu_s']:.1f} CPU-s){what}"


def evidence(lines_by_node, start, end, cpus_by_node, interval):
    """The run's isolation over its timed window [start, end]: {isolated: True | False | None
    (unknown), why, rule, window, nodes}."""
    nodes, reasons, unknown = {}, [], []
    for node, lines in sorted(lines_by_node.items()):
        ev = nodes[node] = node_evidence(lines, start, end, cpus_by_node.get(node) or 0, interval)
        if not ev["samples"]:
            unknown.append(f"{node}: no sample inside the timed window")
            continue
        if ev["others_cpu_share"] > FOREIGN_CPU_SHARE:
            names = ", ".join(map(in_words, ev["top_others"]))
            reasons.append(
                f"{node}: other processes used {ev['others_s']:.1f} CPU-s in {end - start:.1f} s, "
                f"{ev['others_cpu_share']:.1%} of its {ev['cpus']} CPUs" + (f": {names}" if names else "")
            )
        if ev["gpu_pids_unjudged"]:
            unknown.append(
                f"{node}: NVML names processes on its GPUs (pids {', '.join(map(str, ev['gpu_pids_unjudged']))}) "
                "that are not in this node's process table, and none of the run's own: its pids are another PID "
                "namespace's (a container's), so other processes on the GPUs cannot be told from the run's"
            )
        if ev["gpu_others"]:
            reasons.append(
                f"{node}: other processes on its GPUs: "
                + ", ".join(f"gpu{p['gpu']} pid {p['pid']} ({p['name']})" for p in ev["gpu_others"])
            )
        if ev["slurm_jobs"]:
            reasons.append(
                f"{node}: other SLURM jobs ran there: "
                + ", ".join(f"{j['job']} ({j['user']}, {j['name']})" for j in ev["slurm_jobs"])
            )
    if not nodes:
        unknown.append("no neighbour samples (training.telemetry_interval is 0, or the run wrote none)")
    isolated = False if reasons else (None if unknown else True)
    why = "; ".join(reasons or unknown) or ISOLATED
    return {
        "isolated": isolated,
        "why": why,
        "rule": RULE,
        "window": {"start": start, "end": end, "seconds": round(end - start, 3)},
        "nodes": nodes,
    }


def slurm_half(ev, slurm, lines):
    """Under SLURM a run is isolated only where SLURM held its nodes for it alone (OverSubscribe=NO,
    asked by the training job on the host, not from the ranks' container). Where it let other jobs
    on, squeue's answers cannot stand in: they fail, are missing where the ranks' image has no squeue,
    and hide other users' jobs under PrivateData=jobs. Such a run is unknown, never true."""
    if ev["isolated"] is not True or not slurm:
        return ev
    over = slurm.get("oversubscribe")
    if over == "NO":
        return ev
    errors = sorted({e for node in ev["nodes"].values() for e in node.get("slurm_errors", [])})
    asked = any("slurm_jobs" in ln for ls in lines.values() for ln in ls)
    squeue = (
        f"squeue failed ({errors[0]})"
        if errors
        else "squeue was not asked (none on the ranks' PATH)"
        if not asked
        else "squeue showed none, but hides other users' jobs where the cluster sets PrivateData=jobs"
    )
    job = slurm.get("job", "?")
    ev["isolated"] = None
    ev["why"] = (
        f"SLURM could not say whether job {job} held its nodes alone (scontrol show job)"
        if over is None
        else f"job {job} let other jobs onto its nodes (SLURM's OverSubscribe={over}) and {squeue}"
    ) + ": set systems.<name>.exclusive (sbatch --exclusive) for runs SLURM holds alone"
    return ev


class Watch:
    """A job timed in one process (the INT8 stage's throughput): its node sampled into memory every
    `interval` seconds on a thread from __enter__ to __exit__, and evidence() over its timed window,
    by the same rule as a training run's. Marks this process the run's (mark_run) first."""

    def __init__(self, run, interval=1.0, gpus=None):
        mark_run(run)
        self.interval, self.lines = interval, []
        self.sampler = NodeSampler(gpus=gpus)
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        self.lines.append(self.sampler.sample())
        while not self._halt.wait(self.interval):
            self.lines.append(self.sampler.sample())
        self.lines.append(self.sampler.sample())

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._halt.set()
        self._thread.join()

    def evidence(self, start, end, slurm=None):
        """{isolated, why, ...} over [start, end] (wall-clock seconds); slurm: the job's
        sharing record (cluster/slurm.py job_sharing), None outside SLURM."""
        lines = {self.sampler.node: self.lines}
        ev = evidence(lines, start, end, {self.sampler.node: psutil.cpu_count()}, self.interval)
        return slurm_half(ev, slurm, lines)
