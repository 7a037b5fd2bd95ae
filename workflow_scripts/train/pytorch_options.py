"""training.pytorch's options: the trainer's flags for them and what each 'auto' becomes on
the device a rank runs on (Settings)."""
import argparse
from dataclasses import dataclass

import torch

from ..common.errors import StageError
from . import gpu_input
from .augment import DALI_DECODERS

AUTO = ("auto", "on", "off")
INPUTS = ("auto", "cpu", "gpu", "dali")
COMPILE_MODES = ("auto", "off", "default", "reduce-overhead", "max-autotune-no-cudagraphs")
GPU_DECODE_WORKERS = 4  # they only read bytes: a few keep up with any GPU (docs/benchmarks.md)
# DALI decoding on the CPU leaves these cores of a rank's share to the training thread and CUDA's own
# threads: 12 of 16 threads on an H100 gave 97-99% of synthetic, 15 94.8-98.6% (runs 20-23)
DALI_SPARE_CORES = 4
# Batches queued ahead of the step. DALI pauses now and then (a pool growing, a slow thread) for
# longer than two 47 ms steps: four kept CUDA graphs fed (docs/benchmarks.md, runs 38-39).
DALI_PREFETCH, GPU_PREFETCH = 4, 2
# DALI's pinned and device pools allocated before training, MiB at batch 256 and 224 px: room for
# the queue above without growing (runs 35, 38-39).
DALI_POOLS_MB = (1024, 2048)
POOL_REFERENCE = 256 * 224 * 224


def pool_mb(text):
    if text == "auto":
        return text
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text}: a size in MiB, 0 or more, or auto")
    return value


def fraction(text):
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction between 0 and 1")
    return value


def add_args(ap):
    g = ap.add_argument_group("PyTorch (config training.pytorch)")
    g.add_argument("--amp-dtype", choices=("auto", "bfloat16", "float16"), default="auto",
                   help="fp16's 16-bit type; auto: bfloat16 on a CPU or a GPU of compute capability >= 8.0, "
                        "else float16 with loss scaling")
    g.add_argument("--channels-last", choices=AUTO, default="auto", help="auto: on a GPU")
    g.add_argument("--compile", choices=COMPILE_MODES, default="auto",
                   help="torch.compile mode of the model; auto: off on a CPU; on a GPU reduce-overhead (CUDA "
                        "graphs) for synthetic data and input dali within one node, else default")
    g.add_argument("--input", choices=INPUTS, default="auto",
                   help="where images are decoded and augmented: cpu (Pillow in DataLoader workers), gpu "
                        "(gpu_input: nvJPEG in a thread of this process), dali (NVIDIA DALI's pipeline); "
                        "auto: dali on a GPU, cpu on a CPU")
    g.add_argument("--loader-workers", type=int, default=0,
                   help=f"DataLoader workers per rank (input dali: DALI's CPU threads); 0: --decode-threads, "
                        f"else cores per rank - 1 (at most {GPU_DECODE_WORKERS} with input gpu; input dali: "
                        f"cores per rank - {DALI_SPARE_CORES})")
    g.add_argument("--tf32", choices=("on", "off"), default="on", help="fp32 on a GPU: TF32 tensor cores")
    g.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP gradient bucket size")
    g.add_argument("--prefetch", type=int, default=0,
                   help=f"input gpu or dali: batches prepared ahead of the step; 0: {DALI_PREFETCH} with dali, "
                        f"{GPU_PREFETCH} with gpu")
    # Most JPEGs to the hardware engine leaves the SMs to the step, beside which the gpu path's
    # decoding slowed it (docs/benchmarks.md); DALI's own default is 0.65. Not yet measured here.
    g.add_argument("--hw-decoder-load", type=fraction, default=0.9,
                   help="input dali on a GPU: share of the JPEGs given to the hardware JPEG engine "
                        "(A100, H100; the rest nvJPEG on the SMs)")
    g.add_argument("--dali-decoder", choices=DALI_DECODERS, default="cpu",
                   help="input dali on a GPU: where JPEGs are decoded: cpu (libjpeg-turbo in DALI's threads, the "
                        "crops then copied to the GPU) or mixed (hardware JPEG engine + nvJPEG on the GPU); "
                        "without a GPU always cpu")
    # DALI grows its pools as batches need it, and each growth waits for the device: a pause of
    # DALI's that outlasts the batches queued holds the step up (docs/benchmarks.md, runs 30-35).
    g.add_argument("--dali-pinned-mb", type=pool_mb, default="auto",
                   help=f"input dali on a GPU: MiB of DALI's pinned host memory pool allocated before training "
                        f"(0: grown as needed; auto: {DALI_POOLS_MB[0]} at batch 256 and 224 px, in proportion "
                        f"to batch x pixels)")
    g.add_argument("--dali-device-mb", type=pool_mb, default="auto",
                   help=f"input dali on a GPU: MiB of DALI's device memory pool allocated before training "
                        f"(0: grown as needed; auto: {DALI_POOLS_MB[1]} at batch 256 and 224 px, likewise)")
    g.add_argument("--input-lanes", type=int, default=1,
                   help="input gpu: batches decoded and augmented at once, each by its own thread and stream")
    g.add_argument("--jpeg-decoder", choices=gpu_input.DECODERS, default="torchvision",
                   help="input gpu: torchvision's decode_jpeg or nvImageCodec's decoder")
    g.add_argument("--ddp-graph", choices=("auto", "split", "whole"), default="auto",
                   help="compiled DDP: split (graph cut at bucket boundaries, all-reduce overlaps backward) or "
                        "whole (one graph, all-reduce after backward; CUDA graphs then cover the whole step); "
                        "auto: whole within one node, split across nodes")
    g.add_argument("--broadcast-buffers", choices=("on", "off"), default="off",
                   help="DDP: rank 0's BatchNorm statistics sent to every rank before each forward pass "
                        "(off: each rank keeps its own, as the weights saved are rank 0's)")
    g.add_argument("--grad-compression", choices=("none", "bf16"), default="none",
                   help="DDP: all-reduce gradients as bfloat16 (half the bytes)")
    return ap


