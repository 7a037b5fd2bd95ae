"""Print, as JSON, how the frameworks and Horovod of one environment were built for the GPU.

Run it with the environment's own python: `.envs/tensorflow-gpu/bin/python envs/check_gpu_build.py`.
It needs no GPU: it reads build flags, and which shared libraries (NCCL, the CUDA runtime,
libcuda) the imports loaded and from where. `--require tensorflow|mxnet` makes it exit 1 unless
that framework is a CUDA build and Horovod's module for it was built with CUDA and NCCL (setup.sh
runs it so after each GPU build). On a machine without the NVIDIA driver an mxnet-cu* wheel
imports only with a libcuda.so.1 stub on LD_LIBRARY_PATH (setup.sh makes one); "libcuda" below
says which libcuda.so.1 was loaded.
"""

import argparse
import importlib
import json
import os
import re
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HOROVOD_FLAGS = ("nccl_built", "cuda_built", "gloo_built", "mpi_built", "rocm_built", "ddl_built", "ccl_built")
LIBS = re.compile(
    r"/(libnccl\.so[.\d]*|libcudart\.so[.\d]*|libcuda\.so[.\d]*|libcudnn\.so[.\d]*|libmxnet\.so"
    r"|mpi_lib[^/]*\.so|libtensorflow_framework\.so[.\d]*)$"
)


def loaded_libraries():
    """Shared libraries of interest mapped into this process, by file name -> path."""
    found = {}
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                m = LIBS.search(path)
                if m:
                    found.setdefault(m.group(1), set()).add(os.path.realpath(path))
    except OSError:
        pass
    return {name: sorted(paths) for name, paths in sorted(found.items())}


def tensorflow_info():
    import tensorflow as tf

    info = {"version": tf.__version__, "is_built_with_cuda": tf.test.is_built_with_cuda()}
    build = dict(tf.sysconfig.get_build_info())
    info["build_info"] = {k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in build.items()}
    try:
        info["visible_gpus"] = len(tf.config.list_physical_devices("GPU"))
    except Exception as e:  # noqa: BLE001 - report, do not fail
        info["visible_gpus"] = f"error: {e}"
    return info


def mxnet_info():
    import mxnet as mx
    from mxnet import runtime

    features = runtime.Features()
    info = {
        "version": mx.__version__,
        "features": {
            f: features.is_enabled(f) for f in ("CUDA", "CUDNN", "NCCL", "CUDA_RTC", "TENSORRT", "MKLDNN", "OPENMP")
        },
    }
    try:
        info["visible_gpus"] = mx.context.num_gpus()
    except Exception as e:  # noqa: BLE001
        info["visible_gpus"] = f"error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return info


def horovod_info(framework):
    hvd = importlib.import_module(f"horovod.{framework}")
    info = {flag: bool(getattr(hvd, flag)()) for flag in HOROVOD_FLAGS if hasattr(hvd, flag)}
    import horovod

    info["version"] = horovod.__version__
    return info


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--require",
        choices=("tensorflow", "mxnet"),
        help="exit 1 unless this framework and its Horovod module are built with CUDA and NCCL",
    )
    args = parser.parse_args()

    out = {"python": sys.executable, "LD_LIBRARY_PATH": os.environ.get("LD_LIBRARY_PATH", "")}
    problems = []
    for framework, probe in (("tensorflow", tensorflow_info), ("mxnet", mxnet_info)):
        try:
            out[framework] = probe()
        except ImportError as e:
            out[framework] = None if "No module named" in str(e) else f"import failed: {e}"
            continue
        except Exception as e:  # noqa: BLE001
            out[framework] = f"failed: {type(e).__name__}: {e}"
            continue
        try:
            out[f"horovod.{framework}"] = horovod_info(framework)
        except Exception as e:  # noqa: BLE001
            out[f"horovod.{framework}"] = f"import failed: {type(e).__name__}: {e}"

    out["libraries"] = loaded_libraries()
    libcuda = [p for name, paths in out["libraries"].items() if name.startswith("libcuda.so") for p in paths]
    out["libcuda"] = libcuda[0] if libcuda else "not loaded"

    if args.require:
        fw, hvd = out.get(args.require), out.get(f"horovod.{args.require}")
        if not isinstance(fw, dict):
            problems.append(f"{args.require}: {fw}")
        elif args.require == "tensorflow" and not fw["is_built_with_cuda"]:
            problems.append("tensorflow is not a CUDA build")
        elif args.require == "mxnet" and not fw["features"]["CUDA"]:
            problems.append("mxnet is not a CUDA build")
        if not isinstance(hvd, dict):
            problems.append(f"horovod.{args.require}: {hvd}")
        else:
            problems += [
                f"horovod.{args.require}.{flag}() is False"
                for flag in ("nccl_built", "cuda_built", "gloo_built")
                if not hvd.get(flag)
            ]
        out["required"] = args.require
        out["problems"] = problems

    print(json.dumps(out, indent=2, sort_keys=False, default=str))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
