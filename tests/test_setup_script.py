"""envs/setup.sh's order of work: the two CPU environments that need no build install in the
background while the third is made and Horovod built for it, and a failure on either side fails
the script, naming what failed, with nothing left running after it. The script runs as it is, in a
copy of its tree, over a stand-in Python whose venv makes a stand-in interpreter and uv: uv installs
nothing and records that it ran, and the foreground's install goes on only once both background
installs have started, so a script that built the environments one after another fails here."""

import os
import shutil
import subprocess

import pytest
from helpers import REPO

# The base interpreter: the version checks pass, `-m venv DIR` makes DIR/bin/python (ENV_PY: every
# call succeeds, pip's included) and DIR/bin/uv (UV).
BASE_PY = """#!/usr/bin/env bash
case "$1" in
  -V) echo "Python 3.11.7" ;;
  -m) [ "$2" = venv ] && mkdir -p "$3/bin" && cp "$ENV_PY" "$3/bin/python" && cp "$UV_STANDIN" "$3/bin/uv" ;;
esac
exit 0
"""
# An environment's interpreter: every call succeeds; `-m pip config list` prints PIP_CONFIG's lines.
ENV_PY = """#!/usr/bin/env bash
[ "$*" = "-m pip config list" ] && [ -n "${PIP_CONFIG:-}" ] && cat "$PIP_CONFIG"
exit 0
"""
# `uv pip install --python ENV/bin/python ... -r REQ` records its words, marks its start, fails where FAIL names the
# environment, and for the foreground's (tf-mxnet) waits for both background installs to have started.
UV = """#!/usr/bin/env bash
[[ " $* " == *" -r "* ]] || exit 0  # the project itself, editable
args=("$@")
while [ $# -gt 0 ] && [ "$1" != --python ]; do shift; done
env=$(basename "$(dirname "$(dirname "$2")")")
printf '%s\\n' "${args[@]}" > "$MARKS/$env.args"
touch "$MARKS/$env.started"
if [ "$env" = tf-mxnet ]; then
  for _ in $(seq 600); do [ -e "$MARKS/.venv.started" ] && [ -e "$MARKS/torch.started" ] && break; sleep 0.1; done
  [ -e "$MARKS/.venv.started" ] && [ -e "$MARKS/torch.started" ] || { echo "tf-mxnet's install ran alone" >&2; exit 1; }
else
  sleep 1
fi
[ "$env" = "$FAIL" ] && { echo "error: no solution found (stand-in for $env)" >&2; exit 1; }
exit 0
"""


def run_setup(tmp_path, fail="", pip_config="", args=("--no-gpu",), **environ):
    tree = tmp_path / "tree"
    (tree / "envs").mkdir(parents=True, exist_ok=True)
    for name in (
        "setup.sh",
        "build_tools.sh",
        "uv.txt",
        "workflow.txt",
        "tf-mxnet.txt",
        "torch.txt",
        "torch-cu126.txt",
    ):
        shutil.copy(REPO / "envs" / name, tree / "envs" / name)
    shutil.copy(REPO / "envs" / "horovod-flags.cmake", tree / "envs" / "horovod-flags.cmake")
    marks = tmp_path / "marks"
    shutil.rmtree(marks, ignore_errors=True)
    marks.mkdir()
    (tmp_path / "pip-config").write_text(pip_config)
    for name, text in (("python3.11", BASE_PY), ("env-python", ENV_PY), ("uv", UV)):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    env = dict(
        os.environ,
        PYTHON=str(tmp_path / "python3.11"),
        ENV_PY=str(tmp_path / "env-python"),
        UV_STANDIN=str(tmp_path / "uv"),
        MARKS=str(marks),
        FAIL=fail,
        PIP_CONFIG=str(tmp_path / "pip-config") if pip_config else "",
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        **environ,
    )
    proc = subprocess.run(["bash", "envs/setup.sh", *args], cwd=tree, env=env, capture_output=True, text=True)
    stamps = {p: (tree / p / ".dlscale-stamp").exists() for p in (".venv", ".envs/tf-mxnet", ".envs/torch")}
    return proc, stamps, marks


