"""training.pytorch's options: the trainer's flags for them and what each 'auto' becomes on
the device a rank runs on (Settings)."""

from dataclasses import dataclass

import torch

from ..common import schema
from ..common.errors import StageError

INPUTS = ("auto", "cpu", "gpu", "dali")
# The defaults behind the 'auto' and 0 rules of training.pytorch (schemas/config.schema.yaml
# states them; why these: docs/decisions.md).
GPU_DECODE_WORKERS = 4  # input gpu's workers only read bytes (docs/decisions.md#loader_workers)
# DALI's threads: from DALI_CPU_DECODER_MIN_CPUS up, where libjpeg-turbo decodes alone and each
# thread keeps only part of a core busy, as many as the rank's cores, at most DALI_MAX_THREADS;
# below, beside the hardware decoder's share, the cores less what the trainer uses (its training
# thread, CUDA's and DALI's own) (docs/decisions.md#loader_workers).
DALI_TRAINER_CORES = 2
DALI_MAX_THREADS = 14
# DALI pays a fixed cost each run of its pipeline: on a GPU it runs at least this many images at once,
# split into the step's batches (docs/decisions.md#dali_run_batches).
DALI_RUN_IMAGES = 512
# dali_decoder auto: libjpeg-turbo alone where a rank has this many CPUs; below, split, the GPU's
# decoder taking DALI_HW_SHARE of the JPEGs (docs/decisions.md#dali_decoder).
DALI_CPU_DECODER_MIN_CPUS = 12
DALI_HW_SHARE = 0.8
# dali_gpu_threads 0: of dali_decoder dual's threads, one in this many serve the GPU-decoding pipeline
# (docs/decisions.md#dali_decoder).
DALI_THREADS_PER_GPU_THREAD = 5
# Input paths whose loss is read at the end of its own step under loss_lag auto where a rank has
# fewer than LAG_MIN_CPUS CPUs; every other path, those paths from LAG_MIN_CPUS up, and synthetic
# data (no input path) read it one step behind (docs/decisions.md#loss_lag).
LOSS_AT_STEP_END = ("dali",)
LAG_MIN_CPUS = 14
DALI_PREFETCH, GPU_PREFETCH = 4, 2  # batches queued ahead of the step (docs/decisions.md#prefetch)
# DALI's pinned and device pools allocated before training, MiB at POOL_REFERENCE = batch 256 at
# 224 px, scaled with batch x pixels (docs/decisions.md#dali_pools).
DALI_POOLS_MB = (1024, 2048)
POOL_REFERENCE = 256 * 224 * 224
# torch.compile's Triton backend refuses GPUs below compute capability 7.0 (P100: inductor's
# GPUTooOldForTriton at the first compiled step), so compile auto is eager there.
TRITON_MIN_CAPABILITY = (7, 0)


def add_args(ap):
    """The trainer's flags of config training.pytorch, each made from its schema entry, and --input
    (config training.inputs, one run per path)."""
    g = ap.add_argument_group("PyTorch (config training.pytorch)")
    g.add_argument(
        "--input",
        choices=INPUTS,
        default="auto",
        help="where images are decoded and augmented: cpu (Pillow in DataLoader workers), gpu "
        "(gpu_input: nvJPEG in a thread of this process), dali (NVIDIA DALI's pipeline); "
        "auto: dali on a GPU, cpu on a CPU",
    )
    schema.add_arguments(g, "training.pytorch")
    return ap


