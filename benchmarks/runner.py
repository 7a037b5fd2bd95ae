"""How benchmarks/pytorch_gpu.py runs a plan's items: the trainer's command line for a variant,
one run (logged, side by side on several GPUs, or the long test) and the parts that are not the
trainer (benchmarks/gpu_parts.py), each in a child process with a time limit."""

import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import figures

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
TRAINER = "workflow_scripts.train.pytorch_ddp"


def trainer_command(v, work, a):
    run_dir = work / "runs" / v["name"]
    mode = (
        ["--mode", "accuracy", "--epochs", str(v["epochs"]), "--eval-every", "1"]
        if v.get("epochs")
        else ["--mode", "steps", "--warmup-steps", str(a.warmup), "--steps", str(v.get("steps") or a.steps)]
    )
    lmdb = {"real": work / "lmdb", "capped": work / "lmdb-capped"}.get(v["data"])
    args = [
        "--data-source",
        "real" if lmdb else "synthetic",
        "--precision",
        a.precision,
        "--batch-per-gpu",
        str(a.batch),
        "--image-size",
        str(a.image_size),
        *mode,
        "--lr",
        "0.1",
        "--momentum",
        "0.9",
        "--weight-decay",
        "0.0001",
        "--seed",
        "0",
        "--telemetry-interval",
        "1.0",
        *v["words"],
    ]
    args += ["--data", str(lmdb)] if lmdb else ["--classes", "1000"]
    cmd = [PY, "-m", TRAINER, *args, "--out", str(run_dir)]
    if v["gpus"] > 1:
        launch = ["--nproc-per-node", str(v["gpus"]), *v.get("launch", ())]
        cmd = [PY, "-m", "workflow_scripts.cluster.launcher", *launch, "--", *cmd]
    return cmd, run_dir


def part_command(name, a, work):
    return [
        PY,
        "-m",
        "benchmarks.pytorch_gpu",
        "--part",
        name,
        "--work",
        str(work),
        "--batch",
        str(a.batch),
        "--image-size",
        str(a.image_size),
        "--gpus",
        str(a.gpus),
    ]


def shown(cmd, work):
    """cmd as a person would type it: python3, paths under the work directory relative."""
    return shlex.join("python3" if c == PY else os.path.relpath(c, REPO) if c.startswith(str(work)) else c for c in cmd)


def _run(cmd, timeout, env=None):
    """Run cmd in its own process group and, past the timeout, end the whole group: a launcher's
    ranks must not outlive it holding the GPU."""
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, **env} if env else None,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything of the group still alive
        except ProcessLookupError:
            pass
    return proc.returncode, output