@pytest.mark.stage
def test_the_environments_that_need_no_build_install_beside_the_foregrounds(tmp_path):
    proc, stamps, _ = run_setup(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert all(stamps.values()), stamps
    for env in (".venv", ".envs/torch", ".envs/tf-mxnet"):
        assert f"setup: {env} built in " in proc.stderr


@pytest.mark.stage
@pytest.mark.parametrize("failing", ["torch", "tf-mxnet"])
def test_a_failed_environment_fails_the_script_and_the_others_are_finished(tmp_path, failing):
    """A background build that fails is named once all are waited for; a foreground failure still
    waits for the background builds, which finish: nothing runs on after the script."""
    proc, stamps, _ = run_setup(tmp_path, fail=failing)
    assert proc.returncode != 0
    assert f"stand-in for {failing}" in proc.stderr
    if failing == "torch":
        assert "setup: 'make_env .envs/torch envs/torch.txt' failed" in proc.stderr
    assert stamps == {".venv": True, ".envs/tf-mxnet": failing != "tf-mxnet", ".envs/torch": failing != "torch"}


@pytest.mark.stage
def test_uv_installs_from_what_pip_is_configured_with(tmp_path):
    """A site's mirror reaches uv: pip's index (the environment's over the file's), extra indexes,
    links and constraints, as `pip config list` prints them."""
    config = (
        ":env:.find-links='/opt/wheels'\n"
        ":env:.index-url='https://mirror.example/simple'\n"
        "global.index-url='https://other.example/simple'\n"
        "global.extra-index-url='file:///opt/a/simple file:///opt/b/simple'\n"
        "global.constraint='/etc/xdg/pip/constraints.txt'\n"
        "global.cert='/etc/ssl/certs/ca-certificates.crt'\n"
    )
    proc, _, marks = run_setup(tmp_path, pip_config=config)
    assert proc.returncode == 0, proc.stderr
    words = (marks / "torch.args").read_text().splitlines()
    pairs = list(zip(words, words[1:]))
    for pair in [
        ("--find-links", "/opt/wheels"),
        ("--index-url", "https://mirror.example/simple"),
        ("--extra-index-url", "file:///opt/a/simple"),
        ("--extra-index-url", "file:///opt/b/simple"),
        ("--constraint", "/etc/xdg/pip/constraints.txt"),
        ("--index-strategy", "unsafe-best-match"),
    ]:
        assert pair in pairs, (pair, words)
    assert "https://other.example/simple" not in words and words[-2:] == ["-r", "envs/torch.txt"]


@pytest.mark.stage
def test_the_environments_are_built_where_dlscale_envs_dir_says_and_found_through_envs(tmp_path):
    """Off the clone (a home quota): each environment of .envs/ is built in DLSCALE_ENVS_DIR,
    .envs/<name> a link to it, the path config.yaml's interpreters follow; .venv stays in the
    clone. A second set-up finds them current there and builds nothing; one without the variable
    keeps using them through the links."""
    scratch = tmp_path / "scratch"
    proc, stamps, _ = run_setup(tmp_path, args=("--no-gpu", "--torch-cu126"), DLSCALE_ENVS_DIR=str(scratch / "envs"))
    assert proc.returncode == 0, proc.stderr
    tree = tmp_path / "tree"
    for name in ("tf-mxnet", "torch", "torch-cu126"):
        link = tree / ".envs" / name
        assert link.is_symlink() and link.resolve() == scratch / "envs" / name, name
        assert (scratch / "envs" / name / ".dlscale-stamp").exists() and (link / "bin" / "python").exists()
        assert f"setup: building .envs/{name} from envs/{name}.txt in {scratch / 'envs' / name}" in proc.stderr
    assert all(stamps.values()) and not (tree / ".venv").is_symlink()
    for environ in ({"DLSCALE_ENVS_DIR": str(scratch / "envs")}, {}):
        again, _, _ = run_setup(tmp_path, args=("--no-gpu", "--torch-cu126"), **environ)
        assert again.returncode == 0 and "setup: building" not in again.stderr, again.stderr


@pytest.mark.stage
def test_a_dlscale_envs_dir_that_cannot_be_made_stops_the_set_up_naming_it(tmp_path):
    (tmp_path / "a-file").write_text("")
    proc, stamps, marks = run_setup(tmp_path, DLSCALE_ENVS_DIR=str(tmp_path / "a-file" / "envs"))
    assert proc.returncode == 2 and f"DLSCALE_ENVS_DIR={tmp_path / 'a-file' / 'envs'}: " in proc.stderr, proc.stderr
    assert "cannot be made or written" in proc.stderr and not any(stamps.values()) and not list(marks.iterdir())
