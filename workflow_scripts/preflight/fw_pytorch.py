"""PyTorch's side of a preflight task: the tiny net on the task's device, torch.distributed's
all-reduce (NCCL on GPUs, Gloo on the CPU), as pytorch_ddp uses them."""

import time

import torch
import torch.distributed as dist
from torch import nn


class Framework:
    name = "PyTorch"

    def __init__(self, launch, threads):
        self.launch, self.gpu = launch, False
        self.device = torch.device("cpu")
        torch.set_num_threads(threads.get("torch", 1))

    def devices(self):
        cuda = torch.cuda.is_available()
        count = torch.cuda.device_count() if cuda else 0
        names = [
            f"{torch.cuda.get_device_name(i)} (sm_{''.join(map(str, torch.cuda.get_device_capability(i)))})"
            for i in range(count)
        ]
        return {
            "cuda_build": torch.backends.cuda.is_built(),
            "count": count,
            "names": names,
            "nccl": (dist.is_nccl_available(), "torch.distributed has no NCCL backend"),
        }

    def use_gpu(self, index=None):
        """The task's GPU: `index` as CUDA numbers them (rank.py's gpu_choice), else its local rank's."""
        self.gpu, self.device = True, torch.device("cuda", self.launch.local_rank if index is None else index)
        torch.cuda.set_device(self.device)

    def _sync(self):
        if self.gpu:
            torch.cuda.synchronize(self.device)

    def kernel(self, precision):
        """Seconds for forward + backward of a tiny conv net, first call (kernel load, JIT) included."""
        torch.manual_seed(0)
        start = time.perf_counter()
        net = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(8, 10),
        ).to(self.device)
        x = torch.randn(8, 3, 32, 32, device=self.device)
        y = torch.randint(0, 10, (8,), device=self.device)
        # fp16 as the trainer's amp_dtype auto: bfloat16 on a CPU or compute capability >= 8
        half = torch.float16 if self.gpu and torch.cuda.get_device_capability(self.device)[0] < 8 else torch.bfloat16
        with torch.autocast(self.device.type, dtype=half, enabled=precision == "fp16"):
            loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        self._sync()
        return time.perf_counter() - start, float(loss)

    @property
    def backend(self):
        return "nccl" if self.gpu else "gloo"

    def init(self):
        la = self.launch
        dist.init_process_group(
            self.backend, rank=la.rank, world_size=la.world_size, init_method=f"tcp://{la.master_addr}:{la.master_port}"
        )

    def allreduce(self, elements, value):
        t = torch.full((elements,), float(value), dtype=torch.float32, device=self.device)
        self._sync()
        start = time.perf_counter()
        dist.all_reduce(t)
        self._sync()
        seconds = time.perf_counter() - start
        return float(t.min()), float(t.max()), seconds
