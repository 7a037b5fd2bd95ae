"""NVLink multicast (NVLS) off, for the benchmarks/ scripts: the shared GPU hosts this project
measures on are lent on that condition, so those scripts set it themselves. The pipeline sets no
such default: its runs and its interconnect stage take config nccl_env (cluster/comm_env.py), NCCL's
own behaviour when empty. NCCL, PyTorch's symmetric memory and NVSHMEM each read one of these
variables when they start, so a process sets them before it initialises any of them."""

import os

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def switch_off(env=None):
    """Set the variables in `env` (this process's environment by default); returns them."""
    (os.environ if env is None else env).update(MULTICAST_OFF)
    return dict(MULTICAST_OFF)
