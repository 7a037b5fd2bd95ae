"""ResNet-50 (torchvision) with DistributedDataParallel, reading the data stage's LMDB (Caffe2's
path in the study, PyTorch's now).

Input (--input), three paths with the same augmentation (RandomResizedCrop, flip, normalize):
cpu, LMDBImageNet + Pillow in DataLoader workers; gpu, the workers only read JPEG bytes and
gpu_input decodes and augments whole batches on the GPU (nvJPEG) in a thread, ahead of the step;
dali, an NVIDIA DALI pipeline reads the LMDB and decodes in its own threads (--dali-decoder cpu:
libjpeg-turbo, cores per GPU - 4 of them; mixed: the hardware JPEG engine and nvJPEG) and resizes,
flips and normalizes on the GPU (dali_input). Pillow in DataLoader workers cannot feed an H100,
and DALI came closest to the synthetic rate there, decoding on the CPU 95.5-101.8% of it in 20 of
21 runs (docs/benchmarks.md, runs 11-34): auto is dali on a GPU, cpu on a CPU. With CUDA the next batch
is taken while the GPU runs the step (--fetch-ahead), so the GPU does not idle at the step
boundary while the CPU fetches it, and, except with DALI, each step's loss is read after the next
step is queued (--loss-lag), so it does not idle while the CPU reads the loss and launches the next
step either (synthetic data: 5,504 -> 5,659-5,676 images/s on an H100). With DALI's mixed decoder
the trainer then waited for the input every other step: no faster (5,043-5,080 against 5,203
images/s) and far less steady (docs/benchmarks.md, runs 18-19); with its CPU decoder it was not
measured with the 12-thread default.

Precision. fp32 is float32; on a GPU its matrix products and convolutions use TF32 on the tensor
cores (--tf32 on; PyTorch's default for convolutions already). fp16 is mixed precision in the
device's 16-bit type (--amp-dtype auto): bfloat16 on a CPU and on GPUs that have it (compute
capability >= 8.0: A100, H100), where no loss scaling is needed; float16 with a GradScaler on
older GPUs (the study's V100), or when asked for.

Speed on a GPU, each 'auto' being on for CUDA and off on a CPU (so the CPU default runs as it
always did): channels_last, torch.compile of the model (BN + ReLU fused into one pass; with
synthetic data or DALI on one node, mode reduce-overhead, i.e. CUDA graphs, and otherwise mode
default: see compile_mode), a fused SGD, cuDNN autotuning; with
several GPUs, DDP's gradients are views of its buckets of --bucket-cap-mb (no copy), no BatchNorm
buffer broadcast, and within one node one compiled graph with the all-reduce after the backward
pass (together 96.7-97.5% scaling efficiency on 2 H200s, against 90% for DDP's defaults).

The long test (--mode accuracy) scores the LMDB's val split with LMDBImageNet + Pillow in
DataLoader workers (shorter side to image_size x 256/224, centre crop), each rank a contiguous
share of its records: no DistributedSampler, whose padding would score some images twice.
"""
import gc
import os
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
import torchvision
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP
from torchvision.transforms import v2 as T

from ..common import affinity, cpus
from ..common.errors import StageError, run_main
from ..data.lmdb_dataset import LMDBImageNet
from . import gpu_input, harness
from .pytorch_options import MEAN, STD, add_args, configure_backends, loader_workers, resolve


def add_experiment_args(ap):
    """Flags of this trainer that no config key sets (benchmarks/ use them)."""
    g = ap.add_argument_group("PyTorch, benchmarks only")
    g.add_argument("--dali-affinity", choices=("on", "off"), default="off",
                   help="input dali on a GPU: pin DALI's CPU threads to cores (DALI's set_affinity)")
    g.add_argument("--dali-executor", choices=("dynamic", "legacy"), default="dynamic",
                   help="input dali: DALI's executor (dynamic, its default since 1.x; legacy: the pipelined "
                        "CPU and GPU stages with their own queues)")
    g.add_argument("--input-priority", choices=("high", "normal"), default="normal",
                   help="input gpu: CUDA stream priority of the input pipeline's work")
    g.add_argument("--decoder-threads", type=int, default=0,
                   help="input gpu with nvimgcodec: its CPU threads per lane (0: one per core)")
    g.add_argument("--fetch-ahead", choices=("auto", "on", "off"), default="auto",
                   help="take the next batch from the input while the GPU still runs this step, before the "
                        "step's loss is read (which waits for the GPU): auto, on with CUDA")
    g.add_argument("--loss-lag", choices=("auto", "0", "1"), default="auto",
                   help="read each step's loss after the next step is queued (1) or before (0): with 1 the GPU "
                        "does not idle while the CPU reads the loss and launches the next step; auto: 1 with CUDA "
                        "unless the input is dali, which then waited in every other step (docs/benchmarks.md, run 18)")
    g.add_argument("--switch-interval-ms", type=float, default=0.0,
                   help="Python's thread switch interval (0: its default, 5 ms): how long the step's launching "
                        "thread can wait for the interpreter lock held by the input thread")
    g.add_argument("--main-core", choices=("on", "off"), default="off",
                   help="--mode steps: after the warm-up steps, the training thread on a physical core of its own "
                        "and every other thread of the process off it (common.affinity)")
    g.add_argument("--profile-steps", type=int, default=0,
                   help="after the timed steps, this many more under torch.profiler (CPU and CUDA), written to "
                        "OUT/trace.rank<r>.json.gz; they are no step of the summary")
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