@dataclass(frozen=True)
class Settings:
    """The options as resolved for this device (what 'auto' became): resolve() makes them, every
    field from the flags, whose defaults are the schema's; none has a default of its own."""

    device: torch.device
    amp_dtype: torch.dtype  # None: fp32
    channels_last: bool
    compile: str  # torch.compile mode; "": eager
    input: str  # cpu | gpu | dali | synthetic (no input path ran)
    tf32: bool
    bucket_cap_mb: float
    ddp: bool  # the model is wrapped in DDP (resolve's distributed)
    ddp_graph: str  # as resolved (auto: by node count); applied only with DDP
    grad_compression: str
    broadcast_buffers: bool
    loss_lag: int  # steps queued past the one whose loss is read
    prefetch: int  # input gpu, dali: batches prepared ahead (0: synthetic data, none)
    dali_pools_mb: tuple  # input dali on a GPU: (pinned, device) MiB allocated before training
    dali_run_batches: int  # input dali: the step's batches one run of DALI's pipeline prepares
    # the input paths' own options, as given (each one path's; recorded with the run's args)
    dali_decoder: str
    dali_hw_share: object  # "auto" or a share 0..1
    dali_gpu_threads: int  # 0: the rule (dali_gpu_threads())
    dali_dual_parts: int
    hw_decoder_load: float
    jpeg_decoder: str
    input_lanes: int
    dali_size_hint: object  # 0, an integer, or "largest"

    def execution_mode(self):
        """How the step runs, for a table to tell when it changed between GPU counts: the compiled
        step and, with DDP, ", DDP graph <how>" (a run of one process has no DDP graph; its DDP runs
        at more GPUs add that part: guards.mode_changed)."""
        graphs = " with CUDA graphs" if self.compile == "reduce-overhead" and self.device.type == "cuda" else ""
        return f"torch.compile {self.compile or 'off'}{graphs}" + (f", DDP graph {self.ddp_graph}" if self.ddp else "")

    def describe(self):
        return {
            "amp_dtype": str(self.amp_dtype).replace("torch.", "") if self.amp_dtype else "float32",
            "channels_last": self.channels_last,
            "compile": self.compile or "off",
            "input": self.input,
            "tf32": self.tf32,
            "bucket_cap_mb": self.bucket_cap_mb,
            "ddp_graph": self.ddp_graph,
            "grad_compression": self.grad_compression,
            "broadcast_buffers": self.broadcast_buffers,
            "loss_lag": self.loss_lag,
            "prefetch": self.prefetch,
            "dali_pools_mb": list(self.dali_pools_mb),
            "dali_run_batches": self.dali_run_batches,
        }


def resolve(args, device, nodes=1, distributed=True, cpus=None):
    """distributed: the model is wrapped in DDP (several ranks, or --ddp-one-rank); without DDP there
    is no DDP graph for ddp_graph to split. cpus: the CPUs the rank has (cluster/cpus.py), which
    loss_lag auto reads."""
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
    source = args.input if args.input != "auto" else ("dali" if cuda else "cpu")
    synthetic = args.data_source == "synthetic"
    graph = ddp_graph(args.ddp_graph, nodes)
    if args.prefetch < 0:
        raise StageError(
            f"--prefetch {args.prefetch}: batches ahead, 1 or more (0: {DALI_PREFETCH} with dali, "
            f"{GPU_PREFETCH} with gpu)"
        )
    scale = args.batch_per_gpu * args.image_size**2 / POOL_REFERENCE
    pools = tuple(
        round(mb * scale) if given == "auto" else given
        for mb, given in zip(DALI_POOLS_MB, (args.dali_pinned_mb, args.dali_device_mb))
    )
    return Settings(
        device=device,
        amp_dtype=amp,
        channels_last=on(args.channels_last),
        compile=compile_mode(
            args.compile,
            cuda,
            "synthetic" if synthetic else source,
            graph if distributed else "whole",
            # (settings are also resolved for a GPU on a machine without one: the tests, a dry look)
            torch.cuda.get_device_capability(device) if cuda and torch.cuda.is_available() else None,
        ),
        # Synthetic data takes no input path: none of the input's settings applied.
        input="synthetic" if synthetic else source,
        tf32=cuda and args.fp32_math == "tf32",
        bucket_cap_mb=args.bucket_cap_mb,
        ddp=distributed,
        ddp_graph=graph,
        grad_compression=args.grad_compression,
        broadcast_buffers=args.broadcast_buffers == "on",
        loss_lag=auto_loss_lag(cuda, synthetic, source, cpus) if args.loss_lag == "auto" else int(args.loss_lag),
        # Only the gpu and dali paths queue batches of their own (the cpu path's DataLoader has its
        # own prefetch_factor): the others record none.
        prefetch=0
        if synthetic or source == "cpu"
        else args.prefetch or (DALI_PREFETCH if source == "dali" else GPU_PREFETCH),
        dali_pools_mb=pools if cuda and source == "dali" and not synthetic else (0, 0),
        dali_run_batches=run_batches(args.dali_run_batches, cuda, args.batch_per_gpu)
        if source == "dali" and not synthetic
        else 1,
        dali_decoder=args.dali_decoder,
        dali_hw_share=args.dali_hw_share,
        dali_gpu_threads=args.dali_gpu_threads,
        dali_dual_parts=args.dali_dual_parts,
        hw_decoder_load=args.hw_decoder_load,
        jpeg_decoder=args.jpeg_decoder,
        input_lanes=args.input_lanes,
        dali_size_hint=args.dali_size_hint,
    )


