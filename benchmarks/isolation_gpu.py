"""What a run records of its neighbours and of NCCL on a GPU machine (issue 39): the pipeline's own
training job (workflow_scripts/train/training_job.py) for PyTorch on synthetic data, alone on 1 and on 2
GPUs, then on 1 GPU beside another process computing on the same GPU; and the interconnect
measurement on 2 GPUs. Each item prints what its summary says: images/s, step CV, isolated and
why, what fp32 and fp16 ran as, the GPUs' clock limiters, and the transport NCCL chose.

    python3 -m benchmarks.isolation_gpu --out OUT [--steps 50] [--budget-s 540] [--dry-run]

Every interpreter is this one (python3 with torch, psutil, nvidia-ml-py). Writes into OUT each
item's summary (<item>.summary.json), the interconnect's JSON, one rank's NCCL log, and
isolation_gpu.md (the table); the run directories stay under --work.
"""

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRAINER = "workflow_scripts.train.pytorch_ddp"
# The neighbour: matrix products on GPU 0 for as long as the item runs.
NEIGHBOUR = "\n".join(
    [
        "import torch",
        "x = torch.randn(8192, 8192, device='cuda:0')",
        "while True:",
        "    y = x @ x",
        "    torch.cuda.synchronize()",
    ]
)


def items(steps):
    """(name, GPUs, whether a neighbour computes on GPU 0) of the training items."""
    return [("alone_1gpu", 1, False), ("alone_2gpu", 2, False), ("neighbour_1gpu", 1, True)]


def job_command(work, name, gpus, steps):
    run = work / "results" / "runs" / "gpu" / name
    return run, [
        sys.executable,
        "-m",
        "workflow_scripts.train.training_job",
        "--run-dir",
        str(run),
        "--results-dir",
        str(work / "results"),
        "--log",
        str(work / "logs" / f"{name}.log"),
        "--cache-scope=dataset",
        f"--python={shlex.quote(sys.executable)}",
        f"--nproc-per-node={gpus}",
        "--",
        TRAINER,
        "--data-source=synthetic",
        "--classes=1000",
        "--precision=fp16",
        "--batch-per-gpu=256",
        "--image-size=224",
        "--warmup-steps=10",
        f"--steps={steps}",
        "--telemetry-interval=1",
        "--require-gpu",
        "--env-key=envs_gpu.pytorch",
    ]


def interconnect_command(work):
    out = work / "results" / "interconnect" / "gpu" / "2gpu"
    return out, [
        sys.executable,
        "-m",
        "workflow_scripts.cluster.launcher",
        "--nproc-per-node=2",
        f"--nccl-log-dir={out / 'nccl_logs'}",
        "--",
        sys.executable,
        "-m",
        "workflow_scripts.interconnect.collectives",
        "--device",
        "cuda",
        "--max-bytes",
        str(2**30),
        "--out",
        str(out / "torch.json"),
    ]


def row(name, summary):
    iso, math, nccl = summary.get("isolation", {}), summary.get("math", {}), summary.get("nccl") or {}
    limiters = {
        gpu: ", ".join(f"{k} {v:.0%}" for k, v in g["limiters"].items()) or "none"
        for gpu, g in ((summary.get("gpu_state") or {}).get("gpus") or {}).items()
    }
    return {
        "item": name,
        "images_per_s": round(summary["images_per_s"], 1),
        "step_cv": f"{summary['step_images_per_s_cv']:.1%}",
        "isolated": iso.get("isolated"),
        "why": iso.get("why", ""),
        "ran_as": math.get("ran_as", ""),
        "limiters": "; ".join(f"{g}: {v}" for g, v in limiters.items()),
        "xid": len((summary.get("gpu_state") or {}).get("xid") or []),
        "transport": nccl.get("described", "no NCCL (one process)"),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/isolation_gpu", help="the run directories")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    a = ap.parse_args(argv)
    out, work = Path(a.out), Path(a.work)
    commands = [(n, g, beside, *job_command(work, n, g, a.steps)) for n, g, beside in items(a.steps)]
    ic_out, ic = interconnect_command(work)
    if a.dry_run:
        for name, _, neighbour, _, cmd in commands:
            beside = f"beside {sys.executable} -c <GPU 0 matrix products>; " if neighbour else ""
            print(f"{name}: {beside}{shlex.join(cmd)}")
        print("interconnect_2gpu: " + shlex.join(ic))
        return
    out.mkdir(parents=True, exist_ok=True)
    start, rows = time.time(), []
    for name, _, neighbour, run, cmd in commands:
        if time.time() - start > a.budget_s:
            rows.append({"item": name, "why": "skipped: budget spent"})
            continue
        other = subprocess.Popen([sys.executable, "-c", NEIGHBOUR]) if neighbour else None
        try:
            if other:
                time.sleep(10)  # its CUDA context up and computing before the run starts
            proc = subprocess.run(cmd, cwd=REPO, timeout=max(60, a.budget_s - (time.time() - start)))
        finally:
            if other:
                other.kill()
                other.wait()
        summary_path = run / "summary.json"
        if proc.returncode != 0 or not summary_path.exists():
            rows.append({"item": name, "why": f"failed ({proc.returncode}): see {work / 'logs' / (name + '.log')}"})
            continue
        shutil.copyfile(summary_path, out / f"{name}.summary.json")
        summary = json.loads(summary_path.read_text())
        rows.append(row(name, summary))
        logs = sorted(run.glob("nccl.*.log"))
        if logs and not (out / "nccl.rank.log").exists():
            shutil.copyfile(logs[0], out / "nccl.rank.log")
    if time.time() - start < a.budget_s:
        subprocess.run(ic, cwd=REPO, check=False)
        subprocess.run(
            [sys.executable, "-m", "workflow_scripts.cluster.nccl_log", str(ic_out / "nccl_logs")]
            + ["--into", str(ic_out / "torch.json")],
            cwd=REPO,
            check=False,
        )
        if (ic_out / "torch.json").exists():
            raw = json.loads((ic_out / "torch.json").read_text())
            shutil.copyfile(ic_out / "torch.json", out / "interconnect_2gpu.json")
            big = max((r for r in raw["results"] if r["collective"] == "all_reduce"), key=lambda r: r["bytes"])
            from workflow_scripts.cluster import nccl_log

            rows.append(
                {
                    "item": "interconnect_2gpu",
                    "why": f"all-reduce {big['bytes']} B: busbw {big['busbw_GBps']:.1f} GB/s "
                    f"(median of {raw['iterations']})",
                    "transport": nccl_log.describe(raw.get("nccl"), raw.get("nccl_env")),
                }
            )
    keys = ["item", "images_per_s", "step_cv", "isolated", "ran_as", "transport", "limiters", "xid", "why"]
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(r.get(k, "")).replace("|", "/") for k in keys) + " |" for r in rows]
    (out / "isolation_gpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
