"""ResNet-50 (torchvision) with DistributedDataParallel, reading the data stage's LMDB (Caffe2's
path in the study, PyTorch's now) through one of the input paths of pytorch_input.

Precision. fp32 is float32; on a GPU its matrix products and convolutions use TF32 on the tensor
cores unless --fp32-math strict (config training.fp32_math). fp16 is mixed precision in the
device's 16-bit type (--amp-dtype auto): bfloat16 on a CPU and on GPUs that have it (compute
capability >= 8.0), where no loss scaling is needed; float16 with a GradScaler on older GPUs (the
study's V100), or when asked for.

Speed on a GPU, each 'auto' on for CUDA and off on a CPU (so the CPU default runs as it always
did): channels_last, torch.compile of the model (CUDA graphs where pytorch_options.compile_mode
says), a fused SGD, cuDNN autotuning; with several GPUs, DDP's gradients as views of its buckets,
no BatchNorm buffer broadcast, and within one node one compiled graph with the all-reduce after
the backward pass. The adapter's capabilities in the timed loop (loop): on CUDA the next batch is
taken while the GPU runs the step (--fetch-ahead), each loss is read one step behind except on
the inputs pytorch_options names (--loss-lag), and each step's device time is taken from CUDA
events. What each
default gained is in docs/decisions.md and docs/history/pytorch-gpu-input-paths.md.
"""

import os
import sys

import numpy as np
import torch
import torch.distributed as dist
import torchvision
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from ..common.errors import StageError, run_main
from . import harness, loop, pytorch_input
from .input_capacity import Feed
from .pytorch_options import add_args, configure_backends, resolve


def add_experiment_args(ap):
    """Flags of this trainer that no config key sets (benchmarks/ use them)."""
    g = ap.add_argument_group("PyTorch, benchmarks only")
    g.add_argument(
        "--fetch-ahead",
        choices=("auto", "on", "off"),
        default="auto",
        help="take the next batch from the input while the GPU still runs this step, before the "
        "step's loss is read (which waits for the GPU): auto, on with CUDA",
    )
    g.add_argument(
        "--ddp-one-rank",
        action="store_true",
        help="one process: still wrap the model in DistributedDataParallel over a process group of one "
        "(NCCL on a GPU), so that DDP's hooks and graph cuts run where only one GPU is at hand",
    )
    g.add_argument(
        "--loss-wait",
        choices=("spin", "block"),
        default="spin",
        help="how the host waits for a step's loss on a GPU: spin (CUDA's default for an event: a core "
        "busy while it waits) or block (the thread sleeps until the GPU signals: the core is free for "
        "the input's threads)",
    )
    g.add_argument(
        "--dali-copy",
        action="store_true",
        help="DALI: copy each run's output into the trainer's own tensors on the GPU and let DALI's "
        "buffers go at once, rather than handing views of them to the step",
    )
    g.add_argument(
        "--dali-fast-idct",
        action="store_true",
        help="DALI: libjpeg-turbo's fast integer IDCT where the CPU decodes (DALI's use_fast_idct): "
        "less exact pixels for less CPU a JPEG",
    )
    g.add_argument(
        "--drain-input",
        choices=("auto", "off"),
        default="auto",
        help="drop the batches the input queued during the warm-up before the timed steps start "
        "(the loop's drain_input): auto, on with CUDA for input dali and gpu; off: keep them (the "
        "timed steps then draw on batches prepared before the clock started)",
    )
    return ap


