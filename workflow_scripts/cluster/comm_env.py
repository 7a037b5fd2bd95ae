"""The communication libraries' environment of a run: what config nccl_env may set (NCCL's,
PyTorch symmetric memory's and NVSHMEM's own variables, e.g. NCCL_NVLS_ENABLE=0 to keep NVLink
multicast off), given by the launcher to every rank of a training run and of the interconnect
stage alike, and what each of them records in its summary: those variables plus the network
interface and Horovod settings the launcher chose, whatever set them."""

import os
import re

SETTABLE = re.compile(r"(NCCL|TORCH_SYMM_MEM|NVSHMEM)_[A-Z0-9_]+")
RECORDED = re.compile(
    SETTABLE.pattern + r"|GLOO_SOCKET_IFNAME|HOROVOD_GLOO_IFACE|HOROVOD_GLOO_TIMEOUT_SECONDS"
    r"|HOROVOD_CONTROLLER"
)


def recorded(env=None):
    """The variables of RECORDED set in `env` (this process's environment by default)."""
    env = os.environ if env is None else env
    return {k: env[k] for k in sorted(env) if RECORDED.fullmatch(k)}