def auto_loss_lag(cuda, synthetic, source, cpus):
    """loss_lag auto: 1 on a GPU, 0 on a CPU; 0 also for an input path of LOSS_AT_STEP_END on a
    rank of fewer than LAG_MIN_CPUS CPUs (cpus None: not known, taken as fewer), where its threads
    fell behind a step the host no longer waited for. Synthetic data takes no input path, so no
    path's rule either."""
    if not cuda:
        return 0
    return int(synthetic or source not in LOSS_AT_STEP_END or (cpus or 0) >= LAG_MIN_CPUS)


def compile_mode(choice, cuda, source, graph, capability=None):
    """torch.compile's mode ("" = eager). auto: eager on a CPU and on a GPU Triton cannot compile for
    (capability below TRITON_MIN_CAPABILITY: P100); on a GPU CUDA graphs
    (reduce-overhead), which launch each compiled graph at once where mode default launches the step
    kernel by kernel from Python and the GPU idles whenever that thread falls behind, for synthetic
    data and input dali where the step is one graph (one process, or DDP's graph whole: within one
    node under ddp_graph auto); mode default for the gpu path (its decoding waited behind the
    graphs), the cpu path (bound by its input) and where DDP's graph is split at its buckets
    (across nodes under auto). The measurements: docs/decisions.md#compile."""
    if choice == "off" or (choice == "auto" and (not cuda or (capability and capability < TRITON_MIN_CAPABILITY))):
        return ""
    if choice != "auto":
        return choice
    return "reduce-overhead" if source in ("synthetic", "dali") and graph == "whole" else "default"


def ddp_graph(choice, nodes):
    """auto: one whole graph within a node, where the all-reduce after the backward pass is short;
    split across nodes, where only the overlap with the backward pass can hide a network all-reduce
    (docs/decisions.md#ddp_graph)."""
    if choice != "auto":
        return choice
    return "whole" if nodes == 1 else "split"


def configure_backends(s):
    if s.device.type != "cuda":
        return
    torch.backends.cudnn.benchmark = True  # fixed shapes: pick each convolution's fastest algorithm once
    torch.backends.cuda.matmul.allow_tf32 = s.tf32
    torch.backends.cudnn.allow_tf32 = s.tf32


def run_batches(given, cuda, batch):
    """DALI's run in step batches: `given`, or for auto at least DALI_RUN_IMAGES images on a GPU."""
    if given != "auto":
        return int(given)
    return -(-DALI_RUN_IMAGES // batch) if cuda else 1


def dali_decoder(given, per_rank):
    """Where DALI decodes for a rank of `per_rank` CPUs: `given`, or for auto libjpeg-turbo alone
    where the rank has DALI_CPU_DECODER_MIN_CPUS, else split (dali_input takes the CPU without a
    GPU)."""
    if given != "auto":
        return given
    return "cpu" if per_rank >= DALI_CPU_DECODER_MIN_CPUS else "split"


def dali_hw_share(given):
    """Decoder split's share of the JPEGs for the GPU's decoder: `given`, or DALI_HW_SHARE for auto."""
    return DALI_HW_SHARE if given == "auto" else float(given)


def dali_gpu_threads(given, threads):
    """Of dali_decoder dual's `threads`, those of its GPU-decoding pipeline: `given`, or for 0 one in
    DALI_THREADS_PER_GPU_THREAD, at least 1 (dali_input gives the CPU's pipeline at least 1 more)."""
    return given or max(1, round(threads / DALI_THREADS_PER_GPU_THREAD))


def loader_workers(args, s, per_rank):
    """per_rank: CPUs of the rank's share (cluster.cpus)."""
    if args.loader_workers or args.decode_threads:
        return args.loader_workers or args.decode_threads
    if s.input == "dali":
        spare = 0 if per_rank >= DALI_CPU_DECODER_MIN_CPUS else DALI_TRAINER_CORES
        return max(1, min(per_rank - spare, DALI_MAX_THREADS))
    rule = max(1, per_rank - 1)
    return min(rule, GPU_DECODE_WORKERS) if s.input == "gpu" else rule
