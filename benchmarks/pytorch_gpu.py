"""PyTorch ResNet-50 training throughput on GPUs: the plans of benchmarks/plans.py, each run the
project's trainer itself (pytorch_ddp, through workflow_scripts.train.launch on several GPUs).

    python3 -m benchmarks.pytorch_gpu --list                             # the plans, what each measures
    python3 -m benchmarks.pytorch_gpu --plan inputs --dry-run            # its commands, flags checked, no GPU
    python3 -m benchmarks.pytorch_gpu --plan inputs --out OUT --budget-s 530
    python3 -m benchmarks.pytorch_gpu --plan scaling --gpus 2 --out OUT --budget-s 530

One call runs a plan's items in order within --budget-s; what does not fit is recorded as skipped,
never silently dropped. A run's images/s is its summary.json's: images timed / seconds timed over
the timed steps after the warm-up steps (which hold compilation and cuDNN tuning). Writes
OUT/results.json (everything, per-step times included), OUT/results.md (tables) and, per run,
OUT/run_<name>/ (its summary, steps and telemetry).
"""

import argparse
import contextlib
import io
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

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a file, not with -m from the repository
    sys.path.insert(0, str(REPO))

from benchmarks import figures, gpu_parts, plans, printing  # noqa: E402
from workflow_scripts.common.multicast import MULTICAST_OFF as SAFE_ENV  # noqa: E402

PY = sys.executable
TRAINER = "workflow_scripts.train.pytorch_ddp"


def trainer_command(v, work, a):
    run_dir = work / "runs" / v["name"]
    mode = (
        ["--mode", "accuracy", "--epochs", str(v["epochs"]), "--eval-every", "1"]
        if v.get("epochs")
        else ["--mode", "steps", "--warmup-steps", str(a.warmup), "--steps", str(v.get("steps") or a.steps)]
    )
    args = [
        "--data-source",
        v["data"],
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
    args += ["--data", str(work / "lmdb")] if v["data"] == "real" else ["--classes", "1000"]
    cmd = [PY, "-m", TRAINER, *args, "--out", str(run_dir)]
    if v["gpus"] > 1:
        cmd = [PY, "-m", "workflow_scripts.train.launch", "--nproc-per-node", str(v["gpus"]), "--", *cmd]
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


def _smi(*args, tool="nvidia-smi"):
    try:
        return subprocess.run([tool, *args], capture_output=True, text=True, timeout=60).stdout.strip()
    except OSError:
        return ""


def arg_parser():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", choices=sorted(plans.PLANS), help="benchmarks/plans.py; --list says what each measures")
    ap.add_argument("--list", action="store_true", help="print the plans and what each measures")
    ap.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan's commands, each trainer command checked against the trainer's own flags",
    )
    ap.add_argument("--gpus", type=int, default=2, help="GPUs of the plan's multi-GPU runs")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "pytorch_gpu"))
    ap.add_argument("--work", default=str(REPO / "benchmarks" / "out" / "gpu-work"))
    ap.add_argument("--budget-s", type=float, default=560, help="stop starting new work after this")
    ap.add_argument("--only", default="", help="comma-separated names of the plan's items")
    ap.add_argument("--classes", type=int, default=32)
    ap.add_argument("--per-class", type=int, default=128)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--batch", type=int, default=256, help="per GPU")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--precision", choices=("fp32", "fp16"), default="fp16")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=100, help="timed steps (the study's short test)")
    ap.add_argument("--part", choices=sorted(gpu_parts.PARTS), help=argparse.SUPPRESS)
    return ap


def selected(a):
    """The plan's items that --only names; an unknown name is an error, not an empty call."""
    items = plans.items(a.plan, a.gpus)
    only = set(filter(None, a.only.split(",")))
    unknown = only - {i["name"] for i in items}
    if unknown:
        raise SystemExit(
            f"--only: {', '.join(sorted(unknown))} not in plan {a.plan} ({', '.join(i['name'] for i in items)})"
        )
    return [i for i in items if not only or i["name"] in only]


