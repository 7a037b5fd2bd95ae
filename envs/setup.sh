#!/usr/bin/env bash
# Makes the software environments config.yaml points at:
#   .venv            snakemake, the report, the tests      (envs/workflow.txt)
#   .envs/tf-mxnet   TensorFlow + MXNet, pinned together    (envs/tf-mxnet.txt)
#   .envs/torch      PyTorch                                (envs/torch.txt)
# Each gets this repository installed editable, so `python -m workflow_scripts...` works from
# anywhere. An environment is rebuilt only when its requirements file changed (a stamp records
# the file's hash); pip's wheel cache is reused across rebuilds.
set -euo pipefail
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

make_env .venv envs/workflow.txt
make_env .envs/tf-mxnet envs/tf-mxnet.txt
make_env .envs/torch envs/torch.txt
