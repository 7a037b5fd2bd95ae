"""The interpreter a stage runs with, from config (envs, envs_gpu, systems.<name>.envs): a Python
interpreter (a path, or a command on PATH), or a container whose python runs the stage, as
clusters run NGC images under Apptainer/Singularity:

    {container: /shared/containers/pytorch-24.05.sif, runtime: apptainer, python: python3,
     options: [--nv], bind: [/scratch/imagenet]}

becomes `apptainer exec --nv --bind=<repo> --bind=/scratch/imagenet --bind=<pynvml.py>:/opt/dlscale-site/pynvml.py
--env=PYTHONPATH=<repo>:/opt/dlscale-site <image> python3`: the repository is bound and importable
inside, the working directory is bound by the runtime itself, and nvidia-ml-py's one pure-Python
module (pynvml, which stock NGC images lack, so a run there could not see its GPUs' state or
neighbours) is bound from the workflow's environment. Either way the result is a list of words
that reaches the job as one quoted argument each; no shell reads it.

`data_dir` and the real places its links lead to are bound too (data_binds), so a container sees
the dataset wherever it lies. An image must be a file on a shared file system: a registry URI
(docker://...) is refused, since every task of every job would pull and convert it again.

runtime: pyxis is the enroot route NVIDIA's own clusters use: the words are a one-task srun with
`--container-image=<squashfs file>` and `--container-mounts=` (the same folders as Apptainer's
binds, and the working directory, which pyxis does not mount by itself), running `env
PYTHONPATH=... <python>` inside; the launcher folds those options into its own srun line for the
ranks (cluster/container_env.py).
"""

import importlib.util
import os
from pathlib import Path

CONTAINER_DEFAULTS = {"runtime": "apptainer", "python": "python3", "options": ["--nv"], "bind": []}
RUNTIMES = ("apptainer", "singularity", "pyxis")
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


def words(value, repo, extras=None, cwd=None):
    """The command words that start this interpreter. extras: host .py files bound into SITE (default
    pure_modules()); cwd: the working directory a pyxis container starts in (default ours)."""
    if isinstance(value, str):
        return [value]
    c = {**CONTAINER_DEFAULTS, **value}
    extras = pure_modules() if extras is None else extras
    path = ":".join([str(repo), *([SITE] if extras else [])])
    if c["runtime"] == "pyxis":
        return _pyxis_words(c, repo, extras, path, cwd)
    binds = [str(repo), *c["bind"], *(f"{f}:{SITE}/{Path(f).name}" for f in extras)]
    return [
        c["runtime"],
        "exec",
        *c["options"],
        *(f"--bind={b}" for b in binds),
        f"--env=PYTHONPATH={path}",
        c["container"],
        c["python"],
    ]


def _pyxis_words(c, repo, extras, path, cwd):
    cwd = str(cwd or os.getcwd())
    mounts = [f"{p}:{p}" for p in dict.fromkeys([str(repo), cwd, *c["bind"]])]
    mounts += [f"{f}:{SITE}/{Path(f).name}" for f in extras]
    # --nv is Apptainer's (the schema's default for every runtime); enroot's hooks bring the GPUs in
    options = [o for o in c["options"] if o != "--nv"]
    return [
        "srun",
        "--nodes=1",
        "--ntasks=1",
        "--overlap",
        f"--container-image={c['container']}",
        f"--container-mounts={','.join(mounts)}",
        f"--container-workdir={cwd}",
        *options,
        "env",
        f"PYTHONPATH={path}",
        c["python"],
    ]


def data_binds(paths, depth=2):
    """The folders a container must see for `paths` (data_dir, the dataset's root): each one's real
    place, and the real place of every link found within `depth` levels below it (a format's
    folder linked to another file system), those already inside another left out. Only what exists
    now: a job parses the workflow again on its node, where the data it reads is there."""
    found = []

    def walk(p, level):
        try:
            entries = list(os.scandir(p))
        except OSError:
            return
        for e in entries:
            if e.is_symlink():
                target = Path(os.path.realpath(e.path))
                if target.exists():
                    found.append(target if target.is_dir() else target.parent)
            elif level < depth and e.is_dir(follow_symlinks=False):
                walk(e.path, level + 1)

    for p in paths:
        if p and Path(p).exists():
            found.append(Path(os.path.realpath(p)))
            walk(p, 1)
    kept = []
    for p in sorted(set(found), key=lambda q: len(q.parts)):
        if not any(p == k or p.is_relative_to(k) for k in kept):
            kept.append(p)
    return [str(p) for p in kept]


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
    if image_problem(value):
        return None  # image_problem's own words, with their fix, say it
    if not Path(image).exists():
        return f"container image {image} does not exist (a local .sif file)"
    return None


def image_problem(value):
    """Why a container's image cannot serve a run's ranks, with the fix, or None: a registry
    reference would be pulled and converted by every task of every job."""
    if isinstance(value, str):
        return None
    image, runtime = value["container"], value.get("runtime", CONTAINER_DEFAULTS["runtime"])
    if runtime == "pyxis":
        if "://" in image or "#" in image or not image.startswith("/"):
            return (
                f"{image} is a registry image: every task would import it again (enroot, on every node, at "
                f"every start). Import it once onto a shared file system, e.g. `enroot import -o "
                f"/shared/containers/<name>.sqsh 'docker://nvcr.io#nvidia/<image>:<tag>'`, and set container "
                f"to that .sqsh file's absolute path"
            )
        return None
    if "://" in image:
        return (
            f"{image} is a registry URI: every task would pull and convert it again (a SIF built on every "
            f"node, at every start). Build it once onto a shared file system, `{runtime} build "
            f"/shared/containers/<name>.sif {image}`, and set container to that .sif file"
        )
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
