"""ResNet-50 (torchvision) with DistributedDataParallel, reading the data stage's LMDB (Caffe2's
path in the study, PyTorch's now).

Input. On a CPU, LMDBImageNet + Pillow in DataLoader workers (decode, RandomResizedCrop, flip,
normalize). On a GPU (--gpu-decode auto) the workers only read JPEG bytes and gpu_input decodes
and augments whole batches on the GPU, ahead of the step: CPU decoding cannot feed an H100
(docs/benchmarks.md).

Precision. fp32 is float32; on a GPU its matrix products and convolutions use TF32 on the tensor
cores (--tf32 on; PyTorch's default for convolutions already). fp16 is mixed precision in the
device's 16-bit type (--amp-dtype auto): bfloat16 on a CPU and on GPUs that have it (compute
capability >= 8.0: A100, H100), where no loss scaling is needed; float16 with a GradScaler on
older GPUs (the study's V100), or when asked for.

Speed on a GPU, each 'auto' being on for CUDA and off on a CPU (so the CPU default runs as it
always did): channels_last, torch.compile of the model (mode default: BN + ReLU fused into one
pass; reduce-overhead adds CUDA graphs, faster on synthetic data, slower with GPU decoding, whose
work then waits behind the graphs: docs/benchmarks.md), a fused SGD, cuDNN autotuning; with
several GPUs, DDP's gradients are views of its buckets of --bucket-cap-mb (no copy), no BatchNorm
buffer broadcast, and within one node one compiled graph with the all-reduce after the backward
pass (together 96.7-97.5% scaling efficiency on 2 H200s, against 90% for DDP's defaults).
"""
import gc
import os
import sys
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torchvision
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP
from torchvision.transforms import v2 as T

from ..common.errors import StageError, run_main
from ..data.lmdb_dataset import LMDBImageNet
from . import gpu_input, harness

MEAN, STD = gpu_input.MEAN, gpu_input.STD
AUTO = ("auto", "on", "off")
COMPILE_MODES = ("auto", "off", "default", "reduce-overhead", "max-autotune-no-cudagraphs")
GPU_DECODE_WORKERS = 4  # they only read bytes: a few keep up with any GPU (docs/benchmarks.md)


def add_args(ap):
    g = ap.add_argument_group("PyTorch (config training.pytorch)")
    g.add_argument("--amp-dtype", choices=("auto", "bfloat16", "float16"), default="auto",
                   help="fp16's 16-bit type; auto: bfloat16 on a CPU or a GPU of compute capability >= 8.0, "
                        "else float16 with loss scaling")
    g.add_argument("--channels-last", choices=AUTO, default="auto", help="auto: on a GPU")
    g.add_argument("--compile", choices=COMPILE_MODES, default="auto",
                   help="torch.compile mode of the model; auto: default on a GPU, off on a CPU")
    g.add_argument("--gpu-decode", choices=AUTO, default="auto",
                   help="decode and augment on the GPU (gpu_input); auto: on a GPU")
    g.add_argument("--loader-workers", type=int, default=0,
                   help=f"DataLoader workers per rank; 0: --decode-threads, else cores per rank - 1 "
                        f"(at most {GPU_DECODE_WORKERS} with GPU decoding)")
    g.add_argument("--tf32", choices=("on", "off"), default="on", help="fp32 on a GPU: TF32 tensor cores")
    g.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP gradient bucket size")
    g.add_argument("--prefetch", type=int, default=2, help="GPU decoding: batches prepared ahead of the step")
    g.add_argument("--input-lanes", type=int, default=1,
                   help="GPU decoding: batches decoded and augmented at once, each by its own thread and stream")
    g.add_argument("--input-priority", choices=("high", "normal"), default="normal",
                   help="GPU decoding: CUDA stream priority of the input pipeline's work")
    g.add_argument("--jpeg-decoder", choices=gpu_input.DECODERS, default="torchvision",
                   help="GPU decoding: torchvision's decode_jpeg or nvImageCodec's decoder")
    g.add_argument("--decoder-threads", type=int, default=0,
                   help="GPU decoding with nvimgcodec: its CPU threads per lane (0: one per core)")
    g.add_argument("--ddp-graph", choices=("auto", "split", "whole"), default="auto",
                   help="compiled DDP: split (graph cut at bucket boundaries, all-reduce overlaps backward) or "
                        "whole (one graph, all-reduce after backward; CUDA graphs then cover the whole step); "
                        "auto: whole within one node, split across nodes")
    g.add_argument("--broadcast-buffers", choices=("on", "off"), default="off",
                   help="DDP: rank 0's BatchNorm statistics sent to every rank before each forward pass "
                        "(off: each rank keeps its own, as the weights saved are rank 0's)")
    g.add_argument("--grad-compression", choices=("none", "bf16"), default="none",
                   help="DDP: all-reduce gradients as bfloat16 (half the bytes)")
    g.add_argument("--switch-interval-ms", type=float, default=0.0,
                   help="Python's thread switch interval (0: its default, 5 ms): how long the step's launching "
                        "thread can wait for the interpreter lock held by the input thread")
    return ap


