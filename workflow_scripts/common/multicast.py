"""NVLink multicast (NVLS) stays off: the shared GPU hosts this project measures on are lent on
that condition. NCCL, PyTorch's symmetric memory and NVSHMEM each read one
of these variables when they start, so a process sets them before it initialises any of them."""
import os

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def switch_off(env=None):
    """Set the variables in `env` (this process's environment by default); returns them."""
    (os.environ if env is None else env).update(MULTICAST_OFF)
    return dict(MULTICAST_OFF)
