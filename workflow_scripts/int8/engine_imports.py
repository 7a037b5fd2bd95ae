"""Whether an interpreter can run the TensorRT engine's jobs: run with that interpreter, it prints
what it imports as one JSON line (TensorRT's version, whether pycuda's driver module imports, the
CUDA version its torch was built for), and says which TensorRT build fits it and the command that
installs it (envs/tensorrt.sh). The workflow runs it before any INT8 GPU job is submitted
(plan/tensorrt_check.py); tensorrt_engine.require() names the same fix inside a job.

Nothing here needs a GPU: a login node without a driver answers too. A package that is installed
but whose libraries need the driver to load (libcuda.so.1) counts as installed there: it loads on
the GPU node."""

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import re
import sys
from pathlib import Path

from ..common.atomic import write_json

MIN_MAJOR = 10  # name-based I/O and execute_async_v3 (tensorrt_engine.py)
# TensorRT's builds by CUDA major version (docs/slurm.md, the INT8 column)
BUILDS = {"12": "tensorrt-cu12", "13": "tensorrt-cu13"}
CUDA13_DRIVER = 580  # CUDA 13's minor-version compatibility (envs/arch_lists.json)
DRIVER_ONLY = "libcuda.so"  # a library only the driver installs: missing on a login node


def torch_cuda():
    """The CUDA version this interpreter's torch was built for ('12.6'), read from torch/version.py
    without importing torch; None without torch or for a CPU build."""
    spec = importlib.util.find_spec("torch")
    if not spec or not spec.submodule_search_locations:
        return None
    try:
        text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    except OSError:
        return None
    found = re.search(r"^cuda\b[^=\n]*=\s*['\"]([\d.]+)['\"]", text, re.M)
    return found.group(1) if found else None


def installed_version(names=("tensorrt", *BUILDS.values())):
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def imported(module):
    """(the module, None) or (None, why not); a library that only a GPU node's driver lets load
    is (True, None)."""
    try:
        return importlib.import_module(module), None
    except Exception as exc:  # ImportError, or an OSError of a shared library: either way, why
        if DRIVER_ONLY in str(exc) and importlib.util.find_spec(module.split(".")[0]):
            return True, None
        return None, f"{type(exc).__name__}: {exc}"


def report():
    """What this interpreter imports of the engine's packages."""
    trt, trt_error = imported("tensorrt")
    version = getattr(trt, "__version__", None) or (installed_version() if trt else None)
    driver, pycuda_error = imported("pycuda.driver")
    return {
        "python": sys.executable,
        "tensorrt": version,
        "tensorrt_error": trt_error,
        "pycuda": bool(driver),
        "pycuda_error": pycuda_error,
        "torch_cuda": torch_cuda(),
    }


def missing(r):
    """Why the engine's jobs cannot run with this report's interpreter, or None."""
    why = []
    if not r["tensorrt"]:
        why.append(f"tensorrt does not import ({r['tensorrt_error']})")
    elif int(r["tensorrt"].split(".")[0]) < MIN_MAJOR:
        why.append(f"tensorrt is {r['tensorrt']}, the engine needs >= {MIN_MAJOR}")
    if not r["pycuda"]:
        why.append(f"pycuda does not import ({r['pycuda_error']})")
    return "; ".join(why) or None


def driver(version_file="/proc/driver/nvidia/version"):
    """The branch of this node's NVIDIA driver (535), None where there is none (a login node)."""
    try:
        found = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+)\.", Path(version_file).read_text())
    except OSError:
        return None
    return int(found.group(1)) if found else None


def fix(python, cuda, branch=None):
    """The TensorRT build that fits an interpreter whose torch is built for CUDA `cuda`, with the
    driver that build needs and the command that installs it and pycuda there; where the node's
    driver `branch` is known and too old for that CUDA, the CUDA 12 route instead."""
    major = (cuda or "").split(".")[0]
    command = f"bash envs/tensorrt.sh {python}"
    if major == "13" and branch is not None and branch < CUDA13_DRIVER:
        return (
            f"its torch is built for CUDA {cuda}, which this node's driver R{branch} cannot run (CUDA 13 needs "
            f"R{CUDA13_DRIVER} or newer): give the system the CUDA 12 route, .envs/torch-cu126/bin/python (bash "
            f"envs/setup.sh --torch-cu126), and TensorRT's CUDA 12 build in it: bash envs/tensorrt.sh "
            f".envs/torch-cu126/bin/python"
        )
    if major in BUILDS:
        needs = "R525" if major == "12" else f"R{CUDA13_DRIVER}"
        return (
            f"its torch is built for CUDA {cuda}, so TensorRT's CUDA {major} build fits the driver this route is "
            f"for ({needs} or newer): {command} (installs {BUILDS[major]} and pycuda from NVIDIA's index)"
        )
    return (
        f"TensorRT's build must match the GPU nodes' driver: tensorrt-cu12 for R525 to R575, tensorrt-cu13 for "
        f"R{CUDA13_DRIVER} or newer (docs/slurm.md, which route for which GPU); {command} installs the one that "
        f"matches the route's torch"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--torch-cuda", action="store_true", help="print only torch's CUDA version (envs/tensorrt.sh)")
    ap.add_argument("--require", action="store_true", help="exit 1, saying why and the fix, where a job could not run")
    ap.add_argument("--key", default="", help="the config key of this interpreter, named in the refusal")
    ap.add_argument("--out", help="with --require: the report, written only where the jobs can run (a gate)")
    a = ap.parse_args()
    if a.torch_cuda:
        print(torch_cuda() or "")
        return 0
    r = {**report(), "driver": driver()}
    why = missing(r)
    if a.require and why:
        named = f"config {a.key} = {r['python']}" if a.key else r["python"]
        print(
            f"{named} (inference.engine: tensorrt): {why}; {fix(r['python'], r['torch_cuda'], r['driver'])}",
            file=sys.stderr,
        )
        return 1
    if a.out:
        write_json(a.out, r)
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
