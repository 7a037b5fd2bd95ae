"""The GPU check of a GPU system's training job, on a real GPU: the PyTorch job as the pipeline
runs it (workflow_scripts.train.job -> launcher -> pytorch_ddp --require-gpu), once where it must
pass and twice where it must stop before training, plus what torch.distributed reports of NCCL.
Where it passes, the summary's first kernel on the GPU (its time includes loading its code) and
the CUDA JIT cache the launcher gave the ranks (under OUT/cuda-jit).

    python3 benchmarks/gpu_guard.py --out OUT

Prints a table and writes OUT/gpu_guard.json. Each case is a short synthetic run (eager, 64 px).
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
TRAIN = ["--data-source", "synthetic", "--classes", "16", "--batch-per-gpu", "32", "--image-size", "64",
         "--warmup-steps", "2", "--steps", "5", "--compile", "off", "--telemetry-interval", "0",
         "--require-gpu", "--env-key", "envs_gpu.pytorch"]
CASES = [  # name, tasks on the node, CUDA_VISIBLE_DEVICES (None: as it is), expected status
    ("one task per GPU", 1, None, "ok"),
    ("two tasks, one GPU", 2, None, "failed"),
    ("no GPU visible", 1, "", "failed"),
]


def run_case(out, name, tasks, visible, cache_dir=None):
    run = out / "runs" / name.replace(" ", "_").replace(",", "")
    env = dict(os.environ, **SAFE_ENV)
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    cmd = [sys.executable, "-m", "workflow_scripts.train.job", "--run-dir", str(run), "--results-dir", str(out / "runs"),
           "--log", str(out / "logs" / f"{run.name}.log"), "--attempt", "1", "--retries", "0",
           f"--python={sys.executable}", f"--nproc-per-node={tasks}",
           f"--cuda-cache-dir={cache_dir or out / 'cuda-jit'}", "--",
           "workflow_scripts.train.pytorch_ddp", *TRAIN]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
    return {"case": name, "tasks": tasks, "CUDA_VISIBLE_DEVICES": visible, "job_exit": proc.returncode,
            "status": summary.get("status", "no summary"), "device": summary.get("device"),
            "device_type": summary.get("device_type"), "images_per_s": summary.get("images_per_s"),
            "reason": summary.get("reason", ""), "permanent": summary.get("permanent"),
            "first_kernel": summary.get("first_kernel"), "steps_logged": _lines(run / "steps.jsonl")}


def _lines(path):
    return len(path.read_text().splitlines()) if path.exists() else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch
    import torch.distributed as dist

    facts = {"torch": torch.__version__, "cuda_available": torch.cuda.is_available(),
             "gpus": torch.cuda.device_count(), "nccl_available": dist.is_nccl_available(),
             "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if dist.is_nccl_available() else None}
    rows = [{**run_case(out, name, tasks, visible), "expected": expected} for name, tasks, visible, expected in CASES]
    (out / "gpu_guard.json").write_text(json.dumps({"facts": facts, "cases": rows}, indent=1))
    print(json.dumps(facts))
    print("| case | tasks | expected | status | device | first kernel | images/s | steps logged | reason |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ips = f"{r['images_per_s']:.0f}" if r["images_per_s"] else "-"
        k = r["first_kernel"]
        kernel = f"{k['arch']}, {k['seconds'] * 1e3:.1f} ms" if k else "-"
        print(f"| {r['case']} | {r['tasks']} | {r['expected']} | {r['status']} | {r['device']} | {kernel} | {ips} | "
              f"{r['steps_logged']} | {r['reason'][:160]} |")
    for r in rows:
        if r["first_kernel"]:
            print(json.dumps(r["first_kernel"]))


if __name__ == "__main__":
    main()
