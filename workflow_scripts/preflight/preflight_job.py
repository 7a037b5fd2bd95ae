"""One preflight check job of a (system, framework) at one geometry, as rules/preflight.smk runs it
inside its job (a SLURM job of the training run's resources on a cluster, a child of snakemake
locally):

    python -m workflow_scripts.preflight.preflight_job --out RESULT.json --system S --framework F \
        --python 'WORDS' [--data DIR] [--cache-clear-command CMD] [--timeout-s 300] [rank options] \
        -- LAUNCHER OPTIONS (as the training job's: --nproc-per-node, --nodes, --srun-args, --horovod ...)

It runs the measuring jobs' sequence as a training job does (train/measuring_job.py: TERM held
from the start, the page cache's scope, a stop from outside recorded): first the node checks once
on every node (node.py, this interpreter; they clear the page cache and judge the clearing), then
the task checks on every rank (rank.py, the framework's interpreter), each through the training
launcher. A phase that makes no progress for --timeout-s is stopped and named from the ranks'
markers. The result (status and rows) is always written; the gate (gate.py) turns a failure into
the stopped workflow. A stop from outside is a failed row of it, and recorded beside the log; the
job then exits 143 (no result for Snakemake: the next run checks again), except at the time limit,
which another check would meet again.
The input check (--only-input --input-check), a job of its own after the data check, measures each
real-data input path's capacity and the synthetic step rate it must keep up with (input_check below;
docs/preflight.md#the-input-check): a record the tables judge, never a failure.
"""

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..cluster import launcher, nccl_log, page_cache
from ..common import input_bound, schema
from ..common.atomic import write_json
from ..common.errors import run_main
from ..train.measuring_job import MeasuringJob, host
from . import markers
from .check_rows import FAILED, NA, OK, WARN, merge, read_all, row

HANG_FIX = (
    "check that every node reaches the others (firewall, the interface the launcher picks: "
    "NCCL_SOCKET_IFNAME / HOROVOD_GLOO_IFACE) and that no rank is stopped; rerun with NCCL_DEBUG=INFO"
)


def _stop(proc):
    """The launcher and everything it started (ranks, srun, the rendezvous server): TERM to the
    launcher alone, which stops its srun's step through SLURM or its local ranks and then exits
    (cluster/launcher.stop_step); only then KILL to its process group, for whatever is left, and to
    a launcher that did not exit in time. A TERM and KILL to the group at once would kill srun
    together with its shepherd, which cancels srun's step, and leave the ranks running."""
    try:
        proc.terminate()
        proc.wait(timeout=launcher.STOP_S + 10)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def supervise(cmd, log, timeout_s, work=None, progress=None):
    """Run `cmd` in its own process group; stop it once nothing progressed for timeout_s (a new
    marker under `work`, or a later time from `progress()`, else its start), or when the job itself
    is stopped (job_stop's exception, raised into the wait). Returns (exit status or None if
    stopped, seconds)."""
    start = time.time()
    progress = progress or (lambda: markers.last_change(work) if work else None)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        while proc.poll() is None:
            progress_at = max(start, progress() or 0)
            if time.time() - progress_at > timeout_s:
                _stop(proc)
                return None, time.time() - start
            time.sleep(0.2)
    except BaseException:
        _stop(proc)
        raise
    return proc.returncode, time.time() - start


def hang_row(work, expected, timeout_s):
    """What a stopped rank phase was doing, rank by rank, from the markers."""
    seen = markers.read(work)
    by_phase = {}
    for r in range(expected):
        m = seen.get(r)
        by_phase.setdefault(m["phase"] if m else "not started", []).append(f"{r} ({m['node'] if m else '?'})")
    # The earliest phase any rank is stuck in is the one the others wait on.
    order = [*markers.PHASES, "not started"]
    stuck = min(by_phase, key=lambda p: order.index(p) if p != "not started" else -1)
    check = markers.CHECK_OF_PHASE.get(stuck, "launch")
    where = "; ".join(f"phase {p!r}: rank(s) {', '.join(r)}" for p, r in by_phase.items())
    what = {
        "allreduce": "the all-reduce hung",
        "init": "the collective's rendezvous hung",
        "not started": "ranks did not start",
    }.get(stuck, f"phase {stuck!r} hung")
    node = next((seen[r]["node"] for r in sorted(seen) if seen[r]["phase"] == stuck), "")
    return row(
        check if stuck != "kernel" else "kernel_fp32",
        FAILED,
        "",
        f"{what}: no progress for {timeout_s:g} s (preflight.timeout_s), stopped; {where}",
        HANG_FIX,
        node,
    )


