"""The first kernel on a task's GPU, run before training, and what its failure means.

A framework build that holds no code for the GPU's architecture passes every check that only asks
the framework (CUDA build, GPUs seen, NCCL) and dies at its first kernel: MXNet 1.9.1's wheels
have no sm_90 code, so on an H100/H200 every op fails with "no kernel image is available". Run
one small op first; when it fails for such a cause, stop with a permanent error (errors.py) that
names the GPU, the build and the fix, so the training job records it instead of resubmitting a
job that would die the same way (train/training_job.py, failure.py).

Each trainer supplies only its kernel (an op that runs on the GPU and is read back on the host)
and the facts of its build; the causes below are shared, and failure.py reads a log with them
too, for a kernel that fails later than this check.
"""

import json
import re
import sys
import time
from pathlib import Path

from ..common import frameworks
from ..common.errors import PermanentError

# (cause, what it means, what fixes it), matched against the framework's message. The strings are
# the CUDA runtime's and driver's own (cudaErrorNoKernelImageForDevice, CUDA_ERROR_NO_BINARY_FOR_GPU,
# CUDA_ERROR_UNSUPPORTED_PTX_VERSION, ...) as MXNet, TensorFlow and PyTorch pass them on.
_BUILD_FIX = (
    "use a build with code for this GPU: NVIDIA's framework container for it through config "
    "{key}: {{container: <image .sif>, python: python3}} (docs/slurm.md, 'Which route for "
    "which GPU'), e.g. {image}"
)
CAUSES = (
    (
        "no kernel image for this GPU",
        re.compile(
            r"no kernel image is available|CUDA_ERROR_NO_BINARY_FOR_GPU|cudaErrorNoKernelImageForDevice|"
            r"invalid device function|cudaErrorInvalidDeviceFunction",
            re.I,
        ),
        "the build holds neither machine code (SASS) for this GPU's architecture nor PTX the driver could "
        "compile for it",
        _BUILD_FIX,
    ),
    (
        "PTX cannot be JIT-compiled for this GPU",
        re.compile(
            r"CUDA_ERROR_UNSUPPORTED_PTX_VERSION|PTX was compiled with an unsupported toolchain|"
            r"CUDA_ERROR_INVALID_PTX|a PTX JIT compilation failed|CUDA_ERROR_JIT_COMPILER_NOT_FOUND|"
            r"cudaErrorUnsupportedPtxVersion|cudaErrorInvalidPtx",
            re.I,
        ),
        "the build has no machine code for this GPU and the driver cannot compile its PTX (PTX of a newer "
        "CUDA than the node's driver supports, or no PTX JIT compiler in the driver)",
        "update the node's NVIDIA driver to one that supports the build's CUDA, or " + _BUILD_FIX,
    ),
)

# NVIDIA's framework containers (NGC) with code for current GPUs, names and packages: their records'
CONTAINERS = {f.name: f.container for f in frameworks.REGISTRY.values()}
NAMES = {f.name: f.title for f in frameworks.REGISTRY.values()}
MODULES = {f.name: f.package for f in frameworks.REGISTRY.values()}
# The GPU code each route's build holds, recorded by envs/record_arch_lists.py (docs/slurm.md,
# "Which route for which GPU"): PyTorch's CUDA 13 build (.envs/torch) has none for P100/V100,
# its CUDA 12.6 build (.envs/torch-cu126) has.
ARCH_LISTS = Path(__file__).resolve().parents[2] / "envs" / "arch_lists.json"


def classify(text):
    """The cause (name, meaning, fix template) a message names, or None."""
    for cause in CAUSES:
        if cause[1].search(text):
            return cause
    return None


def sm(capability):
    """(9, 0) -> 'sm_90'."""
    return "sm_{}{}".format(*capability) if capability else "sm_unknown"


