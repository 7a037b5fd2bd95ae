#!/usr/bin/env bash
# Makes the software environments config.yaml points at:
#   .venv            snakemake, the report, the tests      (envs/workflow.txt)
#   .envs/tf-mxnet   TensorFlow + MXNet, pinned together    (envs/tf-mxnet.txt)
#   .envs/torch      PyTorch                                (envs/torch.txt)
# Each gets this repository installed editable, so `python -m workflow_scripts...` works from
# anywhere. An environment is rebuilt only when its requirements file changed (a stamp records
# the file's hash); pip's wheel cache is reused across rebuilds.
set -euo pipefail
export TF_CPP_MIN_LOG_LEVEL=2  # quiet the import checks below
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
if ! command -v "$PYTHON" >/dev/null; then
  echo "setup: $PYTHON not found; set PYTHON=/path/to/python3.11" >&2
  exit 2
fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "setup: $PYTHON is $("$PYTHON" -V 2>&1); the pinned TensorFlow 2.15 / numpy 1.23 stack needs Python 3.11" >&2
  exit 2
fi
if ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && apt-get install -y -qq python3.11-venv >/dev/null
  else
    echo "setup: $PYTHON has no venv/ensurepip; install Debian's python3.11-venv package" >&2
    exit 2
  fi
fi

make_env() {  # make_env DIR REQUIREMENTS
  local dir=$1 req=$2 stamp
  stamp="$(sha256sum "$req" | cut -c1-16) $("$PYTHON" -V 2>&1)"
  if [ -x "$dir/bin/python" ] && [ "$(cat "$dir/.dlscale-stamp" 2>/dev/null)" = "$stamp" ]; then
    return
  fi
  echo "setup: building $dir from $req" >&2
  rm -rf "$dir"
  "$PYTHON" -m venv "$dir"
  "$dir/bin/python" -m pip install -q -r "$req"
  "$dir/bin/python" -m pip install -q --no-deps -e .
  echo "$stamp" > "$dir/.dlscale-stamp"
}

# Horovod 0.28.1 (its last release) builds unchanged, with Gloo, against the pinned TensorFlow
# 2.15 + MXNet 1.9 (~7 min on 2 cores). The wheel is kept in a cache keyed by the environment's
# requirements, so a rebuilt environment or a fresh clone on the same machine reuses it; pip's
# own cache is bypassed because it once served a wheel built against another TensorFlow.
install_horovod() {  # install_horovod ENV_DIR REQUIREMENTS
  local dir=$1 req=$2 cache wheel
  "$dir/bin/python" -c 'import horovod.tensorflow, horovod.mxnet' 2>/dev/null && return
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/dlscale/horovod-$(sha256sum "$req" | cut -c1-16)
  wheel=$(ls "$cache"/horovod-0.28.1-*.whl 2>/dev/null | head -1 || true)
  if [ -z "$wheel" ]; then
    need_build_tools
    echo "setup: building horovod 0.28.1 for $dir (several minutes)" >&2
    mkdir -p "$cache"
    HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MXNET=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MPI=1 \
      HOROVOD_WITH_GLOO=1 HOROVOD_CPU_OPERATIONS=GLOO MAKEFLAGS=-j"$(nproc)" \
      "$dir/bin/python" -m pip wheel -q --no-deps --no-build-isolation --no-cache-dir -w "$cache" horovod==0.28.1
    wheel=$(ls "$cache"/horovod-0.28.1-*.whl | head -1)
  fi
  "$dir/bin/python" -m pip install -q --no-deps "$wheel"
  "$dir/bin/python" -c 'import horovod.tensorflow, horovod.mxnet'
}

need_build_tools() {
  local missing=()
  command -v cmake >/dev/null || missing+=(cmake)
  command -v g++ >/dev/null || missing+=(g++)
  "$PYTHON" -c 'import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' \
    2>/dev/null || missing+=(python3.11-dev)
  [ ${#missing[@]} -eq 0 ] && return
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "setup: building horovod needs: ${missing[*]} (Debian packages)" >&2
    exit 2
  fi
}

make_env .venv envs/workflow.txt
make_env .envs/tf-mxnet envs/tf-mxnet.txt
install_horovod .envs/tf-mxnet envs/tf-mxnet.txt
make_env .envs/torch envs/torch.txt
