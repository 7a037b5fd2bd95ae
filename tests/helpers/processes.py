"""Running a stage's module, or one of helpers/scripts/, with an environment's interpreter."""

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from .config import CONFIG, REPO

# Scripts the tests run inside the framework environments (each prints one JSON line last).
SCRIPTS = REPO / "tests" / "helpers" / "scripts"


def interpreter(env):
    exe = REPO / CONFIG["envs"][env]
    if not exe.exists():
        pytest.fail(f"{exe} missing: run 'bash envs/setup.sh' first (the README's test command does)")
    return str(exe)


# bare_interpreter's environments: a few files each, made once per source environment and kept.
BARE = Path(tempfile.gettempdir()) / f"dlscale-bare-envs-{os.getuid()}"
BASE_AND_SITES = (
    "import json, sys, sysconfig; "
    "print(json.dumps([sys._base_executable, sorted({sysconfig.get_path(k) for k in ('purelib', 'platlib')})]))"
)


def bare_interpreter(env):
    """`env`'s interpreter as a module's or an image's python is on a cluster: its packages
    importable, this project not installed. A virtual environment over the same base Python whose
    site-packages hold one path file naming `env`'s site-packages: Python adds a folder named in a
    .pth file to sys.path without reading the .pth files in it, so the editable install's finder
    (__editable__.dlscale-*.pth, from envs/setup.sh) never loads."""
    source = interpreter(env)
    out = subprocess.run([source, "-c", BASE_AND_SITES], capture_output=True, text=True, timeout=120, check=True)
    base, sites = json.loads(out.stdout)
    key = hashlib.sha256(out.stdout.encode()).hexdigest()[:12]
    made = BARE / f"{Path(source).parents[1].name.lstrip('.')}-{key}"
    if not (made / "bin" / "python").exists():
        BARE.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(dir=BARE))
        subprocess.run([base, "-m", "venv", "--without-pip", str(work)], capture_output=True, timeout=300, check=True)
        (site,) = (work / "lib").glob("python*/site-packages")
        (site / "environment.pth").write_text("".join(f"{s}\n" for s in sites))
        try:
            work.rename(made)
        except OSError:  # another test process made it first
            shutil.rmtree(work)
    return str(made / "bin" / "python")


def as_a_user(environ=None):
    """`environ` (default: this process's) without PYTHONPATH: nothing of the tests' own points an
    interpreter at this checkout."""
    return {k: v for k, v in (os.environ if environ is None else environ).items() if k != "PYTHONPATH"}


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
