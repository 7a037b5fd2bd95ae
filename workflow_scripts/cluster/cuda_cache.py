"""Where CUDA keeps the kernels it JIT-compiles from PTX, for the ranks of a run.

A build without machine code for the GPU (TensorFlow 2.15.1's wheel on an A100/H100: sm_50-75 and
compute_80 PTX) has every kernel compiled by the driver at its first use, and the driver keeps
the result in CUDA_CACHE_PATH (default ~/.nv/ComputeCache, on a cluster's shared home) up to
CUDA_CACHE_MAXSIZE (default 256 MiB in current drivers, less than one such build's kernels, so
they are compiled again on every run). The launcher gives every rank (cluster/launcher.py, which also
starts the interconnect stage's ranks):

    CUDA_CACHE_PATH     <training.cuda_cache_dir>/<architecture>/<build>
    CUDA_CACHE_MAXSIZE  4 GiB, CUDA's largest

"Per architecture" at launch time, before any rank has started CUDA: the compute capabilities
nvidia-smi reports on the launching node (sm_90; sm_80+sm_90 for a mixed node), where it can
say; otherwise (no nvidia-smi, a driver without the compute_cap query) the directory is shared by
the architectures, and the build's directory still keeps one framework's kernels from evicting
another's. <build> is the interpreter or container that runs the ranks (a readable name and a
digest of its words), the same on every node where the environments lie on a shared file system.
A user's own CUDA_CACHE_PATH or CUDA_CACHE_MAXSIZE is kept.
"""

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from . import container_env

MAXSIZE = 4 * 2**30
KEY = "training.cuda_cache_dir"


def default_dir(environ=None):
    """The user's cache directory (XDG), not ~/.nv."""
    environ = os.environ if environ is None else environ
    return (
        Path(environ.get("XDG_CACHE_HOME") or Path(environ.get("HOME") or Path.home()) / ".cache")
        / "dlscale"
        / "cuda-jit"
    )


def architectures():
    """This node's GPUs' compute capabilities as 'sm_90' (several joined by '+'), or None where
    nvidia-smi cannot say."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    caps = sorted({line.strip() for line in out.stdout.splitlines()} if out.returncode == 0 else set())
    if not caps or not all(re.fullmatch(r"\d+\.\d+", c) for c in caps):
        return None
    return "+".join("sm_" + c.replace(".", "") for c in caps)


def build_key(cmd):
    """A directory name for what runs the ranks: the words before '-m' (an interpreter, or a
    container's exec line and its python), else the program itself."""
    words = cmd[: cmd.index("-m")] if "-m" in cmd else cmd[:1]
    image = next((w for w in reversed(words) if w.endswith((".sif", ".simg", ".sqsh")) or "://" in w), None)
    if image:
        label = re.sub(r"\.(sif|simg|sqsh)$", "", image.rsplit("/", 1)[-1])
    else:  # the interpreter: its environment's name for a venv's bin/python
        exe = Path(words[0]) if words else Path("unknown")
        label = exe.parent.parent.name if exe.parent.name == "bin" and exe.parent.parent.name else exe.name
    label = re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("._") or "build"
    return f"{label}-{hashlib.sha256(' '.join(words).encode()).hexdigest()[:10]}"


def environment(cache_dir, cmd, environ=None):
    """The CUDA JIT cache variables for the ranks of `cmd` (a dict to add to their environment),
    leaving out any the user has set; makes the directory."""
    environ = os.environ if environ is None else environ
    env = {}
    if not environ.get("CUDA_CACHE_MAXSIZE"):
        env["CUDA_CACHE_MAXSIZE"] = str(MAXSIZE)
    if not environ.get("CUDA_CACHE_PATH"):
        path = Path(cache_dir or default_dir(environ)).absolute() / (architectures() or "any-arch") / build_key(cmd)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SystemExit(
                f"launch: the CUDA JIT cache directory {path} cannot be made ({exc.strerror}): set "
                f"config {KEY} to a writable directory"
            )
        env["CUDA_CACHE_PATH"] = str(path)
    return env


RUNTIMES = ("apptainer", "singularity")


def bound(cmd, env):
    """`cmd` with the cache directory bound into its container, where it runs in one (Apptainer or
    Singularity `exec`, pyxis's srun): a directory outside what the runtime binds by itself ($HOME, the working
    directory) would otherwise not exist inside, and CUDA would silently cache nothing."""
    path = env.get("CUDA_CACHE_PATH")
    if path and cmd[:1] == ["srun"]:
        return container_env.mounted(cmd, path)  # pyxis: among the container's mounts
    if not path or len(cmd) < 2 or Path(cmd[0]).name not in RUNTIMES or cmd[1] != "exec":
        return cmd
    return [cmd[0], cmd[1], f"--bind={path}", *cmd[2:]]
