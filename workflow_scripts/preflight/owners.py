"""Where preflight meets other parts of the project. Each is one small function, so that what it
asks (why a kernel failed, the trainers' thread counts, whether a dataset matches its manifest)
is answered in one place by the module that owns the answer."""

import importlib.util
import os
import subprocess
import sys

from ..cluster import container_env, cpus, kernel_check
from ..common import frameworks
from .check_rows import FAILED, NA, OK


def classify(exc, framework="", env_key=""):
    """(cause, fix) of an exception raised while running the tiny net on a device: the causes the
    trainers' first-kernel check names (cluster/kernel_check.py), else the exception itself."""
    text = f"{type(exc).__name__}: {exc}".strip()
    cause = kernel_check.classify(text)
    if cause:
        name, pattern, meaning, _ = cause
        first = next((ln.strip() for ln in str(exc).splitlines() if pattern.search(ln)), text.splitlines()[0])
        return (
            f"{name}: {meaning} ({first[:300]})",
            kernel_check.fix(cause, framework, env_key or "envs_gpu"),
        )
    return text.splitlines()[0][:400] if text else type(exc).__name__, "see the check job's log"


def thread_counts(framework, launch, gpu=False, mine=None):
    """{name: count} of the threads a trainer of `framework` starts per task, by its own thread rule
    (common/frameworks.py) on this task's CPUs (cluster/cpus.py; `mine`: already read)."""
    return frameworks.of(framework).thread_rule().counts(mine or cpus.of(launch), gpu)


def decode_threads(framework, path, mine, gpu, decode=0, workers=0):
    """The decode threads (PyTorch: DataLoader workers or DALI's threads) a trainer of `framework`
    starts on a rank whose share of the node's CPUs is `mine` (cluster/cpus.py), by its own rule;
    decode: config training.decode_threads, workers: training.pytorch.loader_workers (0: the rule)."""
    return frameworks.of(framework).thread_rule().decode(mine, path, gpu, decode, workers)


def spare_cores(framework, gpu):
    """Cores of a GPU rank that its trainer's thread rule keeps from decoding (TensorFlow's 4 per
    GPU, the 2 the trainer beside DALI uses, none for MXNet's 16 per GPU); None on a CPU, where the rules
    decode on all."""
    return frameworks.of(framework).thread_rule().SPARE_ON_GPU if gpu else None


def unbound(lines, python):
    """The first file the verifier, run in a container, found missing though this host sees it, or
    None: a folder the container was not given reads as a missing file, not as damaged data."""
    if container_env.runtime_of(list(python)) is None:
        return None
    for ln in lines:
        path = ln.split(": ", 1)[0]
        if "found no file" in ln and os.path.exists(path):
            return path
    return None


def dataset_check(data_dir, level, python=(sys.executable,)):
    """(status, figure, cause, fix) of one format's files against its manifest, through the data
    stage's verifier (python -m workflow_scripts.data.verify), run by `python` (the framework's
    interpreter: the one with that format's reader, as the training job's own check)."""
    if importlib.util.find_spec("workflow_scripts.data.verify") is None:
        return NA, "", "verify module missing (workflow_scripts/data/verify.py)", ""
    proc = subprocess.run(
        [*python, "-m", "workflow_scripts.data.verify", "--data", str(data_dir), "--level", level],
        capture_output=True,
        text=True,
    )
    lines = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    if proc.returncode == 0:
        return OK, f"level {level}: {lines[-1] if lines else 'matches its manifest'}", "", ""
    hidden = unbound(lines, python)
    if hidden:
        return (
            FAILED,
            f"level {level}",
            f"not bound: {hidden} is not visible inside the container {container_env.image_of(list(python))}, "
            "though this node sees it (the data is there; the container is not given it)",
            f"bind its folder into the container: add {os.path.dirname(hidden)} to the interpreter's bind list "
            "in config (envs_gpu.<framework>.bind, or the system's envs); data_dir, dataset.root and the real "
            "places of their links are bound by themselves, so a path outside them was reached another way",
        )
    fix = next(
        (ln[ln.index("snakemake --forcerun") :] for ln in lines if "snakemake --forcerun" in ln),
        "snakemake --forcerun <the format's conversion rule>",
    )
    causes = [ln.split(". Fix: ")[0] for ln in lines]
    more = f" (and {len(causes) - 1} more)" if len(causes) > 1 else ""
    return FAILED, f"level {level}", (causes[0][:600] + more) if causes else f"verify exited {proc.returncode}", fix