def input_seed(seed, rank):
    """The seed of a rank's GPU or DALI input (its crops, flips and, for DALI, its shuffle): every
    rank draws differently, and the same run draws the same."""
    return seed * 100003 + rank


def dali_input_module():
    """dali_input, imported only for --input dali: the other paths must run where DALI is not
    installed."""
    try:
        from . import dali_input
    except ImportError as exc:
        raise StageError(f"--input dali needs NVIDIA DALI, which could not be imported ({exc}); install "
                         f"nvidia-dali-cuda130 (envs/torch.txt) or choose --input cpu or gpu") from exc
    return dali_input


@dataclass
class Input:
    classes: int
    train_images: int
    workers: int
    next_batch: object  # () -> (x, y) on the device
    close: object = lambda: None
    stats: object = lambda skip: {}  # input gpu: per-stage seconds per batch; dali: its settings


def build_input(args, s, launch, per_rank=None):
    """per_rank: CPUs of the rank's share (common.cpus; None: read here)."""
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
    raw = s.input == "gpu"  # the workers read JPEG bytes only
    train = os.path.join(args.data, "train")
    lmdb = LMDBImageNet(train, transform=cpu_transform(args.image_size) if s.input == "cpu" else None)
    if len(lmdb) < args.batch_per_gpu * launch.world_size:
        raise StageError(f"{train} holds {len(lmdb)} images, fewer than one global batch "
                         f"({args.batch_per_gpu} x {launch.world_size})")
    workers = loader_workers(args, s, per_rank or cpus.of(launch).per_rank)
    seed = input_seed(args.seed, launch.rank)
    if s.input == "dali":
        dali = dali_input_module().DALIBatches(
            train, device, args.image_size, args.batch_per_gpu, seed, rank=launch.rank,
            world_size=launch.world_size, channels_last=s.channels_last, depth=s.prefetch, threads=workers,
            hw_decoder_load=args.hw_decoder_load, executor=args.dali_executor,
            decoder=args.dali_decoder, pinned_mb=s.dali_pools_mb[0], device_mb=s.dali_pools_mb[1],
            affinity=args.dali_affinity == "on")
        return Input(classes, len(lmdb), workers, lambda: next(dali), dali.close, dali.stats)
    ds = gpu_input.RawJPEGs(lmdb) if raw else lmdb
    sampler = torch.utils.data.distributed.DistributedSampler(
        ds, num_replicas=launch.world_size, rank=launch.rank, shuffle=True, seed=args.seed, drop_last=True)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=args.batch_per_gpu, sampler=sampler, num_workers=workers, drop_last=True,
        collate_fn=gpu_input.collate_raw if raw else None,
        pin_memory=device.type == "cuda" and not raw, persistent_workers=True, prefetch_factor=4)
    batches = _forever(loader, sampler)
    if raw:
        gpu = gpu_input.GPUBatches(batches, device, args.image_size, seed=seed,
                                   channels_last=s.channels_last, depth=s.prefetch, priority=args.input_priority,
                                   lanes=args.input_lanes, decoder=args.jpeg_decoder,
                                   decoder_threads=args.decoder_threads)
        return Input(classes, len(ds), workers, lambda: next(gpu), gpu.close, gpu.stats)

    def next_batch():
        x, y = next(batches)
        x = x.to(device, non_blocking=True).contiguous(memory_format=layout)
        return x, y.to(device, non_blocking=True)

    return Input(classes, len(ds), workers, next_batch)


class _Numbered(torch.utils.data.Dataset):
    """The records of one rank's share, each item with its record number."""

    def __init__(self, ds, records):
        self.ds, self.records = ds, records

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        x, y = self.ds[self.records[i]]
        return x, y, self.records[i]


