"""The interpreter a stage runs with, from config (envs, envs_gpu, systems.<name>.envs): a Python
interpreter (a path, or a command on PATH), or a container whose python runs the stage, as
clusters run NGC images under Apptainer/Singularity:

    {container: docker://nvcr.io/nvidia/pytorch:24.05-py3, runtime: apptainer, python: python3,
     options: [--nv], bind: [/scratch/imagenet]}

becomes `apptainer exec --nv --bind=<repo> --bind=/scratch/imagenet --env=PYTHONPATH=<repo> <image>
python3`: the repository is bound and importable inside, the working directory is bound by the
runtime itself. Either way the result is a list of words that reaches the job as one quoted
argument each; no shell reads it.
"""

from pathlib import Path

CONTAINER_DEFAULTS = {"runtime": "apptainer", "python": "python3", "options": ["--nv"], "bind": []}


def words(value, repo):
    """The command words that start this interpreter."""
    if isinstance(value, str):
        return [value]
    c = {**CONTAINER_DEFAULTS, **value}
    binds = [str(repo), *c["bind"]]
    return [
        c["runtime"],
        "exec",
        *c["options"],
        *(f"--bind={b}" for b in binds),
        f"--env=PYTHONPATH={repo}",
        c["container"],
        c["python"],
    ]


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
            return f"{value} does not exist"
        return None
    image = value["container"]
    if "://" not in image and not Path(image).exists():
        return f"container image {image} does not exist (a local .sif file, or a URI such as docker://...)"
    return None


def describe(value):
    return value if isinstance(value, str) else f"container {value['container']}"
