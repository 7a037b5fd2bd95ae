"""envs/setup.sh's order of work: the two CPU environments that need no build install in the
background while the third is made and Horovod built for it, and a failure on either side fails
the script, naming what failed, with nothing left running after it. The script runs as it is, in a
copy of its tree, over a stand-in Python whose venv makes stand-in interpreters: their pip installs
nothing and records that it ran, and the foreground's pip goes on only once both background pips
have started, so a script that built the environments one after another fails here."""

import os
import shutil
import subprocess

import pytest
from helpers import REPO

# The base interpreter: the version checks pass, `-m venv DIR` makes DIR/bin/python a copy of ENV_PY.
BASE_PY = """#!/usr/bin/env bash
case "$1" in
  -V) echo "Python 3.11.7" ;;
  -m) [ "$2" = venv ] && mkdir -p "$3/bin" && cp "$ENV_PY" "$3/bin/python" ;;
esac
exit 0
"""
# An environment's interpreter: `pip install -r` marks its start, fails where FAIL names the
# environment, and in the foreground's (tf-mxnet) waits for both background pips to have started.
ENV_PY = """#!/usr/bin/env bash
env=$(basename "$(cd "$(dirname "$0")/.." && pwd)")
if [ "$1 $2 $3" = "-m pip install" ] && [ "$5" = -r ]; then
  touch "$MARKS/$env.started"
  if [ "$env" = tf-mxnet ]; then
    for _ in $(seq 600); do [ -e "$MARKS/.venv.started" ] && [ -e "$MARKS/torch.started" ] && break; sleep 0.1; done
    [ -e "$MARKS/.venv.started" ] && [ -e "$MARKS/torch.started" ] || { echo "tf-mxnet's pip ran alone" >&2; exit 1; }
  else
    sleep 1
  fi
  [ "$env" = "$FAIL" ] && { echo "ERROR: no matching distribution (stand-in for $env)" >&2; exit 1; }
fi
exit 0  # pip install -e ., and the check that Horovod imports
"""


def run_setup(tmp_path, fail=""):
    tree = tmp_path / "tree"
    (tree / "envs").mkdir(parents=True)
    for name in ("setup.sh", "workflow.txt", "tf-mxnet.txt", "torch.txt", "horovod-flags.cmake"):
        shutil.copy(REPO / "envs" / name, tree / "envs" / name)
    marks = tmp_path / "marks"
    marks.mkdir()
    for name, text in (("python3.11", BASE_PY), ("env-python", ENV_PY)):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    env = dict(
        os.environ,
        PYTHON=str(tmp_path / "python3.11"),
        ENV_PY=str(tmp_path / "env-python"),
        MARKS=str(marks),
        FAIL=fail,
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    proc = subprocess.run(["bash", "envs/setup.sh", "--no-gpu"], cwd=tree, env=env, capture_output=True, text=True)
    stamps = {p: (tree / p / ".dlscale-stamp").exists() for p in (".venv", ".envs/tf-mxnet", ".envs/torch")}
    return proc, stamps


@pytest.mark.stage
def test_the_environments_that_need_no_build_install_beside_the_foregrounds(tmp_path):
    proc, stamps = run_setup(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert all(stamps.values()), stamps
    for env in (".venv", ".envs/torch", ".envs/tf-mxnet"):
        assert f"setup: {env} built in " in proc.stderr


@pytest.mark.stage
@pytest.mark.parametrize("failing", ["torch", "tf-mxnet"])
def test_a_failed_environment_fails_the_script_and_the_others_are_finished(tmp_path, failing):
    """A background build that fails is named once all are waited for; a foreground failure still
    waits for the background builds, which finish: nothing runs on after the script."""
    proc, stamps = run_setup(tmp_path, fail=failing)
    assert proc.returncode != 0
    assert f"stand-in for {failing}" in proc.stderr
    if failing == "torch":
        assert "setup: 'make_env .envs/torch envs/torch.txt' failed" in proc.stderr
    assert stamps == {".venv": True, ".envs/tf-mxnet": failing != "tf-mxnet", ".envs/torch": failing != "torch"}