class Trainer:
    """The training step every run times: forward under autocast, cross-entropy, backward (DDP
    all-reduces the gradients bucket by bucket during it), SGD with momentum and weight decay."""

    def __init__(self, model, s, lr, momentum, weight_decay, distributed=False):
        cuda = s.device.type == "cuda"
        self.s = s
        self.model = model.to(s.device, **({"memory_format": torch.channels_last} if s.channels_last else {}))
        net = self.model
        if distributed:
            net = DDP(
                net,
                device_ids=[s.device.index] if cuda else None,
                bucket_cap_mb=s.bucket_cap_mb,
                gradient_as_bucket_view=True,
                broadcast_buffers=s.broadcast_buffers,
            )
            if s.grad_compression == "bf16":
                net.register_comm_hook(None, default_hooks.bf16_compress_hook)
        # Compiled DDP: "split" cuts the graph at bucket boundaries so all-reduces overlap the
        # backward pass (dynamo's optimize_ddp); "whole" keeps one graph (fused across the cuts,
        # CUDA-graphable) and all-reduces after it (which scaled better within a node:
        # pytorch_options.ddp_graph, docs/decisions.md#ddp_graph).
        torch._dynamo.config.optimize_ddp = s.ddp_graph == "split"
        self.net = torch.compile(net, mode=s.compile, dynamic=False) if s.compile else net
        # Fused SGD: one kernel for all parameters; it also takes the GradScaler's scale and
        # inf check on the GPU, without a host sync.
        self.opt = torch.optim.SGD(
            self.model.parameters(),
            lr=lr,
            momentum=momentum,
            weight_decay=weight_decay,
            **({"fused": True} if cuda else {}),
        )
        self.scaler = torch.amp.GradScaler(s.device.type, enabled=s.amp_dtype == torch.float16)
        self.loss_fn = torch.nn.CrossEntropyLoss()

    def step(self, x, y):
        """One step; returns the loss (a device tensor: reading it waits for the step)."""
        if self.s.compile == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()
        amp = self.s.amp_dtype
        with torch.autocast(self.s.device.type, dtype=amp or torch.float32, enabled=amp is not None):
            loss = self.loss_fn(self.net(x), y)
        self.opt.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()
        return loss.detach()