def val_loader(args, launch, workers):
    size = args.image_size
    transform = T.Compose([T.Resize(harness.resize_shorter(size), antialias=True), T.CenterCrop(size),
                           T.PILToTensor(), T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)])
    ds = LMDBImageNet(os.path.join(args.data, "val"), transform=transform)
    share = _Numbered(ds, harness.val_share(len(ds), launch.rank, launch.world_size))
    return torch.utils.data.DataLoader(share, batch_size=args.batch_per_gpu, num_workers=workers,
                                       persistent_workers=workers > 0)


def profile(args, run, step):
    """args.profile_steps steps under torch.profiler, after the timed ones: where the step's time
    goes on the host and on each CUDA stream (the input's work beside the step's)."""
    from torch.profiler import ProfilerActivity, profile as torch_profile
    if run.telemetry:  # its samples are of the timed steps only
        run.telemetry.stop()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with torch_profile(activities=activities) as prof:
        for _ in range(args.profile_steps):
            step()
    prof.export_chrome_trace(os.path.join(args.out, f"trace.rank{run.launch.rank}.json.gz"))


def long_test(args, run, trainer, s, workers, classes, train_step):
    """--mode accuracy: the epochs, evaluations and records are harness.LongTest's; here the
    step, the learning rate and the evaluation in PyTorch."""
    launch, model, k = run.launch, trainer.model, min(5, classes)
    layout = torch.channels_last if s.channels_last else torch.contiguous_format
    loader = val_loader(args, launch, workers)

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
        return (torch.cat(numbers).numpy(), torch.cat(labels).numpy(),
                torch.cat(top).numpy() if top else np.zeros((0, k), np.int64))

    def allreduce_sum(counts):
        t = torch.from_numpy(counts).to(s.device)
        if launch.world_size > 1:
            dist.all_reduce(t)
        return t.cpu().numpy()

    return harness.LongTest(run).run_epochs(train_step, set_lr, evaluate, allreduce_sum, lambda: _digest(model))


def last(values):
    return values[-1] if values else None


def first_kernel(device):
    """A matmul and element-wise kernels on the rank's GPU (made current first: no context on
    another GPU), read back on the host."""
    with torch.cuda.device(device):
        x = torch.full((64, 64), 0.5, device=device)
        return (x @ x - 1).relu().sum().item()


def build():
    return (f"PyTorch {torch.__version__} for CUDA {torch.version.cuda}, code for "
            f"{' '.join(torch.cuda.get_arch_list())}")


def _digest(model):
    return harness.weights_digest(p.detach().float().cpu().numpy() for p in model.parameters())