@dataclass(frozen=True)
class Settings:
    """The options as resolved for this device (what 'auto' became)."""
    device: torch.device
    amp_dtype: torch.dtype = None  # None: fp32
    channels_last: bool = False
    compile: str = ""  # torch.compile mode; "": eager
    gpu_decode: bool = False
    tf32: bool = False
    bucket_cap_mb: float = 25.0
    ddp_graph: str = "whole"  # as resolved (auto: by node count)
    grad_compression: str = "none"
    broadcast_buffers: bool = False

    def describe(self):
        return {"amp_dtype": str(self.amp_dtype).replace("torch.", "") if self.amp_dtype else "float32",
                "channels_last": self.channels_last, "compile": self.compile or "off",
                "gpu_decode": self.gpu_decode, "tf32": self.tf32, "bucket_cap_mb": self.bucket_cap_mb,
                "ddp_graph": self.ddp_graph, "grad_compression": self.grad_compression,
                "broadcast_buffers": self.broadcast_buffers}


def resolve(args, device, nodes=1):
    cuda = device.type == "cuda"

    def on(value):
        return value == "on" or (value == "auto" and cuda)

    amp = None
    if args.precision == "fp16":
        if args.amp_dtype != "auto":
            amp = getattr(torch, args.amp_dtype)
        elif not cuda or torch.cuda.get_device_capability(device) >= (8, 0):
            amp = torch.bfloat16
        else:
            amp = torch.float16
    mode = {"auto": "default" if cuda else "", "off": ""}.get(args.compile, args.compile)
    return Settings(device=device, amp_dtype=amp, channels_last=on(args.channels_last), compile=mode,
                    gpu_decode=on(args.gpu_decode), tf32=cuda and args.tf32 == "on",
                    bucket_cap_mb=args.bucket_cap_mb, ddp_graph=ddp_graph(args.ddp_graph, nodes),
                    grad_compression=args.grad_compression, broadcast_buffers=args.broadcast_buffers == "on")


def ddp_graph(choice, nodes):
    """Within a node (NVLink) the 102 MB of gradients all-reduce in 0.5 ms and one whole graph
    scaled best (docs/benchmarks.md); across nodes a network all-reduce takes several times
    longer, which only the split graph's overlap with the backward pass can hide."""
    if choice != "auto":
        return choice
    return "whole" if nodes == 1 else "split"


def configure_backends(s):
    if s.device.type != "cuda":
        return
    torch.backends.cudnn.benchmark = True  # fixed shapes: pick each convolution's fastest algorithm once
    torch.backends.cuda.matmul.allow_tf32 = s.tf32
    torch.backends.cudnn.allow_tf32 = s.tf32


