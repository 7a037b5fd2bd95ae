"""The interpreter a stage runs with, from config (envs, envs_gpu, systems.<name>.envs): a Python
interpreter (a path, or a command on PATH), or a container whose python runs the stage, as
clusters run NGC images under Apptainer/Singularity:

    {container: docker://nvcr.io/nvidia/pytorch:24.05-py3, runtime: apptainer, python: python3,
     options: [--nv], bind: [/scratch/imagenet]}

becomes `apptainer exec --nv --bind=<repo> --bind=/scratch/imagenet --bind=<pynvml.py>:/opt/dlscale-site/pynvml.py
--env=PYTHONPATH=<repo>:/opt/dlscale-site <image> python3`: the repository is bound and importable
inside, the working directory is bound by the runtime itself, and nvidia-ml-py's one pure-Python
module (pynvml, which stock NGC images lack, so a run there could not see its GPUs' state or
neighbours) is bound from the workflow's environment. Either way the result is a list of words
that reaches the job as one quoted argument each; no shell reads it.
"""

import importlib.util
import os
from pathlib import Path

CONTAINER_DEFAULTS = {"runtime": "apptainer", "python": "python3", "options": ["--nv"], "bind": []}
SITE = "/opt/dlscale-site"  # inside a container: the pure-Python modules bound from the host
PURE_MODULES = ("pynvml",)  # nvidia-ml-py: NVML's telemetry and the isolation evidence


def pure_modules():
    """The host files of PURE_MODULES this interpreter can import (single .py modules)."""
    found = []
    for name in PURE_MODULES:
        spec = importlib.util.find_spec(name)
        if spec and spec.origin and spec.origin.endswith(".py"):
            found.append(spec.origin)
    return found


def words(value, repo, extras=None):
    """The command words that start this interpreter. extras: host .py files bound into SITE (default
    pure_modules())."""
    if isinstance(value, str):
        return [value]
    c = {**CONTAINER_DEFAULTS, **value}
    extras = pure_modules() if extras is None else extras
    binds = [str(repo), *c["bind"], *(f"{f}:{SITE}/{Path(f).name}" for f in extras)]
    path = ":".join([str(repo), *([SITE] if extras else [])])
    return [
        c["runtime"],
        "exec",
        *c["options"],
        *(f"--bind={b}" for b in binds),
        f"--env=PYTHONPATH={path}",
        c["container"],
        c["python"],
    ]


def search_path(repo, environ):
    """PYTHONPATH for a job and every process it starts: the repository first, so that `python -m
    workflow_scripts...` finds the stage modules from the workflow's own folder, whatever the
    working directory, and ahead of any copy installed in the interpreter (an editable install of
    another checkout, an image's older copy); then the entries `environ` already has, in their
    order (a module's or a site's own). Empty entries are dropped: Python reads one as the current
    directory, which would bring the working directory back."""
    repo = str(repo)
    current = environ.get("PYTHONPATH", "").split(os.pathsep)
    return os.pathsep.join([repo, *(p for p in current if p and p != repo)])


def job_words(words, repo, path_blocked):
    """The words a rule's command starts an interpreter with. Where Snakemake takes PYTHONPATH out
    of a job's environment (a conda job: --sdm conda, unless --conda-not-block-search-path-envvars),
    `env` gives that process, and what it starts, the repository alone: the variable set for the
    other jobs (search_path) never reaches it."""
    return ["env", f"PYTHONPATH={repo}", *words] if path_blocked else list(words)


def exec_words(value, repo, binds=()):
    """The words that run another program of this environment: a container's exec line without
    its python (with `binds` also bound), nothing for an interpreter on the host."""
    if isinstance(value, str):
        return []
    words_ = words({**value, "bind": [*value.get("bind", []), *binds]}, repo)
    return words_[:-1]


def problem(value):
    """Why this interpreter cannot be used as configured, or None (checked when the workflow is
    parsed, so a wrong path fails before any job)."""
    if isinstance(value, str):
        if "/" in value and not Path(value).exists():
            return f"{value} does not exist{gone_link(Path(value))}"
        return None
    image = value["container"]
    if "://" not in image and not Path(image).exists():
        return f"container image {image} does not exist (a local .sif file, or a URI such as docker://...)"
    return None


def gone_link(path):
    """Where a link on the way to `path` points at nothing: envs/setup.sh's DLSCALE_ENVS_DIR leaves
    .envs/<name> a link to scratch, which a purge can empty under it."""
    for p in (path, *path.parents):
        if p.is_symlink() and not p.exists():
            return f" ({p} links to {os.readlink(p)}, which is gone: a scratch purge? setup.sh builds it there again)"
    return ""


def describe(value):
    return value if isinstance(value, str) else f"container {value['container']}"
