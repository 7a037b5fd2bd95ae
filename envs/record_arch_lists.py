"""Record, or check, which GPU code the framework build of one route holds (envs/arch_lists.json).

A route is one GPU environment a system's framework may run from (docs/slurm.md, "Which route
for which GPU"); its name is its directory under .envs/. Run this with the route's own python:

    .envs/torch-cu126/bin/python envs/record_arch_lists.py torch-cu126           # print the record
    .envs/torch-cu126/bin/python envs/record_arch_lists.py torch-cu126 --check   # exit 1 if it differs
    .envs/torch-cu126/bin/python envs/record_arch_lists.py torch-cu126 --write   # update the file

It needs no GPU and no NVIDIA driver: it reads build facts. PyTorch: torch.__version__,
torch.version.cuda and the arch list torch.cuda.get_arch_list() returns on a GPU node (read from
torch._C._cuda_getArchFlags(), the string get_arch_list() splits: torch 2.7's get_arch_list()
returns [] where no GPU is available). TensorFlow: tf.sysconfig.get_build_info()'s cuda_version
and cuda_compute_capabilities. An entry "sm_XX" is machine code (SASS) for that architecture,
"compute_XX" PTX the driver JIT-compiles for XX and newer. MXNet has no such call: its entry was
read with cuobjdump (docs/gpu-environments.md) and is not re-recorded here. setup.sh runs --check
after building a route; tests/test_gpu_routes.py does for every route installed where it runs.
"""

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

RECORD = Path(__file__).resolve().parent / "arch_lists.json"
COMPARED = ("version", "cuda", "arch_list")  # what --check compares; the rest is description


def pytorch():
    import torch

    flags = torch._C._cuda_getArchFlags() if torch.backends.cuda.is_built() else None
    return {"version": torch.__version__, "cuda": torch.version.cuda, "arch_list": (flags or "").split()}


def tensorflow():
    import tensorflow as tf

    build = dict(tf.sysconfig.get_build_info())
    return {
        "version": tf.__version__,
        "cuda": build.get("cuda_version"),
        "arch_list": list(build.get("cuda_compute_capabilities") or []),
    }


PROBES = {"pytorch": pytorch, "tensorflow": tensorflow}


def load(path=RECORD):
    return json.loads(Path(path).read_text())


def differences(recorded, found):
    """['key: recorded X, this build Y', ...] over COMPARED."""
    return [
        f"{k}: recorded {recorded.get(k)!r}, this build {found[k]!r}" for k in COMPARED if recorded.get(k) != found[k]
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("route", help="the route's name: its directory under .envs/ and its key in arch_lists.json")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 unless this build matches the recorded entry")
    mode.add_argument("--write", action="store_true", help="write this build's facts into the recorded entry")
    ap.add_argument("--file", default=str(RECORD), help="the record (default: envs/arch_lists.json)")
    args = ap.parse_args()

    data = load(args.file)
    entry = data["routes"].get(args.route)
    if entry is None:
        sys.exit(
            f"{args.route}: no such route in {args.file}; add its entry (framework, environment, requirements) first"
        )
    probe = PROBES.get(entry["framework"])
    if probe is None:
        sys.exit(
            f"{args.route}: {entry['framework']} has no build call to read (recorded with: {entry['recorded_by']})"
        )
    found = probe()
    print(json.dumps({"route": args.route, "python": sys.executable, **found}, indent=2))
    if args.check:
        diff = differences(entry, found)
        for line in diff:
            print(f"{args.route}: {line}: the route's build is not the recorded one", file=sys.stderr)
        return 1 if diff else 0
    if args.write:
        entry.update(found)
        Path(args.file).write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
