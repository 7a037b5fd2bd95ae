"""Running a stage's module, or one of helpers/scripts/, with an environment's interpreter."""

import json
import os
import subprocess

import pytest

from .config import CONFIG, REPO

# Scripts the tests run inside the framework environments (each prints one JSON line last).
SCRIPTS = REPO / "tests" / "helpers" / "scripts"


def interpreter(env):
    exe = REPO / CONFIG["envs"][env]
    if not exe.exists():
        pytest.fail(f"{exe} missing: run 'bash envs/setup.sh' first (the README's test command does)")
    return str(exe)


def run_stage(env, module, *args, check=True, timeout=600, env_vars=None):
    """Run a stage module with its environment's interpreter, as the rules do (`env_vars` added to
    the process's environment)."""
    proc = subprocess.run(
        [interpreter(env), "-m", module, *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **env_vars} if env_vars else None,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{module} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def with_checkout(environ):
    """`environ` with this checkout first on PYTHONPATH: a script run by its path imports this
    checkout's workflow_scripts, whichever checkout an environment's editable install names."""
    path = [str(REPO), *filter(None, environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**environ, "PYTHONPATH": os.pathsep.join(path)}


def run_script(env, script, *args, python=None, environ=None, timeout=600):
    """Run one of helpers/scripts/ in a framework's environment (or the interpreter `python`, with
    the environment variables `environ`: this checkout first on PYTHONPATH unless given) and return
    the JSON it printed last."""
    proc = subprocess.run(
        [python or interpreter(env), str(SCRIPTS / script), *map(str, args)],
        cwd=REPO,
        env=environ if environ is not None else with_checkout(os.environ),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])
