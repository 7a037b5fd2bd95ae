"""Build one engine (FP32 or INT8) from its ONNX model: engines.py says what building means for
ONNX Runtime and for TensorRT. Writes the engine file and a JSON record of it."""

import argparse
import json

from ..cluster import cpus
from ..common import schema
from ..common.atomic import atomic_file, write_json
from ..common.errors import run_main
from . import engines

# config inference.tensorrt.*: what a TensorRT build is given (plan/int8_plan.py, engine_args)
BUILD = ("max_batch", "workspace_mb")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=engines.ENGINES, required=True)
    ap.add_argument("--onnx", required=True)
    ap.add_argument("--precision", choices=("fp32", "int8"), required=True)
    cpus.add_job_threads(ap)
    schema.add_arguments(ap, "inference.tensorrt", BUILD)
    ap.add_argument("--out", required=True, help="the engine file")
    ap.add_argument("--info", required=True, help="JSON record of the build")
    a = ap.parse_args()
    with atomic_file(a.out) as tmp:
        info = engines.build(a.engine, a.onnx, tmp, cpus.job_threads(a), a.max_batch, a.workspace_mb)
    build_s = info.pop("build_s")
    write_json(a.info, {"engine": a.engine, "precision": a.precision, "onnx": a.onnx, **info})
    print(f"engine: {a.engine} {a.precision} from {a.onnx} in {build_s:.1f} s: {json.dumps(info)}")


if __name__ == "__main__":
    run_main(main)
