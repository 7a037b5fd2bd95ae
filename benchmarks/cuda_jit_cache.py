"""The CUDA JIT cache and the GPU check's first kernel on a real GPU, with PyTorch: the guard's
passing case of benchmarks/gpu_guard.py run as the pipeline runs it, three times with
CUDA_FORCE_PTX_JIT=1 (the driver ignores the machine code and compiles the build's PTX, as it must
for TensorFlow 2.15.1 on an A100/H100) into one fresh cache directory, then once without it.

    python3 benchmarks/cuda_jit_cache.py --out OUT

Per run: the job's status, the first kernel's seconds and architecture, CUDA_CACHE_PATH, the
cache's size after it; or, where the build has no PTX to compile, the recorded failure (the
guard's permanent error). Writes OUT/cuda_jit_cache.json.
"""
import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_guard import run_case  # noqa: E402


def size(path):
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file()) if path and Path(path).exists() else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = Path(a.out)
    rows = []
    for i, force in enumerate(("1", "1", "1", None)):
        if force:
            os.environ["CUDA_FORCE_PTX_JIT"] = force
        else:
            os.environ.pop("CUDA_FORCE_PTX_JIT", None)
        r = run_case(out / f"run{i}", "one task per GPU", 1, None, cache_dir=out / "cuda-jit")
        k = r["first_kernel"] or {}
        cache = (k.get("cuda_jit_cache") or {}).get("CUDA_CACHE_PATH")
        rows.append({"run": i, "CUDA_FORCE_PTX_JIT": force, "status": r["status"], "permanent": r["permanent"],
                     "arch": k.get("arch"), "first_kernel_s": k.get("seconds"), "cache": cache,
                     "cache_bytes": size(cache), "images_per_s": r["images_per_s"], "reason": r["reason"][:700]})
        print(json.dumps(rows[-1]), flush=True)
    (out / "cuda_jit_cache.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