def nccl_transport_row(work, nodes, tasks, gpu, env):
    """Which transport NCCL used between the tasks, from the debug files they wrote into `work`
    (the launcher's --nccl-log-dir) and the nodes' InfiniBand ports (infiniband.*.json, node.py):
    failed where NCCL fell back to sockets between nodes that have InfiniBand. env: the ranks'
    environment (config nccl_env included), where NCCL_IB_DISABLE=1 means sockets were chosen."""
    if not gpu:
        return row("nccl_transport", NA, cause="the system requests no GPUs: the tasks all-reduce with Gloo, not NCCL")
    if tasks == 1:
        return row("nccl_transport", NA, cause="one task: NCCL connects nothing")
    parsed = nccl_log.read_logs(work)
    if parsed is None or not (parsed["within_node"] or parsed["between_nodes"]):
        # a warning, not "not applicable": a fall-back to sockets would go unseen
        words, note = nccl_log.debug_env(work, env)
        found = "no NCCL debug file" if parsed is None else "its debug files hold no channel lines"
        return row("nccl_transport", WARN, cause=f"NCCL's transport is not recorded: {found if words else note}")
    problem = nccl_log.transport_problem(parsed, nodes, read_all(work, "infiniband.*.json"), env)
    where = ",".join(parsed["hosts"])
    if problem:
        return row("nccl_transport", FAILED, nccl_log.describe(parsed, env), problem, nccl_log.FIX, where)
    return row("nccl_transport", OK, nccl_log.describe(parsed, env), node=where)


def synthetic_done(settings, system):
    """{precision: [{gpus, images_per_s, run}]}: the sweep's synthetic runs of the pair that have
    completed by now (their summary.json says ok), one per GPU count (common/input_bound.by_count)."""
    found = {}
    for p in settings["synthetic_runs"]:
        path = Path(p["run_dir"]) / "summary.json"
        try:
            s = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if s.get("status") == "ok" and s.get("images_per_s"):
            run = f"{system}/{Path(p['run_dir']).name}"
            found.setdefault(p["precision"], []).append(
                {"gpus": p["gpus"], "images_per_s": s["images_per_s"], "run": run}
            )
    return {p: input_bound.by_count(runs) for p, runs in found.items()}


def _steps_written(run):
    """When the timing's trainer last logged a step or a rank's record (its progress)."""
    times = [f.stat().st_mtime for f in (run / "steps.jsonl", *run.glob("rank*.json")) if f.exists()]
    return max(times) if times else None