@dataclass(frozen=True)
class Settings:
    """The options as resolved for this device (what 'auto' became)."""
    device: torch.device
    amp_dtype: torch.dtype = None  # None: fp32
    channels_last: bool = False
    compile: str = ""  # torch.compile mode; "": eager
    input: str = "cpu"  # cpu | gpu | dali | synthetic (no input path ran)
    tf32: bool = False
    bucket_cap_mb: float = 25.0
    ddp_graph: str = "whole"  # as resolved (auto: by node count)
    grad_compression: str = "none"
    broadcast_buffers: bool = False
    loss_lag: int = 0  # steps queued past the one whose loss is read
    prefetch: int = GPU_PREFETCH  # input gpu, dali: batches prepared ahead (0: synthetic data, none)
    dali_pools_mb: tuple = (0, 0)  # input dali on a GPU: (pinned, device) MiB allocated before training

    def describe(self):
        return {"amp_dtype": str(self.amp_dtype).replace("torch.", "") if self.amp_dtype else "float32",
                "channels_last": self.channels_last, "compile": self.compile or "off",
                "input": self.input, "tf32": self.tf32, "bucket_cap_mb": self.bucket_cap_mb,
                "ddp_graph": self.ddp_graph, "grad_compression": self.grad_compression,
                "broadcast_buffers": self.broadcast_buffers, "loss_lag": self.loss_lag,
                "prefetch": self.prefetch, "dali_pools_mb": list(self.dali_pools_mb)}


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
    source = args.input if args.input != "auto" else ("dali" if cuda else "cpu")
    synthetic = args.data_source == "synthetic"
    graph = ddp_graph(args.ddp_graph, nodes)
    if args.prefetch < 0:
        raise StageError(f"--prefetch {args.prefetch}: batches ahead, 1 or more (0: {DALI_PREFETCH} with dali, "
                         f"{GPU_PREFETCH} with gpu)")
    scale = args.batch_per_gpu * args.image_size ** 2 / POOL_REFERENCE
    pools = tuple(round(mb * scale) if given == "auto" else given
                  for mb, given in zip(DALI_POOLS_MB, (args.dali_pinned_mb, args.dali_device_mb)))
    return Settings(device=device, amp_dtype=amp, channels_last=on(args.channels_last),
                    compile=compile_mode(args.compile, cuda, "synthetic" if synthetic else source, graph),
                    # Synthetic data takes no input path: none of the input's settings applied.
                    input="synthetic" if synthetic else source, tf32=cuda and args.tf32 == "on",
                    bucket_cap_mb=args.bucket_cap_mb, ddp_graph=graph,
                    grad_compression=args.grad_compression, broadcast_buffers=args.broadcast_buffers == "on",
                    loss_lag=int(cuda and source != "dali") if args.loss_lag == "auto" else int(args.loss_lag),
                    prefetch=0 if synthetic else args.prefetch or (
                        DALI_PREFETCH if source == "dali" else GPU_PREFETCH),
                    dali_pools_mb=pools if cuda and source == "dali" and not synthetic else (0, 0))


def compile_mode(choice, cuda, source, graph):
    """torch.compile's mode ("" = eager). auto: eager on a CPU. On a GPU in mode default the
    training thread launches the step kernel by kernel from Python, and the GPU idles whenever that
    thread falls behind it (run 16: 1.4 ms a step with synthetic data, 5-7 ms beside DALI's decoding
    threads, where launching the forward pass took 18-22 ms instead of 14). CUDA graphs
    (reduce-overhead) launch each compiled graph at once: on one H100, DALI with them gave
    98.7-99.5% of synthetic data's rate (with them too) at a step CV of 0.5-0.8% in 9 of 9 runs,
    against 96.8-98.8% and CV 1.5-3.3% in mode default on the same machine (docs/benchmarks.md,
    runs 38-39). Not for
    the gpu input path, whose decoding then waited behind the graphs (runs 2-6), nor the cpu path
    (input-bound either way), nor across nodes, where DDP's graph is split at its buckets
    (ddp_graph split) and CUDA graphs of the pieces were not measured."""
    if choice == "off" or (choice == "auto" and not cuda):
        return ""
    if choice != "auto":
        return choice
    return "reduce-overhead" if source in ("synthetic", "dali") and graph == "whole" else "default"


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


def loader_workers(args, s, per_rank):
    """per_rank: CPUs of the rank's share (common.cpus)."""
    if args.loader_workers or args.decode_threads:
        return args.loader_workers or args.decode_threads
    if s.input == "dali":
        return max(1, per_rank - DALI_SPARE_CORES)
    rule = max(1, per_rank - 1)
    return min(rule, GPU_DECODE_WORKERS) if s.input == "gpu" else rule
