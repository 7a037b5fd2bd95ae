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
The input check (--only-input --input-check), a job of its own after the data check, runs the
framework's trainer on synthetic data and beside it on real data through each input path of the
sweep (input_check below; docs/preflight.md#the-input-check): a record the tables judge, never a
failure. Outside Snakemake (a benchmark), with plan/input_plan.py's settings:

    python -m workflow_scripts.preflight.preflight_job --out R.json --system S --framework pytorch \
        --python PY --log L --only-input --input-check 'JSON' [--precisions fp16] -- --nproc-per-node 1
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
from . import phase_markers as markers
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


def _steps_written(run):
    """When a check run's trainer last logged a step or a rank's record (its progress)."""
    times = [f.stat().st_mtime for f in (run / "steps.jsonl", *run.glob("rank*.json")) if f.exists()]
    return max(times) if times else None


def decode_threads_of(summary):
    """The decode threads rank 0 of a real-data run started (its summary's cpus record: TensorFlow's
    and MXNet's decode, PyTorch's DALI threads or DataLoader workers), or None."""
    threads = (summary.get("cpus") or {}).get("threads") or {}
    return next((threads[k] for k in ("decode", "dali", "loader_workers") if threads.get(k)), None)


def figures(summary):
    """What the tables read of one of the check's runs (its summary.json)."""
    return {
        "images_per_s": summary["images_per_s"],
        "gpus": summary["world_size"],
        "nodes": summary["num_nodes"],
        "ranks_per_node": summary["world_size"] // summary["num_nodes"],
        "steps": summary["timed_steps"],
        "device": summary.get("device", ""),
        "execution_mode": summary.get("execution_mode", ""),
        "error": "",
    }


def real_figures(summary):
    """figures, and what a real-data run adds: the share of its timed steps it waited for its input
    (shown, not judged: a batch fetched while the step runs stalls it only by what is left), and the
    decode threads the estimate at other numbers of ranks a node scales from."""
    return {
        **figures(summary),
        "input_wait_share": input_bound.wait_share(summary),
        "threads": decode_threads_of(summary),
    }


def input_threads(a, settings, base, log, out, timings):
    """{path: {threads_at, cpu_decoding}} from input_task.py, once on the node in the framework's
    interpreter; {} where it left no record (the verdict is then not estimated by threads)."""
    keep = ("inputs", "decoder", "device", "decode_threads", "loader_workers", "ranks_per_node")
    cmd = [*base, "--per-node", "--", *shlex.split(a.python), "-m", "workflow_scripts.preflight.input_task"]
    cmd += ["--framework", a.framework, "--settings", json.dumps({k: settings[k] for k in keep}), "--out", str(out)]
    print("preflight:", shlex.join(cmd), file=log, flush=True)
    _, timings["decode threads"] = supervise(cmd, log, a.timeout_s)
    return json.loads(out.read_text())["inputs"] if out.exists() else {}


class CheckRuns:
    """The check's runs of the trainer, one after another on this job's node, each supervised as
    the task checks are: stopped after preflight.timeout_s without a step logged."""

    def __init__(self, a, settings, base, work, log, timings):
        self.a, self.base, self.work, self.log, self.timings = a, base, work, log, timings
        self.trainer = f"workflow_scripts.train.{settings['trainer']}"

    def run(self, name, words):
        """(its summary, "") or (None, the error that left no summary of a completed run)."""
        a, run = self.a, self.work / name
        shutil.rmtree(run, ignore_errors=True)
        run.mkdir(parents=True)
        cmd = [*self.base, f"--python={a.python}", "--", *shlex.split(a.python), "-m", self.trainer, *words]
        cmd += ["--out", str(run)]
        print("preflight:", shlex.join(cmd), file=self.log, flush=True)
        rc, self.timings[name] = supervise(cmd, self.log, a.timeout_s, progress=lambda: _steps_written(run))
        for weights in run.glob("weights.*"):  # a random model's: the summary and step log are kept
            weights.unlink()
        try:
            summary = json.loads((run / "summary.json").read_text())
        except (OSError, ValueError):
            summary = {}
        if summary.get("status") == "ok" and summary.get("images_per_s"):
            return summary, ""
        why = f"made no progress for {a.timeout_s:g} s (preflight.timeout_s)" if rc is None else f"exited {rc}"
        return None, f"the run {name} {why}, see {a.log}"

    def precision(self, precision, words, threads):
        """One precision's record: its synthetic run, then its real-data run through each path."""
        summary, error = self.run(f"synthetic_{precision}", words["synthetic"])
        out = {"synthetic": figures(summary) if summary else {"images_per_s": None, "error": error}, "real": {}}
        for path, args in words["real"].items():
            summary, error = self.run(f"{path}_{precision}", args)
            found = real_figures(summary) if summary else {"images_per_s": None, "error": error}
            out["real"][path] = {**threads.get(path, {}), **found}
        return out


def input_check(a, settings, base, work, log, timings):
    """The input check (docs/preflight.md#the-input-check): per precision of the sweep (those of
    --precisions, where given), the framework's trainer on synthetic data and, beside it, on real
    data through each input path of the sweep, for preflight.input_steps timed steps each at this
    check's geometry; and the decode threads a rank gets at the sweep's other numbers of ranks a node
    (input_task.py). Returns the record the tables judge (preflight/input_rows.py,
    results/input_marks.py)."""
    threads = input_threads(a, settings, base, log, work / "input_threads.json", timings)
    runs = CheckRuns(a, settings, base, work, log, timings)
    record = {
        p: runs.precision(p, words, threads)
        for p, words in settings["runs"].items()
        if not a.precisions or p in a.precisions
    }
    keep = ("inputs", "precisions", "counts", "ranks_per_node", "device", "decoder", "input_steps")
    return {"settings": {k: settings[k] for k in keep}, "node": host(), "runs": record}


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
    r.add_argument(
        "--precisions",
        nargs="*",
        default=[],
        help="the task checks' (fp32 always) and, with --only-input, which of the settings' precisions the input "
        "check runs (none given: all of them)",
    )
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
            if settings:
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
                # the input check (--only-input): its runs on synthetic and on real data (None: not made)
                "input_check": self.checked,
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