def dry_run(a, items, work):
    """Each item's command; every trainer command parsed by pytorch_ddp's own parser, so a plan that
    gives the trainer a flag it no longer has fails here, on any machine with torch."""
    parser = gpu_parts.trainer_parser()
    print(f"# plan {a.plan}: {plans.PLANS[a.plan]['measures']}")
    for item in items:
        if item["kind"] == "part":
            print(f"# {item['name']} (about {item['est_s']} s)\n{shown(part_command(item['name'], a, work), work)}")
            continue
        cmd, _ = trainer_command(item, work, a)
        words = cmd[cmd.index(TRAINER) + 1 :]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                parser.parse_args(words)
        except SystemExit:
            raise SystemExit(
                f"plan {a.plan}, {item['name']}: the trainer refuses its command: "
                f"{err.getvalue().strip().splitlines()[-1]}"
            ) from None
        many = f"{item['side_by_side']} x side by side, " if item.get("side_by_side") else ""
        print(f"# {item['name']} ({many}about {item['est_s']} s)\n{shown(cmd, work)}")


def main(argv=None):
    a = arg_parser().parse_args(argv)
    work = Path(a.work)
    if a.list:
        for name, plan in plans.PLANS.items():
            print(f"{name}: {plan['measures']}\n    {', '.join(i['name'] for i in plans.items(name, a.gpus))}")
        return
    if a.part:
        work.mkdir(parents=True, exist_ok=True)
        (work / f"part_{a.part}.json").write_text(json.dumps(gpu_parts.PARTS[a.part](a, work)))
        return
    if not a.plan:
        raise SystemExit("--plan NAME (or --list)")
    items = selected(a)
    if a.dry_run:
        dry_run(a, items, work)
        return
    os.environ.update(SAFE_ENV)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(work / "inductor-cache"))
    work.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {
        "plan": a.plan,
        "measures": plans.PLANS[a.plan]["measures"],
        "argv": sys.argv[1:] if argv is None else argv,
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "budget_s": a.budget_s,
        "warmup_steps": a.warmup,
        "timed_steps": a.steps,
        "batch_per_gpu": a.batch,
        "image_size": a.image_size,
        "cpus": os.cpu_count(),
        "variants": [],
    }
    results["nvidia_smi"] = _smi(
        "--query-gpu=name,memory.total,clocks.max.sm,power.limit,driver_version", "--format=csv,noheader"
    ).splitlines()
    results["gpu"] = results["nvidia_smi"][0].split(",")[0] if results["nvidia_smi"] else "no GPU"
    results["topology"] = _smi("topo", "-m")
    # which of the cores DALI's threads and the training thread share are one physical core's
    results["cpu_topology"] = _smi("--extended=CPU,CORE,SOCKET,NODE", tool="lscpu")

    def left():
        return a.budget_s - (time.perf_counter() - start)

    def save():
        results["elapsed_s"] = time.perf_counter() - start
        results["derived"] = figures.derive(results)
        (out / "results.json").write_text(json.dumps(results, indent=1))
        (out / "results.md").write_text(printing.results_md(results))

    if any(i.get("data") == "real" or i["name"] in ("loaders", "check") for i in items):
        t = time.perf_counter()
        results["data"] = gpu_parts.part_data(a, work)
        print(f"data: {results['data']} ({time.perf_counter() - t:.0f} s)", flush=True)
    for item in items:
        kind, name = item["kind"], item["name"]
        try:
            if left() < item["est_s"]:
                raise TimeoutError(f"time budget: {left():.0f} s left, about {item['est_s']} s needed")
            if kind == "variant":
                r = run_variant(item, work, a, timeout=max(30, left() + 30))
                print(
                    f"{name}: {r['status']} {r.get('images_per_s', 0):.0f} images/s ({r['wall_s']:.0f} s)", flush=True
                )
            elif kind == "long_test":
                r = run_long_test(item, work, a, timeout=max(30, left() + 30))
                print(f"{name}: {r['status']} ({r['wall_s']:.0f} s)", flush=True)
            else:
                r = run_part(name, a, work, timeout=max(30, left() + 30))
                print(f"{name}: {r['status']} ({r['wall_s']:.0f} s)", flush=True)
        except TimeoutError as exc:
            r = {**item, "status": "skipped", "reason": str(exc)}
            print(f"{name}: skipped", flush=True)
        except subprocess.TimeoutExpired:
            r = {**item, "status": "timeout", "reason": "ran past the time budget"}
            print(f"{name}: timeout", flush=True)
        if kind == "variant":
            results["variants"].append(r)
        elif kind == "long_test":
            results.setdefault("long_tests", []).append(r)
        else:
            results[name] = r
        save()
    save()
    print(printing.results_md(results))


if __name__ == "__main__":
    main()