class Trainer:
    """The training step every run times: forward under autocast, cross-entropy, backward (DDP
    all-reduces the gradients bucket by bucket during it), SGD with momentum and weight decay."""

    def __init__(self, model, s, lr, momentum, weight_decay, distributed=False):
        cuda = s.device.type == "cuda"
        self.s = s
        self.model = model.to(s.device, **({"memory_format": torch.channels_last} if s.channels_last else {}))
        net = self.model
        if distributed:
            net = DDP(net, device_ids=[s.device.index] if cuda else None, bucket_cap_mb=s.bucket_cap_mb,
                      gradient_as_bucket_view=True, broadcast_buffers=s.broadcast_buffers)
            if s.grad_compression == "bf16":
                net.register_comm_hook(None, default_hooks.bf16_compress_hook)
        # Compiled DDP: "split" cuts the graph at bucket boundaries so all-reduces overlap the
        # backward pass (dynamo's optimize_ddp); "whole" keeps one graph (fused across the cuts,
        # CUDA-graphable) and all-reduces after it. On NVLink the 102 MB of fp32 gradients take
        # 0.5 ms, and "whole" scaled better on 2 H200s (docs/benchmarks.md, runs 7-8). Without the
        # BatchNorm buffer broadcast before every forward, the 2-GPU step lost 1.3 ms instead of 4.
        torch._dynamo.config.optimize_ddp = s.ddp_graph == "split"
        self.net = torch.compile(net, mode=s.compile, dynamic=False) if s.compile else net
        # Fused SGD: one kernel for all parameters; it also takes the GradScaler's scale and
        # inf check on the GPU, without a host sync.
        self.opt = torch.optim.SGD(self.model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay,
                                   **({"fused": True} if cuda else {}))
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


def cpu_transform(image_size):
    return T.Compose([T.RandomResizedCrop(image_size, antialias=True), T.RandomHorizontalFlip(),
                      T.PILToTensor(), T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)])


def loader_workers(args, s, launch):
    if args.loader_workers or args.decode_threads:
        return args.loader_workers or args.decode_threads
    rule = max(1, (os.cpu_count() or 2) // launch.local_size - 1)
    return min(rule, GPU_DECODE_WORKERS) if s.gpu_decode else rule


def _forever(loader, sampler):
    """The loader's batches over epoch after epoch (a new shuffle each). The first iterator is
    made here, in the calling thread: that is where the worker processes are forked."""
    sampler.set_epoch(0)
    first = iter(loader)

    def batches():
        it, epoch = first, 0
        while True:
            yield from it
            epoch += 1
            sampler.set_epoch(epoch)
            it = iter(loader)

    return batches()


@dataclass
class Input:
    classes: int
    train_images: int
    workers: int
    next_batch: object  # () -> (x, y) on the device
    close: object = lambda: None
    stats: object = lambda skip: {}  # GPU decoding: per-stage seconds per batch


def build_input(args, s, launch):
    device = s.device
    layout = torch.channels_last if s.channels_last else torch.contiguous_format
    if args.data_source == "synthetic":
        classes = args.classes or 1000
        g = torch.Generator().manual_seed(args.seed + launch.rank)
        x = torch.randn(args.batch_per_gpu, 3, args.image_size, args.image_size, generator=g)
        x = x.to(device).contiguous(memory_format=layout)
        y = torch.randint(0, classes, (args.batch_per_gpu,), generator=g).to(device)
        return Input(classes, 0, 0, lambda: (x, y))
    classes = harness.classes_of(args.data)
    lmdb = LMDBImageNet(os.path.join(args.data, "train"),
                        transform=None if s.gpu_decode else cpu_transform(args.image_size))
    ds = gpu_input.RawJPEGs(lmdb) if s.gpu_decode else lmdb
    if len(ds) < args.batch_per_gpu * launch.world_size:
        raise StageError(f"{args.data}/train holds {len(ds)} images, fewer than one global batch "
                         f"({args.batch_per_gpu} x {launch.world_size})")
    sampler = torch.utils.data.distributed.DistributedSampler(
        ds, num_replicas=launch.world_size, rank=launch.rank, shuffle=True, seed=args.seed, drop_last=True)
    workers = loader_workers(args, s, launch)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=args.batch_per_gpu, sampler=sampler, num_workers=workers, drop_last=True,
        collate_fn=gpu_input.collate_raw if s.gpu_decode else None,
        pin_memory=device.type == "cuda" and not s.gpu_decode, persistent_workers=True, prefetch_factor=4)
    batches = _forever(loader, sampler)
    if s.gpu_decode:
        gpu = gpu_input.GPUBatches(batches, device, args.image_size, seed=args.seed * 100003 + launch.rank,
                                   channels_last=s.channels_last, depth=args.prefetch, priority=args.input_priority,
                                   lanes=args.input_lanes, decoder=args.jpeg_decoder,
                                   decoder_threads=args.decoder_threads)
        return Input(classes, len(ds), workers, lambda: next(gpu), gpu.close, gpu.stats)

    def next_batch():
        x, y = next(batches)
        x = x.to(device, non_blocking=True).contiguous(memory_format=layout)
        return x, y.to(device, non_blocking=True)

    return Input(classes, len(ds), workers, next_batch)