def run_side_by_side(v, work, a, timeout):
    """v's one-GPU command on each of v['side_by_side'] GPUs at the same time; images/s summed."""
    procs, dirs = [], []
    for k in range(v["side_by_side"]):
        cmd, run_dir = trainer_command({**v, "name": f"{v['name']}_gpu{k}"}, work, a)
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(k)}
        procs.append(
            subprocess.Popen(
                cmd,
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        )
        dirs.append(run_dir)
    t = time.perf_counter()
    outputs = []
    for p in procs:
        try:
            outputs.append(p.communicate(timeout=max(1, timeout - (time.perf_counter() - t)))[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                os.killpg(q.pid, signal.SIGKILL)
            raise
    res = {
        **v,
        "batch": a.batch,
        "wall_s": time.perf_counter() - t,
        "command": f"{v['side_by_side']} x (CUDA_VISIBLE_DEVICES=k {shown(cmd, work)})",
    }
    if any(p.returncode for p in procs) or not all((d / "summary.json").exists() for d in dirs):
        return {**res, "status": "failed", "error": "\n".join(o[-1200:] for o in outputs)}
    sums = [json.loads((d / "summary.json").read_text()) for d in dirs]
    logs = [[json.loads(line) for line in (d / "steps.jsonl").read_text().splitlines()] for d in dirs]
    # The runs compile for different times: how much of their timed windows (monotonic clock,
    # one per host) actually ran at the same time.
    windows = [
        (
            min(x["t_end"] - x["wall_s"] for x in lg if x["phase"] == "timed"),
            max(x["t_end"] for x in lg if x["phase"] == "timed"),
        )
        for lg in logs
    ]
    common = max(0.0, min(w[1] for w in windows) - max(w[0] for w in windows))
    overlap = common / (max(w[1] for w in windows) - min(w[0] for w in windows))
    return {
        **res,
        "status": "ok",
        "images_per_s": sum(s["images_per_s"] for s in sums),
        "per_gpu": statistics.fmean(s["images_per_s"] for s in sums),
        "each": [s["images_per_s"] for s in sums],
        "step_cv": max(s["step_images_per_s_cv"] for s in sums),
        "stable": all(s["stable"] for s in sums),
        "settings": sums[0].get("pytorch"),
        "input_wait_fraction": 0.0,
        "losses": [x["loss"] for x in logs[0]],
        "step_wall_s": [x["wall_s"] for x in logs[0]],
        "gpus": v["side_by_side"],
        "loss_falls": True,
        "device": sums[0].get("device"),
        "timed_overlap": overlap,
    }


def run_logged(v, work, a, timeout):
    """v's trainer command, its output kept in WORK/logs. -> (run directory, exit code, output,
    the result's first fields: v, the command as shown, wall seconds)."""
    cmd, run_dir = trainer_command(v, work, a)
    shutil.rmtree(run_dir, ignore_errors=True)
    t = time.perf_counter()
    code, output = _run(cmd, timeout)
    wall = time.perf_counter() - t
    (work / "logs").mkdir(exist_ok=True)
    (work / "logs" / f"{v['name']}.log").write_text(output)
    return (
        run_dir,
        code,
        output,
        {**v, "batch": a.batch, "command": shown(cmd, work), "wall_s": wall, "exit_code": code},
    )


def run_long_test(t, work, a, timeout):
    """One long test (pytorch_ddp --mode accuracy) on the real LMDB; its epochs' records."""
    run_dir, code, output, res = run_logged(t, work, a, timeout)
    summary, epochs = run_dir / "summary.json", run_dir / "epochs.jsonl"
    if code or not summary.exists() or not epochs.exists():
        return {**res, "status": "failed", "error": output[-2500:]}
    s = json.loads(summary.read_text())
    return {
        **res,
        "status": "ok",
        "settings": s.get("pytorch"),
        "long_test": s.get("long_test"),
        "epochs_run": [json.loads(line) for line in epochs.read_text().splitlines()],
    }


def run_variant(v, work, a, timeout):
    if v.get("side_by_side"):
        return run_side_by_side(v, work, a, timeout)
    run_dir, code, output, res = run_logged(v, work, a, timeout)
    summary = run_dir / "summary.json"
    if code or not summary.exists():
        return {**res, "status": "failed", "error": output[-2500:]}
    s = json.loads(summary.read_text())
    steps = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    losses = [x["loss"] for x in steps]
    kept = Path(a.out) / f"run_{v['name']}"  # the run's own files, to line its steps up with its telemetry
    kept.mkdir(parents=True, exist_ok=True)
    for f in [summary, run_dir / "steps.jsonl", *run_dir.glob("telemetry.*.csv")]:
        shutil.copy(f, kept / f.name)
    per_step = {
        f"step_{k}": [x.get(k) for x in steps]
        for k in ("wall_s", "input_wait_s", "thread_cpu_s", "runqueue_wait_s", "device_s")
    }
    return {
        **res,
        **per_step,
        "status": "ok",
        "images_per_s": s["images_per_s"],
        "per_gpu": s["images_per_s"] / v["gpus"],
        "step_cv": s["step_images_per_s_cv"],
        "window_cv": s.get("window_images_per_s_cv"),
        "stable": s["stable"],
        "device": s.get("device"),
        "settings": s.get("pytorch"),
        "workers": s.get("loader_workers"),
        "input_wait_fraction": s.get("input_wait_s_timed", 0) / s["seconds_timed"],
        "max_memory_gb": s.get("max_memory_allocated_gb"),
        "losses": losses,
        "loss_falls": statistics.fmean(losses[-5:]) < statistics.fmean(losses[:3]),
        "versions": s.get("versions"),
        "gpu_input": s.get("gpu_input"),
        "gpu_clocks": figures.gpu_clocks(run_dir, s["seconds_timed"]),
    }


def run_part(name, a, work, timeout):
    """An in-process part in its own process, so this one never holds the GPU."""
    out = work / f"part_{name}.json"
    out.unlink(missing_ok=True)
    t = time.perf_counter()
    code, output = _run(part_command(name, a, work), timeout)
    res = {"wall_s": time.perf_counter() - t}
    if code or not out.exists():
        return {**res, "status": "failed", "error": output[-2500:]}
    return {**res, "status": "ok", **json.loads(out.read_text())}