def input_check(a, settings, base, work, log, timings):
    """The input check (docs/preflight.md#the-input-check): each real-data input path's
    capacity (input_task.py, once on the node, in the framework's interpreter) and, for each
    precision with no completed synthetic run of the sweep, the step rate of preflight.demand_steps
    synthetic steps of the framework's trainer at this check's geometry. Returns the record the
    tables judge (preflight/table.py, results/training_tables.py)."""
    out = work / "input_capacity.json"
    cmd = [
        *base,
        "--per-node",
        "--",
        *shlex.split(a.python),
        "-m",
        "workflow_scripts.preflight.input_task",
        "--framework",
        a.framework,
        "--data",
        a.data,
        "--settings",
        json.dumps(settings),
        "--out",
        str(out),
    ]
    print("preflight:", shlex.join(cmd), file=log, flush=True)
    rc, timings["input capacity"] = supervise(cmd, log, a.timeout_s)
    if out.exists():
        inputs = json.loads(out.read_text())["inputs"]
    else:
        why = f"stopped: no result in {a.timeout_s:g} s (preflight.timeout_s)" if rc is None else f"exited {rc}"
        error = f"the input capacity task {why}, see {a.log}"
        inputs = {p: {"images_per_s": None, "error": error} for p in settings["inputs"]}
    done = synthetic_done(settings, a.system)
    demand = {}
    trainer = f"workflow_scripts.train.{settings['trainer']}"
    for precision, args in settings["timing"].items():
        demand[precision] = {"synthetic": done.get(precision, []), "timed": None, "error": ""}
        if done.get(precision):
            continue  # the sweep's own synthetic runs: no need to time it
        run = work / f"synthetic_{precision}"
        shutil.rmtree(run, ignore_errors=True)
        run.mkdir(parents=True)
        cmd = [*base, f"--python={a.python}", "--", *shlex.split(a.python), "-m", trainer, *args, "--out", str(run)]
        print("preflight:", shlex.join(cmd), file=log, flush=True)
        rc, timings[f"synthetic {precision}"] = supervise(
            cmd, log, a.timeout_s, progress=lambda run=run: _steps_written(run)
        )
        try:
            s = json.loads((run / "summary.json").read_text())
            demand[precision]["timed"] = {
                "gpus": s["world_size"],
                "nodes": s["num_nodes"],
                "images_per_s": s["images_per_s"],
                "steps": s["timed_steps"],
                "device": s.get("device", ""),
            }
        except (OSError, ValueError, KeyError):
            why = f"made no progress for {a.timeout_s:g} s (preflight.timeout_s)" if rc is None else f"exited {rc}"
            demand[precision]["error"] = f"the synthetic timing {why}, see {a.log}"
        for weights in run.glob("weights.*"):  # a random model's: the summary and step log are kept
            weights.unlink()
    for precision, runs in done.items():
        demand.setdefault(precision, {"synthetic": runs, "timed": None, "error": ""})
    keep = (
        "inputs",
        "precisions",
        "counts",
        "ranks_per_node",
        "batch",
        "image_size",
        "seconds",
        "device",
        "demand_steps",
    )
    return {"settings": {k: settings[k] for k in keep}, "inputs": inputs, "demand": demand}


def rank_args(a):
    words = [
        "--precisions",
        *a.precisions,
        f"--gpu-type={a.gpu_type}",
        f"--env-key={a.env_key}",
        "--cpus-per-task",
        str(a.cpus_per_task),
    ]
    words += ["--require-gpu"] if a.require_gpu else []
    return words + (["--allreduce-elements", str(a.allreduce_elements)] if a.allreduce_elements else [])


def arg_parser():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--system", required=True)
    ap.add_argument("--framework", required=True)
    ap.add_argument("--python", required=True, help="the framework's interpreter as words")
    ap.add_argument("--data", default="")
    ap.add_argument("--level", default="sample")
    ap.add_argument(
        "--data-later", action="store_true", help="the dataset is checked by its own job (node.py's option)"
    )
    ap.add_argument(
        "--only-data",
        action="store_true",
        help="the node checks only (page cache, the dataset): the data check, once the dataset exists",
    )
    ap.add_argument(
        "--only-input",
        action="store_true",
        help="the input check alone (--input-check), once the data check passed: no gate reads it",
    )
    page_cache.add_arguments(ap)
    schema.add_arguments(ap, "preflight", ("timeout_s",))
    ap.add_argument(
        "--input-check",
        default="",
        help="with --only-input: JSON of the input check's settings (plan/input_plan.py); empty: none",
    )
    ap.add_argument("--log", required=True)
    r = ap.add_argument_group("rank.py's options, passed on")
    r.add_argument("--precisions", nargs="+", default=["fp32"])
    r.add_argument("--require-gpu", action="store_true")
    r.add_argument("--gpu-type", default="")
    r.add_argument("--env-key", default="envs")
    r.add_argument("--cpus-per-task", type=int, default=0)
    schema.add_arguments(r, "preflight", ("allreduce_elements",))
    ap.add_argument("launcher", nargs=argparse.REMAINDER, help="-- LAUNCHER OPTIONS: as the training job's")
    return ap


def named_fixes(rows, system):
    """The rows merged, their fixes naming the system: the ranks name its keys systems.<name>.*."""
    return [{**r, "fix": (r.get("fix") or "").replace("systems.<name>.", f"systems.{system}.")} for r in merge(rows)]


def failed(rows):
    return any(r["status"] == FAILED for r in rows)