class PyTorch(loop.Adapter):
    framework, name, description = "pytorch", "PyTorch", __doc__.splitlines()[0]

    def add_args(self, ap):
        return add_experiment_args(add_args(ap))

    def versions(self):
        return {"torch": torch.__version__, "torchvision": torchvision.__version__}

    def gpus(self, run):
        self.cuda = torch.cuda.is_available()
        return (
            torch.cuda.device_count() if self.cuda else 0,
            torch.backends.cuda.is_built(),
            (dist.is_nccl_available(), "torch.distributed has no NCCL backend") if run.launch.world_size > 1 else None,
        )

    def start(self, run):
        args, launch, cuda = run.args, run.launch, self.cuda
        # the GPU next to the rank's CPUs (cluster/gpu_choice.py), else its local rank's
        gpu = run.choose_gpu(torch.cuda.device_count()) if cuda else None
        self.device = device = torch.device("cuda", gpu) if cuda else torch.device("cpu")
        if cuda:
            run.check_kernel(
                lambda: first_kernel(device),
                (torch.cuda.get_device_name(device), torch.cuda.get_device_capability(device)),
                build(),
            )
            torch.cuda.set_device(device)
        else:  # the rank's share of its CPUs
            torch.set_num_threads(run.cpus.per_rank)
        self.ddp = launch.world_size > 1 or args.ddp_one_rank
        if self.ddp:
            dist.init_process_group(
                "nccl" if cuda else "gloo",
                rank=launch.rank,
                world_size=launch.world_size,
                init_method=f"tcp://{launch.master_addr}:{launch.master_port}",
            )
        self.s = resolve(args, device, nodes=launch.num_nodes, distributed=self.ddp, cpus=run.cpus.per_rank)
        self.fetch_ahead = args.fetch_ahead == "on" or (args.fetch_ahead == "auto" and cuda)
        self.loss_lag = self.s.loss_lag
        self.drain_input = args.drain_input == "auto" and cuda and self.s.input in ("dali", "gpu")
        self.blocking = args.loss_wait == "block"
        configure_backends(self.s)
        torch.manual_seed(args.seed)

    def build_input(self, run, classes, manifest):
        s = self.s
        self.data = pytorch_input.build_input(run.args, s, run.launch, classes, run.cpus.per_rank)
        workers = self.data.workers
        run.record_threads(
            torch=torch.get_num_threads(),
            **({"dali" if s.input == "dali" else "loader_workers": workers} if workers else {}),
        )

    def build_model(self, run, classes):
        model = torchvision.models.resnet50(num_classes=classes, zero_init_residual=True)
        self.trainer = Trainer(model, self.s, run.lr, run.args.momentum, run.args.weight_decay, distributed=self.ddp)
        self.model, self.world_size = self.trainer.model, run.launch.world_size
        self.model.train()

    def next_batch(self):
        return self.data.next_batch()

    def input_alone(self, run, gpu):
        """The train input as start and build_input make it for a rank on a GPU (gpu: the first one
        it sees) or the CPU, with no process group, model or run directory: what input_capacity
        times. Its batches are on the step's device."""
        if gpu and not torch.cuda.is_available():
            raise StageError(f"PyTorch in {sys.executable} sees no GPU: measure its input with --device cpu")
        self.cuda, self.device = gpu, torch.device("cuda", 0) if gpu else torch.device("cpu")
        if gpu:
            torch.cuda.set_device(self.device)
        else:  # as start() does
            torch.set_num_threads(run.cpus.per_rank)
        self.s = s = resolve(run.args, self.device, distributed=False, cpus=run.cpus.per_rank)
        configure_backends(s)
        torch.manual_seed(run.args.seed)
        self.build_input(run, harness.classes_of(run.args.data), None)
        data, stream = self.data, torch.cuda.current_stream(self.device) if gpu else None
        dali = sys.modules.get("nvidia.dali")
        return Feed(
            self.next_batch,
            # the batch's copies and augmentation are queued on the step's stream
            ready=(lambda batch: stream.synchronize()) if gpu else (lambda batch: None),
            close=data.close,
            path=s.input,
            decoder=data.stats(0)["decoder"] if s.input == "dali" else s.jpeg_decoder if s.input == "gpu" else "Pillow",
            threads=data.workers,
            ahead=s.prefetch + (0 if s.input == "dali" else data.workers * pytorch_input.LOADER_PREFETCH),
            stats=data.stats,
            versions={
                "torch": torch.__version__,
                "torchvision": torchvision.__version__,
                **({"nvidia-dali": dali.__version__} if dali else {}),
            },
        )

    def launch(self, batch, step):
        cuda = self.cuda
        if cuda:
            began = torch.cuda.Event(enable_timing=True)
            began.record()
        loss = self.trainer.step(*batch)
        if self.world_size > 1:
            loss = loss.clone()
            dist.all_reduce(loss)
            loss /= self.world_size
        if not cuda:
            return lambda: (loss.item(), None)
        # Copied out now, behind this step's kernels only: .item() later would queue its copy
        # behind the next step's too and wait for that step as well.
        host = torch.empty((), dtype=loss.dtype, pin_memory=True)
        host.copy_(loss.detach(), non_blocking=True)
        done = torch.cuda.Event(enable_timing=True, blocking=self.blocking)
        done.record()

        def read():
            done.synchronize()
            return host.item(), began.elapsed_time(done) / 1e3

        return read

    def digest(self):
        return harness.weights_digest(p.detach().float().cpu().numpy() for p in self.model.parameters())

    def long_test_parts(self, run, classes):
        return long_test_parts(run.args, run, self.trainer, self.s, self.data.workers, classes)

    def save_state(self, directory):
        t = self.trainer
        torch.save(
            {"model": self.model.state_dict(), "optimizer": t.opt.state_dict(), "scaler": t.scaler.state_dict()},
            os.path.join(directory, "state.pt"),
        )

    def load_state(self, directory):
        t = self.trainer
        state = torch.load(os.path.join(directory, "state.pt"), map_location=self.device, weights_only=True)
        self.model.load_state_dict(state["model"])
        t.opt.load_state_dict(state["optimizer"])
        t.scaler.load_state_dict(state["scaler"])

    def close(self):
        self.data.close()

    def save(self, out):
        torch.save(self.model.state_dict(), os.path.join(out, "weights.pt"))

    def summary(self, run):
        s, cuda, device = self.s, self.cuda, self.device
        # DDP all-reduces each gradient in its parameter's dtype (float32: autocast leaves the
        # parameters alone), or as bfloat16 through the compression hook.
        grads = [p for p in self.model.parameters() if p.requires_grad]
        wire = torch.bfloat16 if s.grad_compression == "bf16" else grads[0].dtype
        return {
            "device": torch.cuda.get_device_name(device) if cuda else "cpu",
            "device_type": "gpu" if cuda else "cpu",
            "loader_workers": self.data.workers,
            "input": s.input,
            "gradients": harness.gradients(
                sum(p.numel() for p in grads), wire.itemsize, str(wire).replace("torch.", "")
            ),
            "amp_dtype": s.describe()["amp_dtype"],
            "pytorch": s.describe(),
            "execution_mode": s.execution_mode(),
            "gpu_input": self.data.stats(run.args.warmup_steps + s.prefetch),
        }

    def figures(self, run):
        cuda = self.cuda
        return {"max_memory_allocated_gb": torch.cuda.max_memory_allocated(self.device) / 2**30 if cuda else None}

    def math(self, run):
        return self.s.describe()["amp_dtype"], "matrix products and convolutions"

    def finish(self, run):
        if self.ddp:
            dist.barrier()
            dist.destroy_process_group()


