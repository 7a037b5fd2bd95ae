"""The pipeline itself on one GPU: `snakemake preflight`, then `snakemake
results/training_throughput.csv` for PyTorch on the embedded default at 224 px, on a workstation
system (a GPU request, no SLURM), and the same trainer command run bare in the same call, so the
pipeline's images/s can be read against the trainer's own.

    python3 benchmarks/pipeline_gpu.py --out OUT [--inputs synthetic gpu] [--budget-s 540]

Every interpreter is this one (python3 with torch); snakemake and lmdb come from wheels carried
beside it (docs/benchmarks.md says how). Writes OUT/pipeline_gpu.json (the table's figures) and
OUT/pipeline_gpu.tgz (the workflow's tables, summaries, preflight results and logs).
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
TRAINER = "workflow_scripts.train.pytorch_ddp"


def overlay(inputs, batch, steps, warmup):
    py = sys.executable
    return {
        "envs": {k: py for k in ("workflow", "tensorflow", "mxnet", "pytorch")},
        "envs_gpu": {k: py for k in ("tensorflow", "mxnet", "pytorch")},
        "systems": {
            "gpu1": {
                "gpus_per_node": 1,
                "max_nodes": 1,
                "gpu_request": "gpus-per-node",
                "cpus_per_task": os.cpu_count(),
            }
        },
        "training": {
            "systems": ["gpu1"],
            "frameworks": ["pytorch"],
            "gpus": [1],
            "inputs": inputs,
            "precisions": ["fp16"],
            "image_size": 224,
            "batch_per_gpu": {"pytorch": batch},
            "warmup_steps": warmup,
            "steps": steps,
            "long_test": {"gpus": []},
        },
    }


def snakemake(work, *args, timeout):
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(work),
        "--configfile",
        str(REPO / "config.yaml"),
        str(work / "gpu.yaml"),
        "--cores",
        "all",
        "--scheduler",
        "greedy",
        *args,
    ]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    (work / "snakemake.log").open("a").write(f"$ {shlex.join(cmd)}\n{proc.stdout}\n{proc.stderr}\n")
    return proc, time.perf_counter() - start


def trainer_commands(work, timeout):
    """{run dir name: the trainer's arguments} of the training jobs, as the workflow words them."""
    proc, _ = snakemake(work, "results/training_throughput.csv", "-n", "-p", "--forcerun", "train", timeout=timeout)
    out = {}
    for line in (proc.stdout + proc.stderr).splitlines():
        if f"-- {TRAINER} " not in line:
            continue
        words = shlex.split(line)
        run = Path(words[words.index("--run-dir") + 1]).name
        out[run] = words[words.index(TRAINER) + 1 :]
    return out


def figures(summary_path):
    s = json.loads(Path(summary_path).read_text())
    return {
        "status": s.get("status"),
        "images_per_s": s.get("images_per_s"),
        "cv": s.get("step_images_per_s_cv"),
        "device": s.get("device"),
        "input": s.get("input"),
        "reason": s.get("reason"),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--inputs", nargs="+", default=["synthetic", "gpu"])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=540, help="bare runs are skipped past this")
    ap.add_argument("--dry-run", action="store_true", help="check the arguments, print them and stop")
    a = ap.parse_args(argv)
    if a.dry_run:
        print(vars(a))
        return
    start = time.perf_counter()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path("/tmp/dlscale-pipeline-gpu")
    work.mkdir(parents=True, exist_ok=True)
    (work / "gpu.yaml").write_text(yaml.safe_dump(overlay(a.inputs, a.batch, a.steps, a.warmup)))
    record = {"inputs": a.inputs, "batch": a.batch, "steps": a.steps, "warmup": a.warmup, "stages": {}}
    for target in ("preflight", "results/training_throughput.csv"):
        proc, seconds = snakemake(work, target, timeout=max(60, a.budget_s - (time.perf_counter() - start)))
        record["stages"][target] = {"exit": proc.returncode, "seconds": round(seconds, 1)}
        print(f"snakemake {target}: exit {proc.returncode} in {seconds:.0f} s", flush=True)
        if proc.returncode:
            print(proc.stdout[-3000:], proc.stderr[-3000:])
            break
    runs = sorted((work / "results" / "runs" / "gpu1").glob("pytorch_*/summary.json"))
    record["pipeline"] = {p.parent.name: figures(p) for p in runs}
    record["bare"] = {}
    for run, args in trainer_commands(work, timeout=120).items():
        if time.perf_counter() - start > a.budget_s - 90:
            print(f"bare {run}: skipped (budget)")
            continue
        bare = work / "bare" / run
        i = args.index("--out") if "--out" in args else None
        args = args[:i] + args[i + 2 :] if i is not None else args
        proc = subprocess.run(
            [sys.executable, "-m", TRAINER, *args, "--out", str(bare)],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=300,
        )
        record["bare"][run] = (
            figures(bare / "summary.json")
            if (bare / "summary.json").exists()
            else {"status": f"exit {proc.returncode}", "reason": proc.stderr[-500:]}
        )
    print(f"{'run':32s} {'pipeline images/s':>18s} {'CV':>6s} {'bare images/s':>14s} {'CV':>6s}  device")
    for run, p in record["pipeline"].items():
        b = record["bare"].get(run, {})
        fmt = lambda v, f: format(v, f) if isinstance(v, (int, float)) else "-"  # noqa: E731
        print(
            f"{run:32s} {fmt(p['images_per_s'], '18,.1f')} {fmt(p['cv'], '6.1%')} "
            f"{fmt(b.get('images_per_s'), '14,.1f')} {fmt(b.get('cv'), '6.1%')}  {p['device']}"
        )
    (out / "pipeline_gpu.json").write_text(json.dumps(record, indent=1))
    with tarfile.open(out / "pipeline_gpu.tgz", "w:gz") as tar:
        for rel in ("results", "logs", "snakemake.log", "gpu.yaml", "bare"):
            if (work / rel).exists():
                tar.add(work / rel, arcname=rel, filter=lambda t: None if t.name.endswith((".pt", ".mdb")) else t)
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
