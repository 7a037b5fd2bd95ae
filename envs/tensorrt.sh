#!/usr/bin/env bash
# TensorRT and pycuda into a PyTorch route, for the INT8 stage's TensorRT jobs (docs/int8.md,
# installing TensorRT). Run on the login node, once per route, where it reaches NVIDIA's package
# index (TensorRT's wheels on the registry are stubs that download its libraries from there):
#
#   bash envs/tensorrt.sh .envs/torch-cu126/bin/python           # a CUDA 12 route: tensorrt-cu12
#   bash envs/tensorrt.sh .envs/torch-cu126/bin/python --volta   # V100: the last TensorRT with Volta
#   bash envs/tensorrt.sh .envs/torch/bin/python                 # a CUDA 13 route: tensorrt-cu13
#
# TensorRT's build follows the CUDA major version of the route's torch, so the driver the route was
# chosen for (docs/slurm.md, which route for which GPU) runs both. pycuda is built from source
# against the CUDA toolkit: nvcc on PATH (a cluster's `module load cuda/12.x`) or in $CUDA_HOME.
# Separate from envs/setup.sh: nothing there needs NVIDIA's index, and a CPU machine never runs this.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: bash envs/tensorrt.sh ROUTE_PYTHON [--volta]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
PY=$1
VOLTA=${2:-}
[ -z "$VOLTA" ] || [ "$VOLTA" = --volta ] || usage
if [ ! -x "$PY" ] && ! command -v "$PY" > /dev/null; then
  echo "tensorrt.sh: $PY: no such interpreter; give a route's python, e.g. .envs/torch-cu126/bin/python (bash envs/setup.sh --gpu makes the routes)" >&2
  exit 1
fi
CUDA=$(PYTHONPATH="$PWD" "$PY" -m workflow_scripts.int8.engine_imports --torch-cuda)
case "${CUDA%%.*}" in
  12) REQ=envs/tensorrt-cu12.txt ;;
  13) REQ=envs/tensorrt-cu13.txt ;;
  *)
    echo "tensorrt.sh: the torch of $PY is no CUDA build (torch.version.cuda: '$CUDA'), and TensorRT's build is chosen by it: give a GPU route (docs/slurm.md, which route for which GPU)" >&2
    exit 1
    ;;
esac
if [ -n "$VOLTA" ]; then
  if [ "${CUDA%%.*}" != 12 ]; then
    echo "tensorrt.sh: --volta: the TensorRT releases with Volta (10.0 to 10.4) are CUDA 12 builds; give the CUDA 12 route, .envs/torch-cu126/bin/python" >&2
    exit 1
  fi
  REQ=envs/tensorrt-cu12-volta.txt
fi
if ! command -v nvcc > /dev/null && [ ! -x "${CUDA_HOME:-/nonexistent}/bin/nvcc" ]; then
  echo "tensorrt.sh: pycuda is built against the CUDA toolkit, and neither nvcc nor \$CUDA_HOME/bin/nvcc is here: load the CUDA ${CUDA%%.*} toolkit (e.g. module load cuda/${CUDA%%.*}) and run it again" >&2
  exit 1
fi
UV=.envs/uv/bin/uv
if [ ! -x "$UV" ]; then
  echo "tensorrt.sh: $UV is missing: run bash envs/setup.sh first" >&2
  exit 1
fi
"$UV" pip install --python "$PY" --extra-index-url https://pypi.nvidia.com -r "$REQ"
# the workflow's own check, as it runs before any INT8 GPU job is submitted
PYTHONPATH="$PWD" "$PY" -m workflow_scripts.int8.engine_imports --require > /dev/null
echo "tensorrt.sh: $PY imports tensorrt and pycuda ($REQ)"