def long_test_parts(args, run, trainer, s, workers, classes):
    """--mode accuracy: long_test.LongTest's learning rate, evaluation and count all-reduce in PyTorch."""
    launch, model, k = run.launch, trainer.model, min(5, classes)
    layout = torch.channels_last if s.channels_last else torch.contiguous_format
    loader = pytorch_input.val_loader(args, launch, workers)

    def set_lr(lr):
        for group in trainer.opt.param_groups:
            group["lr"] = lr

    @torch.no_grad()
    def evaluate():
        # Each rank has its own BatchNorm statistics (only gradients are averaged): the ranks
        # score one model, whose statistics are the ranks' mean.
        if launch.world_size > 1:
            for b in model.buffers():
                if b.is_floating_point():
                    dist.all_reduce(b)
                    b /= launch.world_size
        model.eval()
        numbers, labels, top = [torch.zeros(0, dtype=torch.long)], [torch.zeros(0, dtype=torch.long)], []
        amp = s.amp_dtype
        for x, y, n in loader:
            x = x.to(s.device, non_blocking=True).contiguous(memory_format=layout)
            with torch.autocast(s.device.type, dtype=amp or torch.float32, enabled=amp is not None):
                top.append(model(x).topk(k, dim=1).indices.cpu())
            numbers.append(n), labels.append(y)
        model.train()
        return (
            torch.cat(numbers).numpy(),
            torch.cat(labels).numpy(),
            torch.cat(top).numpy() if top else np.zeros((0, k), np.int64),
        )

    def allreduce_sum(counts):
        t = torch.from_numpy(counts).to(s.device)
        if launch.world_size > 1:
            dist.all_reduce(t)
        return t.cpu().numpy()

    return set_lr, evaluate, allreduce_sum


def first_kernel(device):
    """A matmul and element-wise kernels on the rank's GPU (made current first: no context on
    another GPU), read back on the host."""
    with torch.cuda.device(device):
        x = torch.full((64, 64), 0.5, device=device)
        return (x @ x - 1).relu().sum().item()


def build():
    return f"PyTorch {torch.__version__} for CUDA {torch.version.cuda}, code for {' '.join(torch.cuda.get_arch_list())}"


if __name__ == "__main__":
    run_main(lambda: loop.main(PyTorch()))