def routes(framework, capability=None):
    """The recorded routes of `framework` (envs/arch_lists.json) other than the build running here,
    with machine code for the GPU of `capability` (any, when it is not known), each as
    '<interpreter> (<route>: <version>, CUDA <x.y>, code for <archs>; driver R<NNN> or newer)'."""
    try:
        recorded = json.loads(ARCH_LISTS.read_text())
        drivers = recorded["cuda_drivers"]["minor_compat"]
        entries = recorded["routes"].items()
    except (OSError, ValueError, KeyError):
        return []
    framework = framework.lower()
    running = getattr(sys.modules.get(MODULES.get(framework, framework)), "__version__", None)
    found = []
    for name, r in entries:
        if r.get("framework") != framework or r.get("version") == running:
            continue
        if capability and sm(capability) not in r.get("arch_list", []):
            continue
        driver = drivers.get(str(r.get("cuda")).split(".")[0], "?").split(".")[0]
        found.append(
            f"{r['environment']} ({name}: {r['version']}, CUDA {r['cuda']}, code for "
            f"{' '.join(r['arch_list'])}; driver R{driver} or newer)"
        )
    return found


def fix(cause, framework, key, capability=None):
    """What fixes `cause` (a CAUSES entry) for `framework` whose interpreter config `key` chose: a
    recorded route of the framework with code for the GPU first (routes), then the container."""
    text = cause[3].format(key=key, image=CONTAINERS.get(framework.lower(), "<image>"))
    other = routes(framework, capability)
    return f"point config {key} at {' or '.join(other)}; or {text}" if other else text


def first_kernel(run, framework, gpu, build, env_key, host=""):
    """Run the framework's kernel (run(): one small op on the task's GPU, read back on the host) and
    return its seconds, which include loading or JIT-compiling its code. A failure whose message
    names an architecture cause becomes a PermanentError naming the GPU (gpu: its name and compute
    capability as a tuple), the build (text: version and the CUDA it was built for) and the fix;
    any other failure is raised as it is."""
    start = time.perf_counter()
    try:
        run()
    except Exception as exc:  # each framework raises its own type (MXNetError, InternalError, RuntimeError)
        text = f"{type(exc).__name__}: {exc}"
        cause = classify(text)
        if cause is None:
            raise
        name, capability = gpu
        key = env_key or "envs_gpu"
        remedy = fix(cause, framework, key, capability)
        first = next((ln.strip() for ln in str(exc).splitlines() if cause[1].search(ln)), text.splitlines()[0])
        raise PermanentError(
            f"{framework} cannot run on {name} ({sm(capability)}){' on ' + host if host else ''}: {cause[0]}: "
            f"{cause[2]}. Build: {build} (config {key}). Its first kernel failed with: {first[:300]}. "
            f"Fix: {remedy}"
        ) from exc
    return time.perf_counter() - start


def nvml_gpu(index, env=None):
    """(name, compute capability) of the task's GPU number `index` (as CUDA numbers the visible
    ones) through NVML, for a framework that does not report them; (f'GPU {index}', None) where
    NVML cannot say. NVML is asked by the GPU's PCI bus id or UUID (gpu_identity.identify, with env's
    CUDA_VISIBLE_DEVICES: default this process's), never by `index`: under a device cgroup or with
    CUDA_VISIBLE_DEVICES set, NVML's GPU `index` is another."""
    from . import gpu_identity

    try:
        import pynvml

        pynvml.nvmlInit()
        ident = gpu_identity.identify(index, env) or {}
        if ident.get("bus_id"):
            h = pynvml.nvmlDeviceGetHandleByPciBusId(ident["bus_id"])
        else:
            h = pynvml.nvmlDeviceGetHandleByUUID(ident["uuid"])
        name = pynvml.nvmlDeviceGetName(h)
        return (name.decode() if isinstance(name, bytes) else name), tuple(pynvml.nvmlDeviceGetCudaComputeCapability(h))
    except Exception:  # no NVML, an old driver, a GPU neither CUDA nor NVML names: the message says less
        return f"GPU {index}", None