def main():
    args = add_experiment_args(add_args(harness.arg_parser(__doc__.splitlines()[0]))).parse_args()
    run = harness.Run(args, "pytorch", {"torch": torch.__version__, "torchvision": torchvision.__version__})
    launch = run.launch
    cuda = torch.cuda.is_available()
    harness.check_gpus(launch, args, "PyTorch", torch.cuda.device_count() if cuda else 0, torch.backends.cuda.is_built(),
                       (dist.is_nccl_available(), "torch.distributed has no NCCL backend")
                       if launch.world_size > 1 else None)
    device = torch.device("cuda", launch.local_rank) if cuda else torch.device("cpu")
    if cuda:
        run.check_kernel(lambda: first_kernel(device), (torch.cuda.get_device_name(device),
                                                        torch.cuda.get_device_capability(device)), build())
    if args.switch_interval_ms:
        sys.setswitchinterval(args.switch_interval_ms / 1e3)
    if cuda:
        torch.cuda.set_device(device)
    else:  # the rank's share of its CPUs
        torch.set_num_threads(run.cpus.per_rank)
    if launch.world_size > 1:
        dist.init_process_group("nccl" if cuda else "gloo", rank=launch.rank, world_size=launch.world_size,
                                init_method=f"tcp://{launch.master_addr}:{launch.master_port}")
    s = resolve(args, device, nodes=launch.num_nodes)
    cores = affinity.plan(launch.local_rank, launch.local_size) if args.main_core == "on" else None
    configure_backends(s)
    torch.manual_seed(args.seed)
    data = build_input(args, s, launch, run.cpus.per_rank)
    run.record_threads(torch=torch.get_num_threads(),
                       **({"dali" if s.input == "dali" else "loader_workers": data.workers} if data.workers else {}))
    # Zero-initialised last BN of each residual block (Goyal et al., as NVIDIA's ResNet-50 recipes):
    # every block starts as identity, which keeps the first steps from scratch stable.
    model = torchvision.models.resnet50(num_classes=data.classes, zero_init_residual=True)
    trainer = Trainer(model, s, run.lr, args.momentum, args.weight_decay, distributed=launch.world_size > 1)
    waits = []  # seconds spent taking batches from the input: its share of the time
    device_s = []  # each step's time on the GPU, as its loss is read
    # Taken during the step before (fetch ahead), the batch is ready when the step starts: the GPU
    # does not idle while the CPU waits for the input between the loss read and the next launch.
    ahead = [] if (args.fetch_ahead == "on" or (args.fetch_ahead == "auto" and cuda)) else None

    def fetch():
        t = time.perf_counter()
        batch = data.next_batch()
        waits.append(time.perf_counter() - t)
        return batch

    def launch_step():
        """Queues one step; -> (a function that waits for the step and returns its mean loss over
        ranks; the batch, which must live until the step has run: DALI's buffers are handed over
        without a copy)."""
        x, y = ahead.pop() if ahead else fetch()
        if cuda:
            began = torch.cuda.Event(enable_timing=True)
            began.record()
        loss = trainer.step(x, y)
        if launch.world_size > 1:
            loss = loss.clone()
            dist.all_reduce(loss)
            loss /= launch.world_size
        read = loss.item
        if cuda:
            # Copied out now, behind this step's kernels only: .item() later would queue its copy
            # behind the next step's too and wait for that step as well.
            host = torch.empty((), dtype=loss.dtype, pin_memory=True)
            host.copy_(loss.detach(), non_blocking=True)
            done = torch.cuda.Event(enable_timing=True)
            done.record()

            def read():
                done.synchronize()
                device_s.append(began.elapsed_time(done) / 1e3)
                return host.item()
        if ahead is not None:
            ahead.append(fetch())
        return read, (x, y)

    def train_step(step):
        return launch_step()[0]()  # waits for the step: its time is complete

    counted = 0

    def step_wait():
        """The input waits since the last logged step: this step's (with --loss-lag 1, its batches
        are the steps' queued since)."""
        nonlocal counted
        wait, counted = sum(waits[counted:]), len(waits)
        return wait

    model.train()
    extra = {}
    if args.mode == "accuracy":
        extra = long_test(args, run, trainer, s, data.workers, data.classes, train_step)
    else:
        steps = run.total_steps(data.train_images)
        # One step behind (--loss-lag 1): step k's loss is read after step k+1 is queued, so the GPU
        # has the next step's work while the CPU reads, logs and launches again; each logged step
        # is still one step's time (from one loss read to the next).
        behind = None
        run.log.start()
        for step in range(steps):
            queued = launch_step()
            if behind is not None:
                run.log.end(behind[0](), input_wait_s=step_wait(), device_s=last(device_s))
            behind = queued
            if s.loss_lag and step not in (0, args.warmup_steps - 1, steps - 1):
                continue
            run.log.end(behind[0](), input_wait_s=step_wait(), device_s=last(device_s))  # caught up: nothing is queued past this step
            behind = None
            if step == 0:
                run.record_digest("after_step_1", _digest(model))
            if step in (0, args.warmup_steps - 1):
                # Compilation leaves many live objects; frozen, later generation-2 collections skip
                # them rather than rescanning them during timed steps. (Measured effect within the
                # run-to-run noise on an H100: docs/benchmarks.md.)
                gc.collect()
                gc.freeze()
                if cores and step == max(args.warmup_steps - 1, 0) and "main_core" not in extra:
                    extra["main_core"] = affinity.isolate_calling_thread(*cores)
                run.log.start()  # the collection is no step's time; the timed steps start with no step queued
        if args.profile_steps > 0:
            profile(args, run, lambda: train_step(None))
    data.close()
    run.record_digest("final", _digest(model))
    if launch.rank == 0:
        torch.save(model.state_dict(), os.path.join(args.out, "weights.pt"))
    timed_wait = sum(waits[run.log.warmup_steps:])
    # DDP all-reduces each gradient in its parameter's dtype (float32: autocast leaves the parameters
    # alone), or as bfloat16 through the compression hook.
    grads = [p for p in model.parameters() if p.requires_grad]
    wire = torch.bfloat16 if s.grad_compression == "bf16" else grads[0].dtype
    run.finish({"device": torch.cuda.get_device_name(device) if cuda else "cpu", "device_type": "gpu" if cuda else "cpu",
                "classes": data.classes, "train_images": data.train_images, "loader_workers": data.workers,
                "input": s.input,
                "gradients": harness.gradients(sum(p.numel() for p in grads), wire.itemsize,
                                               str(wire).replace("torch.", "")),
                "amp_dtype": s.describe()["amp_dtype"], "pytorch": s.describe(),
                "fetch_ahead": ahead is not None, "input_wait_s_timed": timed_wait, "gpu_input": data.stats(args.warmup_steps + s.prefetch),
                "max_memory_allocated_gb": torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None,
                **extra})
    if launch.world_size > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    run_main(main)
