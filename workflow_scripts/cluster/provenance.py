"""Where a result came from: the node (CPU, memory, GPUs, driver, CUDA, GPU topology), the code
(git commit, or a release's version where the workflow is not a checkout) and the settings (a
hash of the values that produced it). Written with every run, carried into every table row built
from it.
"""

import hashlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
from pathlib import Path

from . import gpu_identity

REPO = Path(__file__).resolve().parents[2]


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def _reading(read):
    """read()'s value, or None where this GPU, driver or nvidia-ml-py does not give it (a power limit
    on a GPU without power management, application clocks on a consumer board)."""
    try:
        return read()
    except Exception:
        return None


def _watts(milliwatts):
    return None if milliwatts is None else milliwatts / 1000


def gpu_limits(nvml, h):
    """What a GPU was set to run at, as NVML says: the power limit it enforces and its default (W),
    and its application clocks and their defaults (MHz, SM and memory). A limit below the default
    (nvidia-smi -pl, a site's power capping) slows every step: the run carries a caveat
    (results/guards.py, power capped)."""
    clocks = {"sm": nvml.NVML_CLOCK_SM, "mem": nvml.NVML_CLOCK_MEM}
    return {
        "power_limit_W": _watts(_reading(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(h))),
        "default_power_limit_W": _watts(_reading(lambda: nvml.nvmlDeviceGetPowerManagementDefaultLimit(h))),
        "app_clocks_MHz": {
            k: _reading(lambda c=c: nvml.nvmlDeviceGetApplicationsClock(h, c)) for k, c in clocks.items()
        },
        "default_app_clocks_MHz": {
            k: _reading(lambda c=c: nvml.nvmlDeviceGetDefaultApplicationsClock(h, c)) for k, c in clocks.items()
        },
    }


def _gpu(nvml, i):
    """One GPU's record; {'index', 'error'} for one NVML cannot open (a device cgroup on a shared node)."""
    try:
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        name = _text(nvml.nvmlDeviceGetName(h))
        memory = nvml.nvmlDeviceGetMemoryInfo(h).total // 2**20
    except nvml.NVMLError as exc:
        return {"index": i, "error": str(exc)}
    bus = _reading(lambda: gpu_identity.normalize_bus_id(_text(nvml.nvmlDeviceGetPciInfo(h).busId)))
    return {"index": i, "name": name, "memory_MB": memory, "bus_id": bus, **gpu_limits(nvml, h)}


def _gpus(nvml=None):
    """GPU models, memory, PCI bus ids, power limits and application clocks, driver and CUDA driver
    version from NVML; empty where there is none. nvml: the pynvml module (the default) or an
    object with its functions."""
    try:
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
    except Exception:  # no NVML library or no driver: a CPU node
        return {"gpus": [], "driver": "", "cuda_driver": ""}
    gpus = [_gpu(nvml, i) for i in range(nvml.nvmlDeviceGetCount())]
    cuda = nvml.nvmlSystemGetCudaDriverVersion()
    return {
        "gpus": gpus,
        "driver": _text(nvml.nvmlSystemGetDriverVersion()),
        "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}",
    }


def _topology():
    """`nvidia-smi topo -m` (NVLink vs PCIe between the GPUs: the study's SXM2/PCIe difference)."""
    if not shutil.which("nvidia-smi"):
        return ""
    try:
        return subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def infiniband_ports(root="/sys/class/infiniband"):
    """The node's InfiniBand / RoCE ports (what NCCL's IB transport could use), from sysfs: one
    {name, port, state, link_layer} per <root>/<device>/ports/<port>; [] where there is none."""
    ports = []
    for port in sorted(Path(root).glob("*/ports/*")):

        def read(name, port=port):
            try:
                return (port / name).read_text().strip()
            except OSError:
                return ""

        ports.append(
            {
                "name": port.parent.parent.name,
                "port": int(port.name) if port.name.isdigit() else port.name,
                "state": read("state"),
                "link_layer": read("link_layer"),
            }
        )
    return ports


def node_facts(infiniband_root="/sys/class/infiniband"):
    import psutil

    return {
        "node": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "memory_GB": round(psutil.virtual_memory().total / 2**30, 1),
        "kernel": platform.release(),
        **_gpus(),
        "gpu_topology": _topology(),
        "infiniband": infiniband_ports(infiniband_root),
        "slurm_job": os.environ.get("SLURM_JOB_ID", ""),
    }


def code_version(repo=REPO):
    """The code a result came from: the git commit of the workflow's folder and whether it had
    uncommitted changes, where that folder is a checkout's top; else (a release tarball unpacked,
    perhaps inside another repository, which git would otherwise walk up to and report) no commit,
    and the release's version from its pyproject.toml, with why."""
    repo = Path(repo).resolve()
    none = {"commit": "", "dirty": None, "version": _release_version(repo)}

    def git(*words):
        return subprocess.run(["git", "-C", str(repo), *words], capture_output=True, text=True, timeout=30)

    try:
        found = git("rev-parse", "--show-toplevel")
        top = found.stdout.strip()
        if not top or Path(top).resolve() != repo:
            return {**none, "source": _not_a_checkout(repo, top, found.stderr)}
        commit = git("rev-parse", "HEAD").stdout.strip()
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip() != ""
    except (OSError, subprocess.SubprocessError) as exc:
        return {**none, "source": f"git could not be run: {exc}"}
    return {"commit": commit, "dirty": dirty if commit else None, "version": none["version"], "source": "git"}


def _not_a_checkout(repo, top, stderr):
    if top:
        return f"{repo} is not a git checkout (it lies inside {top}, another one)"
    if (repo / ".git").exists():  # a checkout git would not read (another user's: safe.directory)
        return f"git: {stderr.strip().splitlines()[0] if stderr.strip() else 'no answer'}"
    return f"{repo} is not a git checkout"


def _release_version(repo):
    """[project] version of the workflow's pyproject.toml ("" without one)."""
    try:
        text = (Path(repo) / "pyproject.toml").read_text()
    except OSError:
        return ""
    section = text.split("[project]", 1)[1] if "[project]" in text else ""
    m = re.search(r'^version\s*=\s*"([^"]+)"', section.split("\n[", 1)[0], re.M)
    return m.group(1) if m else ""


def settings_hash(values):
    """A short, stable hash of the settings that produced a result."""
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:12]