class PreflightJob(MeasuringJob):
    """One check job (measuring_job's sequence): the node checks clear the cache on every node, the
    task checks (or the input check) are what it measures, and the result is always written."""

    what = "preflight"

    def __init__(self, a):
        super().__init__(a, a.log)
        self.words = a.launcher[1:] if a.launcher[:1] == ["--"] else a.launcher
        self.g = launcher.parse(self.words)  # the geometry, which the launcher it starts reads too
        self.expected = self.g.nodes * self.g.nproc_per_node
        self.out = Path(a.out)
        self.work = self.out.with_suffix(".d")
        self.base = [sys.executable, "-m", "workflow_scripts.cluster.launcher", *self.words]
        self.rows, self.timings, self.checked = [], {}, None

    def prepare(self):
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)

    def phase(self, name, cmd, folder=None):
        """One phase through the launcher, supervised (no progress for --timeout-s: stopped); its
        rows and, where it failed without saying why, one row that says so."""
        a = self.a
        self.say(f"preflight: {shlex.join(cmd)}")
        rc, self.timings[name] = supervise(cmd, None, a.timeout_s, folder)
        found = read_all(self.work, "node.*.json" if folder is None else "rank*.json")
        self.rows += found
        stuck = f"made no progress for {a.timeout_s:g} s (preflight.timeout_s), stopped"
        if rc is None and folder is None:
            self.rows.append(row("node_checks", FAILED, "", f"the node checks {stuck}", "see the check job's log", ""))
        elif rc is None:
            self.rows.append(hang_row(self.work, self.expected, a.timeout_s))
        elif rc != 0 and not failed(found):
            self.rows.append(
                row("launch", FAILED, "", f"the {name} exited with status {rc} and wrote no cause", f"see {a.log}", "")
            )
        return 1 if failed(self.rows) else 0

    def clear_cache(self):
        """The node checks, once on every node: the page cache cleared in self.scope and judged, the
        dataset checked (node.py)."""
        a = self.a
        if a.only_input:
            return 0
        cmd = [*self.base, "--per-node", "--", sys.executable, "-m", "workflow_scripts.preflight.node"]
        cmd += ["--out", str(self.work), f"--data={a.data}", "--level", a.level]
        cmd += [*page_cache.argv(a.cache_clear_command, self.scope), f"--python={a.python}"]
        return self.phase("node checks", cmd + (["--data-later"] if a.data_later else []))

    def measure(self):
        """The task checks on every rank and which transport NCCL used, or the input check."""
        a = self.a
        if a.only_input:
            settings = json.loads(a.input_check) if a.input_check else None
            if settings and a.data:
                self.checked = input_check(a, settings, self.base, self.work, sys.stdout, self.timings)
            return 0
        if a.only_data:
            return 0
        cmd = [*self.base, f"--python={a.python}", f"--nccl-log-dir={self.work}", "--", *shlex.split(a.python)]
        cmd += ["-m", "workflow_scripts.preflight.rank", "--framework", a.framework, "--out", str(self.work)]
        if self.phase("task checks", cmd + rank_args(a), self.work) == 0:
            # after the launcher returned: every rank's NCCL log is closed
            env = {**os.environ, **launcher.config_env(self.g.env)}
            self.rows.append(nccl_transport_row(self.work, self.g.nodes, self.expected, a.require_gpu, env))
        return 0

    def record(self, rc, stopped):
        """The result, always; a stop from outside is one of its rows, and recorded beside the log.
        A check has no second attempt: a stop that another job would not meet again (scancel, a
        node failure) leaves no result for Snakemake (exit status STOPPED_RC), the time limit one."""
        a = self.a
        if stopped:
            self.rows.append(row("job", FAILED, "", f"stopped ({stopped.cause}): {stopped.why}", "", host()))
            self.record_stop(self.work, rc, 1, stopped)
        rows = named_fixes(self.rows, a.system)
        part = "input" if a.only_input else "data" if a.only_data else "environment"
        write_json(
            self.out,
            {
                "system": a.system,
                "framework": a.framework,
                "nodes": self.g.nodes,
                "tasks": self.expected,
                "status": FAILED if failed(rows) else OK,
                "part": part,
                "seconds": self.timings,
                "rows": rows,
                "log": a.log,
                "cache_scope": self.cache_record(),
                # the input check (--only-input): each input path's capacity and the step rate (None: not made)
                "input_capacity": self.checked,
                # wall-clock start and end of this measuring job: no other ran beside it (docs/training.md#isolation)
                "started_at": self.started,
                "ended_at": time.time(),
            },
        )
        return rc if stopped and not stopped.permanent else 0


def main():
    sys.exit(PreflightJob(arg_parser().parse_args()).run())


if __name__ == "__main__":
    run_main(main)