def _digest(model):
    return harness.weights_digest(p.detach().float().cpu().numpy() for p in model.parameters())


def main():
    args = add_args(harness.arg_parser(__doc__.splitlines()[0])).parse_args()
    run = harness.Run(args, "pytorch", {"torch": torch.__version__, "torchvision": torchvision.__version__})
    launch = run.launch
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", launch.local_rank) if cuda else torch.device("cpu")
    if args.switch_interval_ms:
        sys.setswitchinterval(args.switch_interval_ms / 1e3)
    if cuda:
        torch.cuda.set_device(device)
    else:  # ranks share the host's cores
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // launch.local_size))
    if launch.world_size > 1:
        dist.init_process_group("nccl" if cuda else "gloo", rank=launch.rank, world_size=launch.world_size,
                                init_method=f"tcp://{launch.master_addr}:{launch.master_port}")
    s = resolve(args, device, nodes=launch.num_nodes)
    configure_backends(s)
    torch.manual_seed(args.seed)
    data = build_input(args, s, launch)
    # Zero-initialised last BN of each residual block (Goyal et al., as NVIDIA's ResNet-50 recipes):
    # every block starts as identity, which keeps the first steps from scratch stable.
    model = torchvision.models.resnet50(num_classes=data.classes, zero_init_residual=True)
    trainer = Trainer(model, s, run.lr, args.momentum, args.weight_decay, distributed=launch.world_size > 1)
    steps = run.total_steps(data.train_images)
    waits = []  # seconds the step waited for its batch: the input pipeline's share of the time
    model.train()
    run.log.start()
    for step in range(steps):
        t = time.perf_counter()
        x, y = data.next_batch()
        waits.append(time.perf_counter() - t)
        loss = trainer.step(x, y)
        # The mean loss over ranks; .item() waits for the step, so the step's time is complete.
        if launch.world_size > 1:
            loss = loss.clone()
            dist.all_reduce(loss)
            loss /= launch.world_size
        run.log.end(loss.item())
        if step == 0:
            run.record_digest("after_step_1", _digest(model))
        if step in (0, args.warmup_steps - 1):
            # Compilation leaves many live objects; frozen, later generation-2 collections skip
            # them rather than rescanning them during timed steps. (Measured effect within the
            # run-to-run noise on an H100: docs/benchmarks.md.)
            gc.collect()
            gc.freeze()
            run.log.start()  # the collection is no step's time
    data.close()
    run.record_digest("final", _digest(model))
    if launch.rank == 0:
        torch.save(model.state_dict(), os.path.join(args.out, "weights.pt"))
    timed_wait = sum(waits[args.warmup_steps:])
    # DDP all-reduces each gradient in its parameter's dtype (float32: autocast leaves the parameters
    # alone), or as bfloat16 through the compression hook.
    grads = [p for p in model.parameters() if p.requires_grad]
    wire = torch.bfloat16 if s.grad_compression == "bf16" else grads[0].dtype
    run.finish({"device": torch.cuda.get_device_name(device) if cuda else "cpu", "classes": data.classes,
                "gradients": harness.gradients(sum(p.numel() for p in grads), wire.itemsize,
                                               str(wire).replace("torch.", "")),
                "train_images": data.train_images, "loader_workers": data.workers,
                "amp_dtype": s.describe()["amp_dtype"], "pytorch": s.describe(),
                "input_wait_s_timed": timed_wait, "gpu_input": data.stats(args.warmup_steps + args.prefetch),
                "max_memory_allocated_gb": torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None})
    if launch.world_size > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    run_main(main)
