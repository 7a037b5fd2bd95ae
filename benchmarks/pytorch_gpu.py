"""PyTorch ResNet-50 training throughput on GPUs, synthetic and real data, with correctness checks.

One call does everything a GPU lease allows, in priority order, within --budget-s (what does not
fit is listed as skipped, never silently dropped):

  data      the embedded generator's ILSVRC-layout JPEGs (about 400-500 x 300-375, the ImageNet
            quirks re-encoded by the data stage), indexed and written to the Caffe2 LMDB by the
            pipeline's own modules; rendered in parallel, byte-identical to embedded.make
  ceilings  the device's measured rates: a device-to-device copy, bf16 and TF32 matrix products
  loaders   input pipeline alone: nvJPEG batch decode, decode + augment, the GPU loader, the CPU
            (Pillow) loader, in images/s
  check     the project's training step (pytorch_ddp.Trainer) on the same real batch: the CPU
            path (fp32, Pillow preprocessing) against the GPU paths (GPU preprocessing; fp32,
            TF32, bf16), per-step loss within a tolerance fixed beforehand
  variants  pytorch_ddp itself, one process per GPU (workflow_scripts.train.launch for several),
            each run's images/s read from its summary.json: images timed / seconds timed over
            the timed steps after the warm-up steps (which hold compilation and cuDNN tuning)

    python3 benchmarks/pytorch_gpu.py --plan h100 --out OUT --budget-s 560
    python3 benchmarks/pytorch_gpu.py --plan scaling --gpus 2 --out OUT --budget-s 480
    python3 benchmarks/pytorch_gpu.py --plan inputs --out OUT --budget-s 500
    python3 benchmarks/pytorch_gpu.py --plan clocks --out OUT --budget-s 500
    python3 benchmarks/pytorch_gpu.py --plan ahead --out OUT --budget-s 500
    (plans decode, decode2: real data on one GPU; inputs: synthetic and the cpu, gpu and dali input
    paths with the trainer's defaults; ddp, ddp2, ddp3: DDP on 2 GPUs; isolate, graphs, device,
    thermal, attrib, stalls: where the uneven steps' time goes, runs 29-35; pace, graphs2: the
    host's pacing and DALI beside CUDA graphs, runs 36-39; defaults40: the defaults since, run 40;
    defaults42: them again alternated, and the long test with DALI and CUDA graphs, runs 42-45;
    docs/benchmarks.md)

Writes OUT/results.json (everything, per-step wall, input-wait, thread and GPU times included),
OUT/results.md (tables) and, per variant, OUT/run_<variant>/ (its summary, steps and telemetry).
"""
import argparse
import csv
import json
import multiprocessing
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SEED = 2018
WARMUP, STEPS = 10, 100  # the study's short test
PY = sys.executable
from workflow_scripts.common.multicast import MULTICAST_OFF as SAFE_ENV  # noqa: E402



# ---------------------------------------------------------------- variants


LMDB_OF = {"real": "lmdb", "real256": "lmdb256"}


def variant(name, data, precision, opts, gpus=1, target="", est=60, concurrent=1, steps=None, env=None):
    """concurrent=k: k independent one-GPU runs at once, one per GPU (no DDP): what the GPUs do
    side by side on the host without exchanging anything. steps: timed steps, if not --steps.
    env: variables set for the trainer (a library's own settings)."""
    return {"name": name, "data": data, "precision": precision, "opts": opts, "gpus": gpus,
            "target": target, "est_s": est, "concurrent": concurrent, "steps": steps, "env": env or {}}


COMPILED = ["--channels-last", "on", "--compile", "default"]
EAGER_CL = ["--channels-last", "on", "--compile", "off"]
GPU_DECODE = ["--input", "gpu"]
CPU_DECODE = ["--input", "cpu"]
DALI = ["--input", "dali"]
DALI_POOLS = DALI + ["--dali-pinned-mb", "1024", "--dali-device-mb", "2048"]  # pools allocated before training


def plan_h100():
    cudagraphs = ["--channels-last", "on", "--compile", "reduce-overhead"]
    lanes2 = ["--input-lanes", "2"]
    return [
        ("variant", variant("real256_bf16_gpudecode_compile", "real256", "fp16", COMPILED + GPU_DECODE,
                            target="real data", est=90)),
        ("variant", variant("real256_bf16_gpudecode_cudagraphs", "real256", "fp16", cudagraphs + GPU_DECODE,
                            target="real data", est=70)),
        ("variant", variant("real_bf16_gpudecode_compile_lanes2", "real", "fp16", COMPILED + GPU_DECODE + lanes2,
                            target="real data", est=90)),
        ("variant", variant("real_bf16_gpudecode_cudagraphs_lanes2", "real", "fp16", cudagraphs + GPU_DECODE + lanes2,
                            target="real data", est=70)),
        ("variant", variant("syn_bf16_cl_compile", "synthetic", "fp16", COMPILED, target="synthetic bf16", est=110)),
        ("variant", variant("real_bf16_gpudecode_compile", "real", "fp16", COMPILED + GPU_DECODE,
                            target="real data", est=90)),
        ("variant", variant("syn_bf16_cl_cudagraphs", "synthetic", "fp16", cudagraphs, target="synthetic bf16",
                            est=100)),
        ("check", None),
        ("variant", variant("real_bf16_gpudecode_cudagraphs", "real", "fp16", cudagraphs + GPU_DECODE,
                            target="real data", est=60)),
        ("variant", variant("syn_fp32_nchw_eager", "synthetic", "fp32", ["--channels-last", "off", "--compile", "off"],
                            est=35)),
        ("variant", variant("syn_bf16_cl_eager", "synthetic", "fp16", EAGER_CL, est=30)),
        ("variant", variant("syn_bf16_cl_compile_notelemetry", "synthetic", "fp16",
                            COMPILED + ["--telemetry-interval", "0"], est=35)),
        ("variant", variant("real_bf16_gpudecode_eager", "real", "fp16", EAGER_CL + GPU_DECODE, est=35)),
        ("variant", variant("syn_fp16_cl_compile", "synthetic", "fp16", COMPILED + ["--amp-dtype", "float16"], est=100)),
        ("variant", variant("syn_fp32_cl_cudagraphs", "synthetic", "fp32", cudagraphs, target="fp32 (tf32)", est=100)),
        ("variant", variant("real_bf16_cpudecode_compile", "real", "fp16", COMPILED + CPU_DECODE, est=50)),
        ("variant", variant("syn_fp32_cl_compile", "synthetic", "fp32", COMPILED, target="fp32 (tf32)", est=90)),
    ]


def plan_decode():
    """Issue 7's real-data target, run 6: nvImageCodec's decoder (hardware engine, the lane's own
    stream), and a shorter interpreter switch interval, against torchvision's decode_jpeg."""
    cudagraphs = ["--channels-last", "on", "--compile", "reduce-overhead"]
    nvimg = ["--jpeg-decoder", "nvimgcodec"]
    return [
        ("variant", variant("real256_bf16_nvimgcodec_compile", "real256", "fp16", COMPILED + GPU_DECODE + nvimg,
                            target="real data", est=100)),
        ("variant", variant("syn_bf16_cl_compile", "synthetic", "fp16", COMPILED, target="synthetic bf16", est=60)),
        ("variant", variant("real256_bf16_gpudecode_compile", "real256", "fp16", COMPILED + GPU_DECODE,
                            target="real data", est=50)),
        ("variant", variant("syn_bf16_cl_cudagraphs", "synthetic", "fp16", cudagraphs, target="synthetic bf16",
                            est=90)),
        ("variant", variant("real_bf16_nvimgcodec_compile", "real", "fp16", COMPILED + GPU_DECODE + nvimg,
                            target="real data", est=50)),
        ("variant", variant("real256_bf16_nvimgcodec_compile_lanes2", "real256", "fp16",
                            COMPILED + GPU_DECODE + nvimg + ["--input-lanes", "2"], target="real data", est=50)),
    ]


def plan_decode2():
    """Run 9: nvImageCodec with fewer CPU threads (by default one per core, beside 4 loader
    workers and the training thread on 16 cores), and repeats of run 6's two best real-data rows."""
    nvimg = GPU_DECODE + ["--jpeg-decoder", "nvimgcodec"]
    return [
        ("variant", variant("syn_bf16_cl_compile", "synthetic", "fp16", COMPILED, target="synthetic bf16", est=90)),
        ("variant", variant("real256_bf16_gpudecode_compile", "real256", "fp16", COMPILED + GPU_DECODE,
                            target="real data", est=40)),
        ("variant", variant("real256_bf16_nvimgcodec_compile", "real256", "fp16", COMPILED + nvimg,
                            target="real data", est=40)),
    ]


def plan_inputs(est=(90, 80, 50, 60, 45, 45)):
    """Issue 14: the three input paths on one GPU with the trainer's defaults (no options: bf16 for
    fp16, channels_last, compile default), each against synthetic data in the same call; the
    same LMDB for every real-data row. Synthetic and DALI are repeated last, if time is left.
    est: each variant's expected seconds, in that order."""
    rows = [("syn_bf16", "synthetic", [], "synthetic bf16"), ("real_bf16_dali", "real", DALI, "real data"),
            ("real_bf16_gpu", "real", GPU_DECODE, "real data"), ("real_bf16_cpu", "real", CPU_DECODE, "real data"),
            ("syn_bf16_repeat", "synthetic", [], "synthetic bf16"), ("real_bf16_dali_repeat", "real", DALI, "real data")]
    return [("variant", variant(name, data, "fp16", opts, target=target, est=e))
            for (name, data, opts, target), e in zip(rows, est)]


def plan_dali2():
    """Issue 14, run 12: what the DALI path's 9% (and its step CV) are made of, one lever at a time
    against run 11's settings (hardware decoder share 0.9, 15 CPU threads, 2 batches ahead):
    all JPEGs on the hardware engines, fewer CPU threads beside the training thread, a deeper
    queue, and CUDA graphs (each with its own synthetic reference)."""
    cudagraphs = ["--compile", "reduce-overhead"]
    return [
        ("variant", variant("syn_bf16", "synthetic", "fp16", [], target="synthetic bf16", est=90)),
        ("variant", variant("real_bf16_dali", "real", "fp16", DALI, target="real data", est=40)),
        ("variant", variant("real_bf16_dali_hw1", "real", "fp16", DALI + ["--hw-decoder-load", "1.0"], est=35)),
        ("variant", variant("real_bf16_dali_t4", "real", "fp16", DALI + ["--loader-workers", "4"], est=35)),
        ("variant", variant("real_bf16_dali_hw1_t4", "real", "fp16",
                            DALI + ["--hw-decoder-load", "1.0", "--loader-workers", "4"], est=35)),
        ("variant", variant("real_bf16_dali_q4", "real", "fp16", DALI + ["--prefetch", "4"], est=35)),
        ("variant", variant("real_bf16_dali_hw075", "real", "fp16", DALI + ["--hw-decoder-load", "0.75"], est=35)),
        ("variant", variant("syn_bf16_cudagraphs", "synthetic", "fp16", cudagraphs, est=80)),
        ("variant", variant("real_bf16_dali_cudagraphs", "real", "fp16", DALI + cudagraphs, est=40)),
        ("variant", variant("syn_bf16_repeat", "synthetic", "fp16", [], target="synthetic bf16", est=35)),
    ]


def plan_ddp3(n):
    """Run 10: the 2-GPU defaults after run 8 (one graph, no buffer broadcast) on real data too."""
    best = COMPILED + ["--ddp-graph", "whole", "--broadcast-buffers", "off"]
    return [
        ("variant", variant("syn_bf16_compile_1gpu", "synthetic", "fp16", COMPILED, est=70)),
        ("variant", variant(f"syn_bf16_compile_{n}gpu__whole_nobcast", "synthetic", "fp16", best, gpus=n,
                            target=f"{n}-GPU scaling", est=60)),
        ("variant", variant("real256_bf16_gpudecode_compile_1gpu", "real256", "fp16", COMPILED + GPU_DECODE, est=50)),
        ("variant", variant(f"real256_bf16_gpudecode_compile_{n}gpu__whole_nobcast", "real256", "fp16",
                            best + GPU_DECODE, gpus=n, target=f"{n}-GPU scaling, real data", est=60)),
    ]


def plan_ddp(n):
    """Issue 7's scaling target, run 7: compiled DDP split at buckets (the default then) against one
    graph with the all-reduce after backward (CUDA-graphable), and bfloat16 gradients."""
    cudagraphs = ["--channels-last", "on", "--compile", "reduce-overhead"]
    whole = ["--ddp-graph", "whole", "--broadcast-buffers", "on"]
    bf16 = ["--grad-compression", "bf16"]
    split = ["--ddp-graph", "split", "--broadcast-buffers", "on"]  # DDP's own defaults
    return [
        ("variant", variant("syn_bf16_compile_1gpu", "synthetic", "fp16", COMPILED, est=100)),
        ("variant", variant(f"syn_bf16_compile_{n}gpu__whole", "synthetic", "fp16", COMPILED + whole, gpus=n,
                            target=f"{n}-GPU scaling", est=60)),
        ("variant", variant(f"syn_bf16_compile_{n}gpu", "synthetic", "fp16", COMPILED + split, gpus=n,
                            target=f"{n}-GPU scaling", est=90)),
        ("variant", variant("syn_bf16_cudagraphs_1gpu", "synthetic", "fp16", cudagraphs, est=70)),
        ("variant", variant(f"syn_bf16_cudagraphs_{n}gpu__whole", "synthetic", "fp16", cudagraphs + whole, gpus=n,
                            target=f"{n}-GPU scaling", est=70)),
        ("variant", variant(f"syn_bf16_compile_{n}gpu__bf16grad", "synthetic", "fp16", COMPILED + split + bf16, gpus=n,
                            target=f"{n}-GPU scaling", est=70)),
        ("variant", variant(f"syn_bf16_cudagraphs_{n}gpu__whole_bf16grad", "synthetic", "fp16",
                            cudagraphs + whole + bf16, gpus=n, target=f"{n}-GPU scaling", est=60)),
        ("variant", variant("syn_bf16_eager_1gpu", "synthetic", "fp16", EAGER_CL, est=30)),
        ("variant", variant(f"syn_bf16_eager_{n}gpu", "synthetic", "fp16", EAGER_CL + split, gpus=n, est=30)),
        ("variant", variant(f"syn_bf16_compile_{n}gpu__bucket100", "synthetic", "fp16",
                            COMPILED + split + ["--bucket-cap-mb", "100"], gpus=n, est=60)),
    ]


def plan_ddp2(n):
    """Run 8: where the 2-GPU step's extra ~4 ms goes (run 7: in every mode, bf16 gradients or
    not): the all-reduce alone, n independent one-GPU runs side by side, DDP without the buffer
    broadcast before each forward."""
    cudagraphs = ["--channels-last", "on", "--compile", "reduce-overhead"]
    whole, nob = ["--ddp-graph", "whole"], ["--broadcast-buffers", "off"]
    return [
        ("allreduce", None),
        ("variant", variant("syn_bf16_compile_1gpu", "synthetic", "fp16", COMPILED, est=70)),
        ("variant", variant(f"syn_bf16_compile_1gpu_x{n}", "synthetic", "fp16", COMPILED, concurrent=n, est=70,
                            steps=400)),
        ("variant", variant(f"syn_bf16_compile_{n}gpu__whole_nobcast", "synthetic", "fp16", COMPILED + whole + nob,
                            gpus=n, target=f"{n}-GPU scaling", est=60)),
        ("variant", variant(f"syn_bf16_compile_{n}gpu__nobcast", "synthetic", "fp16",
                            COMPILED + ["--ddp-graph", "split"] + nob,
                            gpus=n, target=f"{n}-GPU scaling", est=60)),
        ("variant", variant("syn_bf16_cudagraphs_1gpu", "synthetic", "fp16", cudagraphs, est=60)),
        ("variant", variant(f"syn_bf16_cudagraphs_{n}gpu__whole_nobcast", "synthetic", "fp16",
                            cudagraphs + whole + nob, gpus=n, target=f"{n}-GPU scaling", est=60)),
        ("variant", variant(f"syn_bf16_cudagraphs_1gpu_x{n}", "synthetic", "fp16", cudagraphs, concurrent=n, est=60,
                            steps=400)),
    ]


def plan_scaling(n):
    """On a host of n GPUs (H200s here): one GPU and n GPUs, same settings, same machine (run 3,
    with DDP's own defaults: graph split at buckets, buffers broadcast)."""
    split = ["--ddp-graph", "split", "--broadcast-buffers", "on"]
    cudagraphs = ["--channels-last", "on", "--compile", "reduce-overhead"] + split
    return [
        ("variant", variant("syn_bf16_compile_1gpu", "synthetic", "fp16", COMPILED, est=100)),
        ("variant", variant(f"syn_bf16_compile_{n}gpu", "synthetic", "fp16", COMPILED + split, gpus=n,
                            target=f"{n}-GPU scaling", est=90)),
        ("variant", variant("real_bf16_gpudecode_compile_1gpu", "real", "fp16", COMPILED + GPU_DECODE, est=70)),
        ("variant", variant(f"real_bf16_gpudecode_compile_{n}gpu", "real", "fp16", COMPILED + split + GPU_DECODE, gpus=n,
                            target=f"{n}-GPU scaling, real data", est=70)),
        ("variant", variant("syn_bf16_cudagraphs_1gpu", "synthetic", "fp16", cudagraphs, est=70)),
        ("variant", variant(f"syn_bf16_cudagraphs_{n}gpu", "synthetic", "fp16", cudagraphs, gpus=n,
                            target=f"{n}-GPU scaling", est=80)),
        ("variant", variant("real_bf16_gpudecode_cudagraphs_1gpu", "real", "fp16", cudagraphs + GPU_DECODE, est=45)),
        ("variant", variant(f"syn_bf16_compile_{n}gpu_bucket100", "synthetic", "fp16",
                            COMPILED + split + ["--bucket-cap-mb", "100"], gpus=n, est=70)),
    ]


def plan_clocks():
    """Issue 14, run 13: is DALI's remaining gap the GPU's clock? Synthetic and DALI alternated,
    400 timed steps each (about 20 s) with GPU telemetry every 0.25 s: power, SM clock and the
    clock's limiters over the timed steps, beside images/s. Then the defaults' 100 steps once more."""
    longer = ["--telemetry-interval", "0.25"]
    return [
        ("variant", variant("syn_bf16_400", "synthetic", "fp16", longer, target="synthetic bf16", est=80, steps=400)),
        ("variant", variant("real_bf16_dali_400", "real", "fp16", DALI + longer, target="real data", est=70, steps=400)),
        ("variant", variant("syn_bf16_400_repeat", "synthetic", "fp16", longer, est=60, steps=400)),
        ("variant", variant("real_bf16_dali_400_repeat", "real", "fp16", DALI + longer, est=60, steps=400)),
        ("variant", variant("real_bf16_gpu_400", "real", "fp16", GPU_DECODE + longer, est=60, steps=400)),
        ("variant", variant("syn_bf16", "synthetic", "fp16", [], target="synthetic bf16", est=45)),
        ("variant", variant("real_bf16_dali", "real", "fp16", DALI, target="real data", est=45)),
    ]


def plan_ahead():
    """Issue 14, run 14: the trainer takes the next batch while the GPU runs the step (--fetch-ahead,
    on by default with CUDA), against the same DALI runs without it; every input path with the
    defaults (100 timed steps), each against the same call's synthetic runs."""
    off = ["--fetch-ahead", "off"]
    return [
        ("variant", variant("syn_bf16", "synthetic", "fp16", [], target="synthetic bf16", est=90)),
        ("variant", variant("real_bf16_dali", "real", "fp16", DALI, target="real data", est=60)),
        ("variant", variant("real_bf16_dali_noahead", "real", "fp16", DALI + off, est=45)),
        ("variant", variant("syn_bf16_repeat", "synthetic", "fp16", [], target="synthetic bf16", est=40)),
        ("variant", variant("real_bf16_dali_repeat", "real", "fp16", DALI, target="real data", est=45)),
        ("variant", variant("real_bf16_gpu", "real", "fp16", GPU_DECODE, target="real data", est=45)),
        ("variant", variant("real_bf16_cpu", "real", "fp16", CPU_DECODE, target="real data", est=60)),
        ("variant", variant("real_bf16_dali_noahead_repeat", "real", "fp16", DALI + off, est=45)),
    ]


def plan_timeline():
    """Issue 14, run 16: where the step's GPU time goes beside DALI. Synthetic and DALI with the
    defaults, each followed by 6 steps under torch.profiler (after the timed steps, so no timed
    step is profiled; benchmarks/trace_streams.py reads the traces), and two DALI levers not yet
    measured: its legacy executor, and 8 CPU threads, each twice."""
    t8 = ["--loader-workers", "8"]
    return [
        ("variant", variant("syn_bf16", "synthetic", "fp16", [], target="synthetic bf16", est=95)),
        ("variant", variant("real_bf16_dali", "real", "fp16", DALI, target="real data", est=80)),
        ("variant", variant("real_bf16_dali_8threads", "real", "fp16", DALI + t8, est=40)),
        ("variant", variant("syn_bf16_repeat", "synthetic", "fp16", [], target="synthetic bf16", est=35)),
        ("variant", variant("real_bf16_dali_repeat", "real", "fp16", DALI, target="real data", est=45)),
        ("variant", variant("real_bf16_dali_8threads_repeat", "real", "fp16", DALI + t8, est=40)),
        ("variant", variant("real_bf16_gpu", "real", "fp16", GPU_DECODE, target="real data", est=45)),
    ]


def plan_lag():
    """Issue 14, run 17: run 16's traces showed the GPU idle 1.7 ms a step with synthetic data and
    5-6 ms beside DALI, at the start of each step, while the CPU, slower beside DALI's threads, read
    the loss and launched the next step. --loss-lag 1 reads each loss one step behind (what auto
    gave every input when run 18 ran; with DALI auto is now 0): 1 against 0, synthetic and DALI
    alternated, then 400 timed steps of each, and the gpu path (auto: 1)."""
    lag0, lag1 = ["--loss-lag", "0"], ["--loss-lag", "1"]
    return [
        ("variant", variant("syn_bf16", "synthetic", "fp16", [], target="synthetic bf16", est=95)),
        ("variant", variant("real_bf16_dali", "real", "fp16", DALI + lag1, target="real data", est=70)),
        ("variant", variant("syn_bf16_lag0", "synthetic", "fp16", lag0, est=35)),
        ("variant", variant("real_bf16_dali_lag0", "real", "fp16", DALI + lag0, est=35)),
        ("variant", variant("syn_bf16_repeat", "synthetic", "fp16", [], target="synthetic bf16", est=35)),
        ("variant", variant("real_bf16_dali_repeat", "real", "fp16", DALI + lag1, target="real data", est=35)),
        ("variant", variant("syn_bf16_400", "synthetic", "fp16", [], est=50, steps=400)),
        ("variant", variant("real_bf16_dali_400", "real", "fp16", DALI + lag1, est=50, steps=400)),
        ("variant", variant("real_bf16_gpu", "real", "fp16", GPU_DECODE, target="real data", est=35)),
        ("variant", variant("real_bf16_cpu", "real", "fp16", CPU_DECODE, target="real data", est=50)),
    ]


def plan_depth():
    """Issue 14, run 19: with losses read one step behind (run 18) the trainer asks DALI for a batch
    two steps before the GPU needs it and waited 16-20 ms a step in next(): DALI's 2 batches in
    flight, each slower beside the step, are the limit. 4 and 3 in flight, losses read one step behind."""
    lag1 = DALI + ["--loss-lag", "1"]
    return [
        ("variant", variant("syn_bf16", "synthetic", "fp16", [], target="synthetic bf16", est=90)),
        ("variant", variant("real_bf16_dali_prefetch4", "real", "fp16", lag1 + ["--prefetch", "4"],
                            target="real data", est=60)),
        ("variant", variant("real_bf16_dali_prefetch4_repeat", "real", "fp16", lag1 + ["--prefetch", "4"], est=30)),
        ("variant", variant("real_bf16_dali_prefetch3", "real", "fp16", lag1 + ["--prefetch", "3"], est=30)),
    ]


def plan_cpudec():
    """Issue 14, run 20: run 18's trace showed the mixed decoder's work as ~500 small GPU operations a
    batch (a copy and a colour conversion per JPEG, on 14 streams), each waiting beside the step's
    kernels, and DALI delivering ~5,000 images/s beside the step whatever its depth. --dali-decoder
    cpu decodes in DALI's CPU threads (libjpeg-turbo, the crop's region only) and leaves the GPU a
    copy, the resize and the normalize per batch: against the defaults, alternated, then 400 steps."""
    cpu = DALI + ["--dali-decoder", "cpu"]
    return [
        ("variant", variant("syn_bf16", "synthetic", "fp16", [], target="synthetic bf16", est=90)),
        ("variant", variant("real_bf16_dali", "real", "fp16", DALI, target="real data", est=60)),
        ("variant", variant("real_bf16_dali_cpudec", "real", "fp16", cpu, target="real data", est=35)),
        ("variant", variant("syn_bf16_repeat", "synthetic", "fp16", [], target="synthetic bf16", est=30)),
        ("variant", variant("real_bf16_dali_cpudec_repeat", "real", "fp16", cpu, target="real data", est=35)),
        ("variant", variant("real_bf16_dali_repeat", "real", "fp16", DALI, target="real data", est=35)),
        ("variant", variant("real_bf16_dali_cpudec_lag1", "real", "fp16", cpu + ["--loss-lag", "1"], est=35)),
        ("variant", variant("syn_bf16_400", "synthetic", "fp16", [], est=45, steps=400)),
        ("variant", variant("real_bf16_dali_cpudec_400", "real", "fp16", cpu, est=50, steps=400)),
        ("variant", variant("real_bf16_dali_cpudec_lag1_400", "real", "fp16", cpu + ["--loss-lag", "1"], est=50,
                            steps=400)),
    ]


def plan_cpudec2():
    """Issue 14, run 21 (right after run 20): the CPU decoder's run-to-run spread. 3 batches in flight,
    12 CPU threads (leaving the training thread more of the 16 cores), each twice, against the
    defaults and the CPU decoder as run 20 ran it."""
    cpu = DALI + ["--dali-decoder", "cpu"]
    p3, t12 = cpu + ["--prefetch", "3"], cpu + ["--loader-workers", "12"]
    return [
        ("variant", variant("syn_bf16", "synthetic", "fp16", [], target="synthetic bf16", est=40)),
        ("variant", variant("real_bf16_dali_cpudec", "real", "fp16", cpu, target="real data", est=35)),
        ("variant", variant("real_bf16_dali_cpudec_prefetch3", "real", "fp16", p3, est=35)),
        ("variant", variant("real_bf16_dali_cpudec_12threads", "real", "fp16", t12, est=35)),
        ("variant", variant("real_bf16_dali", "real", "fp16", DALI, target="real data", est=35)),
        ("variant", variant("syn_bf16_repeat", "synthetic", "fp16", [], target="synthetic bf16", est=30)),
        ("variant", variant("real_bf16_dali_cpudec_repeat", "real", "fp16", cpu, target="real data", est=35)),
        ("variant", variant("real_bf16_dali_cpudec_prefetch3_repeat", "real", "fp16", p3, est=35)),
        ("variant", variant("real_bf16_dali_cpudec_12threads_repeat", "real", "fp16", t12, est=35)),
        ("variant", variant("real_bf16_dali_repeat", "real", "fp16", DALI, target="real data", est=35)),
    ]


def plan_cpudec3():
    """Issue 14, run 22 (right after run 21): the defaults after runs 20-21 (DALI decoding on the CPU
    in cores per GPU - 4 threads) beside every other input path and the mixed decoder as it was."""
    mixed = DALI + ["--dali-decoder", "mixed", "--loader-workers", "15"]
    return plan_inputs(est=(40, 35, 35, 50, 30, 35)) + [
        ("variant", variant("real_bf16_dali_mixed", "real", "fp16", mixed, est=35)),
        ("variant", variant("real_bf16_dali_repeat2", "real", "fp16", DALI, target="real data", est=35)),
        ("variant", variant("syn_bf16_400", "synthetic", "fp16", [], est=45, steps=400)),
        ("variant", variant("real_bf16_dali_400", "real", "fp16", DALI, est=50, steps=400)),
    ]


def plan_steady():
    """Issue 14, run 24: where the DALI runs' isolated slow steps come from (run 23: single steps of
    50-136 ms beside a 47 ms median, fewer the longer a run goes, as buffers that grow to the
    largest batch so far would give). DALI grows its pinned and device memory pools on demand,
    and each growth waits for the device: the pools allocated before training, DALI's buffers
    grown by a factor 2 when they must grow, its threads pinned to cores, and no telemetry thread
    beside the step; 400 timed steps each."""
    prealloc = DALI_POOLS
    growth = {"DALI_BUFFER_GROWTH_FACTOR": "2"}
    return [
        ("variant", variant("syn_bf16", "synthetic", "fp16", [], target="synthetic bf16", est=40)),
        ("variant", variant("real_bf16_dali_400", "real", "fp16", DALI, est=50, steps=400)),
        ("variant", variant("real_bf16_dali_prealloc_400", "real", "fp16", prealloc, est=50, steps=400)),
        ("variant", variant("real_bf16_dali_growth2_400", "real", "fp16", DALI, est=50, steps=400, env=growth)),
        ("variant", variant("syn_bf16_400", "synthetic", "fp16", [], est=45, steps=400)),
        ("variant", variant("real_bf16_dali_prealloc_growth2_400", "real", "fp16", prealloc, est=50, steps=400,
                            env=growth)),
        ("variant", variant("real_bf16_dali_400_repeat", "real", "fp16", DALI, est=50, steps=400)),
        ("variant", variant("real_bf16_dali_prealloc_400_repeat", "real", "fp16", prealloc, est=50, steps=400)),
        ("variant", variant("real_bf16_dali_notelemetry_400", "real", "fp16", DALI + ["--telemetry-interval", "0"],
                            est=50, steps=400)),
    ]


def plan_steady2():
    """Issue 14, run 25 (after run 24: with DALI's pools allocated before training, CV 1.5% over 400
    steps, against 3.7-5.3% for the other DALI rows, and synthetic itself at 2.4-4.1% there, its
    slow steps waiting for no input): each loss read one step behind (--loss-lag 1, the GPU then
    holds the next step while the host reads, so a host stall shorter than a step costs nothing),
    with and without the pools allocated, each twice, alternated; then 400 steps of both."""
    prealloc = DALI_POOLS
    lag1 = ["--loss-lag", "1"]
    rows = [("syn_bf16", "synthetic", [], 90), ("syn_bf16_lag1", "synthetic", lag1, 30),
            ("real_bf16_dali_prealloc", "real", prealloc, 35), ("real_bf16_dali_prealloc_lag1", "real", prealloc + lag1, 35),
            ("real_bf16_dali", "real", DALI, 35), ("real_bf16_dali_lag1", "real", DALI + lag1, 35),
            ("syn_bf16_repeat", "synthetic", [], 30), ("syn_bf16_lag1_repeat", "synthetic", lag1, 30),
            ("real_bf16_dali_prealloc_repeat", "real", prealloc, 35),
            ("real_bf16_dali_prealloc_lag1_repeat", "real", prealloc + lag1, 35)]
    return [("variant", variant(name, data, "fp16", opts, est=e)) for name, data, opts, e in rows] + [
        ("variant", variant("real_bf16_dali_prealloc_lag1_400", "real", "fp16", prealloc + lag1, est=50, steps=400)),
        ("variant", variant("real_bf16_dali_prealloc_400", "real", "fp16", prealloc, est=50, steps=400)),
    ]


def plan_final():
    """Issue 14, run 26: every input path in one call, and two candidate defaults alone, alternated:
    DALI's pools allocated before training (the `dali` rows here; the default while run 26 ran,
    not since: `real_bf16_dali_grown` is today's default), and the telemetry sampled in a thread of
    the training process (then the trainer sampled in a process of its own, a change measured
    here and dropped, so today `..._telemetry_thread` rows are the defaults too), and none."""
    thread = {"DLSCALE_TELEMETRY": "thread"}
    pools = DALI_POOLS
    quiet = ["--telemetry-interval", "0"]
    rows = [("syn_bf16", "synthetic", [], "synthetic bf16", 90, None), ("real_bf16_dali", "real", pools, "", 35, None),
            ("real_bf16_gpu", "real", GPU_DECODE, "real data", 35, None),
            ("real_bf16_cpu", "real", CPU_DECODE, "real data", 50, None),
            ("syn_bf16_repeat", "synthetic", [], "synthetic bf16", 30, None),
            ("real_bf16_dali_repeat", "real", pools, "", 35, None),
            ("syn_bf16_telemetry_thread", "synthetic", [], "", 30, thread),
            ("syn_bf16_notelemetry", "synthetic", quiet, "", 30, None),
            ("real_bf16_dali_grown", "real", DALI, "real data", 35, None),
            ("syn_bf16_repeat2", "synthetic", [], "synthetic bf16", 30, None),
            ("real_bf16_dali_repeat2", "real", pools, "", 35, None),
            ("syn_bf16_telemetry_thread_repeat", "synthetic", [], "", 30, thread),
            ("real_bf16_dali_telemetry_thread", "real", pools, "", 35, thread),
            ("syn_bf16_notelemetry_repeat", "synthetic", quiet, "", 30, None)]
    return [("variant", variant(name, data, "fp16", opts, target=target, est=e, env=env))
            for name, data, opts, target, e, env in rows]


def plan_dali_ddp(n):
    """Issue 14's stretch, run 27: DALI (the defaults) against synthetic data on 1 and n GPUs of one
    host, each rank its own pipeline and shard of the LMDB, alternated and repeated."""
    return [
        ("variant", variant("syn_bf16_1gpu", "synthetic", "fp16", [], target="synthetic bf16", est=100)),
        ("variant", variant(f"syn_bf16_{n}gpu", "synthetic", "fp16", [], gpus=n, target=f"{n}-GPU scaling", est=80)),
        ("variant", variant("real_bf16_dali_1gpu", "real", "fp16", DALI, target="real data", est=60)),
        ("variant", variant(f"real_bf16_dali_{n}gpu", "real", "fp16", DALI, gpus=n, target="real data", est=60)),
        ("variant", variant(f"syn_bf16_{n}gpu_repeat", "synthetic", "fp16", [], gpus=n, target=f"{n}-GPU scaling",
                            est=40)),
        ("variant", variant(f"real_bf16_dali_{n}gpu_repeat", "real", "fp16", DALI, gpus=n, target="real data", est=45)),
        ("variant", variant("syn_bf16_1gpu_repeat", "synthetic", "fp16", [], target="synthetic bf16", est=35)),
        ("variant", variant("real_bf16_dali_1gpu_repeat", "real", "fp16", DALI, target="real data", est=40)),
    ]


def plan_isolate():
    """Issue 14, run 29: the training thread on a physical core of its own after warm-up
    (--main-core on: DALI's and every other thread of the process moved off it), against the
    defaults, alternated, for synthetic and DALI input; and two `dali` runs back to back at the
    start (runs 26 and 28: the first `dali` run of a fresh machine was the call's slowest)."""
    rows = [("syn_bf16", "synthetic", [], "synthetic bf16", 90, None),
            ("real_bf16_dali", "real", DALI, "real data", 35, None),
            ("real_bf16_dali_again", "real", DALI, "real data", 35, None),
            ("syn_bf16_repeat", "synthetic", [], "synthetic bf16", 30, None),
            ("real_bf16_dali_repeat", "real", DALI, "real data", 35, None),
            ("real_bf16_dali_400", "real", DALI, "real data", 50, 400)]
    return [("variant", variant(name, data, "fp16", opts, target=target, est=e, steps=steps))
            for name, data, opts, target, e, steps in rows]


def plan_graphs():
    """Issue 14, run 30: where the slow steps' time goes on the host (each step now records the
    training thread's CPU time and run-queue wait; the telemetry the CPUs' steal), and CUDA graphs
    (--compile reduce-overhead: a step launched at once, so the host's speed no longer paces the
    GPU; synthetic with them was steady in runs 2-6, CV 0.3-0.5%) with DALI input, against the
    defaults, alternated."""
    graphs = ["--compile", "reduce-overhead"]
    rows = [("syn_bf16", "synthetic", [], "synthetic bf16", 90, None),
            ("real_bf16_dali", "real", DALI, "real data", 35, None),
            ("syn_bf16_graphs", "synthetic", graphs, "", 70, None),
            ("real_bf16_dali_graphs", "real", DALI + graphs, "", 45, None),
            ("syn_bf16_repeat", "synthetic", [], "synthetic bf16", 30, None),
            ("real_bf16_dali_repeat", "real", DALI, "real data", 35, None),
            ("syn_bf16_graphs_repeat", "synthetic", graphs, "", 35, None),
            ("real_bf16_dali_graphs_repeat", "real", DALI + graphs, "", 40, None),
            ("real_bf16_dali_graphs_400", "real", DALI + graphs, "", 55, 400),
            ("real_bf16_dali_400", "real", DALI, "real data", 50, 400)]
    return [("variant", variant(name, data, "fp16", opts, target=target, est=e, steps=steps))
            for name, data, opts, target, e, steps in rows]


def plan_device():
    """Issue 14, run 31: are the slow steps the GPU's or the host's? Synthetic data only (run 30: its
    steps varied as much as DALI's, CV 9.1%), each step's time on the GPU now recorded (CUDA events
    around its work): compile `default` (the host launches each kernel) and CUDA graphs (one launch
    a step, so the GPU's time is the step's work alone), alternated."""
    graphs = ["--compile", "reduce-overhead"]
    rows = [("syn_bf16", [], 90, None), ("syn_bf16_graphs", graphs, 70, None),
            ("syn_bf16_repeat", [], 30, None), ("syn_bf16_graphs_repeat", graphs, 30, None),
            ("syn_bf16_400", [], 45, 400), ("syn_bf16_graphs_400", graphs, 45, 400),
            ("syn_bf16_eager", ["--compile", "off"], 40, None)]
    return [("variant", variant(name, "synthetic", "fp16", opts, target="synthetic bf16" if not opts else "", est=e,
                                steps=steps)) for name, opts, e, steps in rows]


def plan_thermal():
    """Issue 14, run 32: run 31 put the slow steps on the GPU (their extra time is GPU time, with CUDA
    graphs too) with the SM clock at its maximum in every 1-s sample. Synthetic data, telemetry
    every 0.25 s with the GPU's and its memory's temperatures, memory clock and the share of time
    NVML counted the clocks held down by power or heat; each run's steps and telemetry kept to
    line them up."""
    fast = ["--telemetry-interval", "0.25"]
    graphs = ["--compile", "reduce-overhead"]
    rows = [("syn_bf16", fast, 90, None), ("syn_bf16_400", fast, 45, 400), ("syn_bf16_graphs_400", graphs + fast, 90, 400),
            ("syn_bf16_400_repeat", fast, 45, 400), ("syn_bf16_graphs_400_repeat", graphs + fast, 50, 400),
            ("syn_bf16_eager", ["--compile", "off"] + fast, 40, None)]
    return [("variant", variant(name, "synthetic", "fp16", opts, est=e, steps=steps)) for name, opts, e, steps in rows]


def plan_attrib():
    """Issue 14, run 33: the DALI runs' slow steps, on the GPU or on the host? Each step's GPU time
    (run 31 found synthetic's on the GPU), telemetry every 0.25 s; DALI and synthetic with the
    defaults, alternated, 400 timed steps."""
    fast = ["--telemetry-interval", "0.25"]
    rows = [("syn_bf16", "synthetic", fast, "synthetic bf16", 90, None), ("real_bf16_dali", "real", DALI + fast, "real data", 35, None),
            ("syn_bf16_400", "synthetic", fast, "synthetic bf16", 45, 400), ("real_bf16_dali_400", "real", DALI + fast, "real data", 50, 400),
            ("real_bf16_dali_400_repeat", "real", DALI + fast, "real data", 50, 400),
            ("syn_bf16_400_repeat", "synthetic", fast, "synthetic bf16", 45, 400)]
    return [("variant", variant(name, data, "fp16", opts, target=target, est=e, steps=steps))
            for name, data, opts, target, e, steps in rows]


def plan_stalls():
    """Issue 14, run 35: runs 33-34's one host-side stall of 76-95 ms in some `dali` runs (GPU time
    as the median's, no input wait, the training thread off its CPU but not waiting for one): DALI
    growing its pinned and device pools takes the driver's locks, so the same runs with the pools
    allocated before training, alternated with the defaults, 400 timed steps each."""
    rows = [("real_bf16_dali", "real", DALI, "real data", 90, None),
            ("real_bf16_dali_pools_400", "real", DALI_POOLS, "", 50, 400),
            ("real_bf16_dali_400", "real", DALI, "real data", 50, 400),
            ("real_bf16_dali_pools_400_repeat", "real", DALI_POOLS, "", 50, 400),
            ("real_bf16_dali_400_repeat", "real", DALI, "real data", 50, 400),
            ("syn_bf16_400", "synthetic", [], "synthetic bf16", 45, 400)]
    return [("variant", variant(name, data, "fp16", opts, target=target, est=e, steps=steps))
            for name, data, opts, target, e, steps in rows]



GRAPHS = ["--compile", "reduce-overhead"]


def plan_pace():
    """Issue 14, runs 36-37 (the calls that carry DALI's pieces; the LMDB and the compiler's cache
    they leave serve run 38): is the compiled step paced by the host? Synthetic data, compile
    `default` (the training thread launches each kernel from Python) against CUDA graphs (one
    launch per compiled graph), each step's thread CPU time beside its GPU time."""
    rows = [("syn_bf16", [], 90, None), ("syn_bf16_graphs", GRAPHS, 90, None),
            ("syn_bf16_400", [], 45, 400), ("syn_bf16_graphs_400", GRAPHS, 45, 400)]
    return [("variant", variant(name, "synthetic", "fp16", opts, est=e, steps=steps)) for name, opts, e, steps in rows]


def plan_graphs2():
    """Issue 14, run 38: DALI beside CUDA graphs. Runs 12 and 30 starved DALI with them (waits of
    up to 124 ms): with graphs the step asks for ~5,500 images/s, close to what 12 decoding
    threads give beside it, so a pause of DALI's (a pool growing) outlasts two batches queued.
    Here deeper queues (4, 6 batches) with the pools allocated before training, against the
    defaults, alternated; then the defaults' other input paths."""
    q = lambda n: ["--prefetch", str(n)]  # noqa: E731
    rows = [("syn_bf16", "synthetic", [], "synthetic bf16", 60, None),
            ("real_bf16_dali", "real", DALI, "real data", 35, None),
            ("syn_bf16_graphs", "synthetic", GRAPHS, "", 45, None),
            ("real_bf16_dali_graphs", "real", DALI + GRAPHS, "", 40, None),
            ("real_bf16_dali_graphs_q4_pools", "real", DALI_POOLS + GRAPHS + q(4), "", 40, None),
            ("real_bf16_dali_graphs_q6_pools", "real", DALI_POOLS + GRAPHS + q(6), "", 40, None),
            ("syn_bf16_graphs_repeat", "synthetic", GRAPHS, "", 30, None),
            ("real_bf16_dali_graphs_q4_pools_repeat", "real", DALI_POOLS + GRAPHS + q(4), "", 40, None),
            ("real_bf16_dali_repeat", "real", DALI, "real data", 35, None),
            ("syn_bf16_repeat", "synthetic", [], "synthetic bf16", 30, None),
            ("real_bf16_dali_graphs_q4_pools_400", "real", DALI_POOLS + GRAPHS + q(4), "", 55, 400),
            ("syn_bf16_graphs_400", "synthetic", GRAPHS, "", 45, 400),
            ("real_bf16_gpu", "real", GPU_DECODE, "real data", 45, None),
            ("real_bf16_cpu", "real", CPU_DECODE, "real data", 50, None)]
    return [("variant", variant(name, data, "fp16", opts, target=target, est=e, steps=steps))
            for name, data, opts, target, e, steps in rows]


def plan_defaults40():
    """Issue 14, run 40 (on a fresh machine after runs 38-39): the trainer's new defaults (CUDA
    graphs with synthetic data and DALI, DALI four batches ahead with its pools allocated) for every
    input path against synthetic data, and the former defaults (compile default, two batches ahead,
    no pools) in the same call."""
    former = ["--compile", "default", "--prefetch", "2", "--dali-pinned-mb", "0", "--dali-device-mb", "0"]
    return plan_inputs(est=(60, 40, 45, 50, 30, 35)) + [
        ("variant", variant("syn_bf16_former", "synthetic", "fp16", former, est=60)),
        ("variant", variant("real_bf16_dali_former", "real", "fp16", DALI + former, est=35)),
        ("variant", variant("real_bf16_dali_repeat2", "real", "fp16", DALI, target="real data", est=35)),
        ("variant", variant("syn_bf16_400", "synthetic", "fp16", [], est=45, steps=400)),
        ("variant", variant("real_bf16_dali_400", "real", "fp16", DALI, est=50, steps=400)),
    ]



def long_test(name, opts, epochs, est):
    """--mode accuracy (the long test: epochs, the learning-rate schedule, top-1/top-5 on the val
    split after each) on one GPU with the given options; its records go to results["long_tests"]."""
    return ("long_test", {**variant(name, "real", "fp16", opts, est=est), "epochs": epochs})


def plan_defaults42():
    """Issue 14, runs 42-45 (a fresh machine; calls 42 and 43 carry DALI's first two pieces and
    run what needs no DALI, 44 and 45 the rest): the defaults' synthetic and dali runs alternated,
    and the long test (mode accuracy) with DALI and CUDA graphs, the default on a GPU within a
    node, against the same long test in compile mode default: same seed, same data, the losses,
    top-1 and top-5 of each epoch side by side."""
    rows = [("syn_bf16", "synthetic", []), ("real_bf16_dali", "real", DALI)]
    alternated = [("variant", variant(f"{name}{suffix}", data, "fp16", opts, est=45))
                  for suffix in ("", "_repeat", "_repeat2", "_repeat3") for name, data, opts in rows]
    return alternated + [
        long_test("long_dali", DALI, 6, 90),
        long_test("long_dali_compile_default", DALI + ["--compile", "default"], 6, 90),
        ("variant", variant("syn_bf16_400", "synthetic", "fp16", [], est=45, steps=400)),
        ("variant", variant("real_bf16_dali_400", "real", "fp16", DALI, est=50, steps=400)),
        ("variant", variant("real_bf16_gpu", "real", "fp16", GPU_DECODE, est=45)),
        ("variant", variant("real_bf16_cpu", "real", "fp16", CPU_DECODE, est=50)),
    ]


# plan name -> items, given the GPU count of the multi-GPU runs (one-GPU plans ignore it)
PLANS = {"h100": lambda n: plan_h100(), "decode": lambda n: plan_decode(), "decode2": lambda n: plan_decode2(),
         "inputs": lambda n: plan_inputs(), "dali2": lambda n: plan_dali2(), "clocks": lambda n: plan_clocks(),
         "ahead": lambda n: plan_ahead(), "timeline": lambda n: plan_timeline(),
         "lag": lambda n: plan_lag(), "depth": lambda n: plan_depth(), "cpudec": lambda n: plan_cpudec(),
         "cpudec2": lambda n: plan_cpudec2(), "cpudec3": lambda n: plan_cpudec3(),
         "steady": lambda n: plan_steady(), "steady2": lambda n: plan_steady2(),
         "final": lambda n: plan_final(), "dali_ddp": plan_dali_ddp, "isolate": lambda n: plan_isolate(),
         "graphs": lambda n: plan_graphs(), "device": lambda n: plan_device(),
         "thermal": lambda n: plan_thermal(), "attrib": lambda n: plan_attrib(),
         "stalls": lambda n: plan_stalls(), "pace": lambda n: plan_pace(), "graphs2": lambda n: plan_graphs2(),
         "defaults40": lambda n: plan_defaults40(), "defaults42": lambda n: plan_defaults42(),
         "scaling": plan_scaling, "ddp": plan_ddp, "ddp2": plan_ddp2, "ddp3": plan_ddp3}


def trainer_command(v, work, a):
    run_dir = work / "runs" / v["name"]
    source = "real" if v["data"].startswith("real") else v["data"]
    mode = (["--mode", "accuracy", "--epochs", str(v["epochs"]), "--eval-every", "1"] if v.get("epochs") else
            ["--mode", "steps", "--warmup-steps", str(a.warmup), "--steps", str(v.get("steps") or a.steps)])
    args = ["--data-source", source, "--precision", v["precision"], "--batch-per-gpu", str(a.batch),
            "--image-size", str(a.image_size), *mode, "--lr", "0.1", "--momentum", "0.9", "--weight-decay", "0.0001", "--seed", "0",
            "--telemetry-interval", "1.0", *v["opts"]]
    # real256: the same images stored with their shorter side at 256 (conversion.resize_shorter: 256)
    args += ["--data", str(work / LMDB_OF[v["data"]])] if source == "real" else ["--classes", "1000"]
    cmd = [PY, "-m", "workflow_scripts.train.pytorch_ddp", *args, "--out", str(run_dir)]
    if v["gpus"] > 1:
        cmd = [PY, "-m", "workflow_scripts.train.launch", "--nproc-per-node", str(v["gpus"]), "--", *cmd]
    return cmd, run_dir


def _run(cmd, timeout, env=None):
    """Run cmd in its own process group and, past the timeout, end the whole group: a launcher's
    ranks must not outlive it holding the GPU."""
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env={**os.environ, **env} if env else None)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything of the group still alive
        except ProcessLookupError:
            pass
    return proc.returncode, output


def run_concurrent(v, work, a, timeout):
    """v's one-GPU command on each of v['concurrent'] GPUs at the same time; images/s summed."""
    procs, dirs = [], []
    for k in range(v["concurrent"]):
        cmd, run_dir = trainer_command({**v, "name": f"{v['name']}_gpu{k}"}, work, a)
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(k)}
        procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, start_new_session=True))
        dirs.append(run_dir)
    t = time.perf_counter()
    outputs = []
    for p in procs:
        try:
            outputs.append(p.communicate(timeout=max(1, timeout - (time.perf_counter() - t)))[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                os.killpg(q.pid, signal.SIGKILL)
            raise
    wall = time.perf_counter() - t
    res = {**v, "batch": a.batch, "command": f"{v['concurrent']} x (CUDA_VISIBLE_DEVICES=k {' '.join(cmd[1:3])} ...)",
           "wall_s": wall}
    if any(p.returncode for p in procs) or not all((d / "summary.json").exists() for d in dirs):
        return {**res, "status": "failed", "error": "\n".join(o[-1200:] for o in outputs)}
    sums = [json.loads((d / "summary.json").read_text()) for d in dirs]
    logs = [[json.loads(line) for line in (d / "steps.jsonl").read_text().splitlines()] for d in dirs]
    steps = logs[0]
    # The runs compile for different times: how much of their timed windows (monotonic clock,
    # one per host) actually ran at the same time.
    windows = [(min(x["t_end"] - x["wall_s"] for x in lg if x["phase"] == "timed"),
                max(x["t_end"] for x in lg if x["phase"] == "timed")) for lg in logs]
    common = max(0.0, min(w[1] for w in windows) - max(w[0] for w in windows))
    overlap = common / (max(w[1] for w in windows) - min(w[0] for w in windows))
    return {**res, "status": "ok", "images_per_s": sum(s["images_per_s"] for s in sums),
            "per_gpu": statistics.fmean(s["images_per_s"] for s in sums),
            "each": [s["images_per_s"] for s in sums], "step_cv": max(s["step_images_per_s_cv"] for s in sums),
            "stable": all(s["stable"] for s in sums), "settings": sums[0].get("pytorch"), "input_wait_fraction": 0.0,
            "losses": [x["loss"] for x in steps], "step_wall_s": [x["wall_s"] for x in steps], "gpus": v["concurrent"],
            "loss_falls": True, "device": sums[0].get("device"), "timed_overlap": overlap}


def run_allreduce(a, work, timeout):
    cmd = [PY, "-m", "workflow_scripts.train.launch", "--nproc-per-node", str(a.gpus), "--", PY,
           str(REPO / "benchmarks" / "nccl_allreduce.py")]
    t = time.perf_counter()
    code, output = _run(cmd, timeout)
    res = {"wall_s": time.perf_counter() - t}
    lines = [x for x in output.splitlines() if x.startswith("{")]
    if code or not lines:
        return {**res, "status": "failed", "error": output[-2500:]}
    return {**res, "status": "ok", **json.loads(lines[-1])}


def run_logged(v, work, a, timeout):
    """v's trainer command, its output kept in WORK/logs. -> (run directory, exit code, output,
    the result's first fields: v, the command as shown, wall seconds)."""
    cmd, run_dir = trainer_command(v, work, a)
    shutil.rmtree(run_dir, ignore_errors=True)
    t = time.perf_counter()
    code, output = _run(cmd, timeout, v.get("env"))
    wall = time.perf_counter() - t
    (work / "logs").mkdir(exist_ok=True)
    (work / "logs" / f"{v['name']}.log").write_text(output)
    shown = " ".join("python3" if c == PY else os.path.relpath(c, REPO) if c.startswith(str(work)) else c for c in cmd)
    shown = " ".join([*(f"{k}={val}" for k, val in v.get("env", {}).items()), shown])
    return run_dir, code, output, {**v, "batch": a.batch, "command": shown, "wall_s": wall, "exit_code": code}


def run_long_test(t, work, a, timeout):
    """One long test (pytorch_ddp --mode accuracy) on the real LMDB; its epochs' records."""
    run_dir, code, output, res = run_logged(t, work, a, timeout)
    summary, epochs = run_dir / "summary.json", run_dir / "epochs.jsonl"
    if code or not summary.exists() or not epochs.exists():
        return {**res, "status": "failed", "error": output[-2500:]}
    s = json.loads(summary.read_text())
    return {**res, "status": "ok", "settings": s.get("pytorch"), "long_test": s.get("long_test"),
            "epochs_run": [json.loads(line) for line in epochs.read_text().splitlines()]}


def run_variant(v, work, a, timeout):
    if v.get("concurrent", 1) > 1:
        return run_concurrent(v, work, a, timeout)
    run_dir, code, output, res = run_logged(v, work, a, timeout)
    summary = run_dir / "summary.json"
    if code or not summary.exists():
        return {**res, "status": "failed", "error": output[-2500:]}
    s = json.loads(summary.read_text())
    steps = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    losses = [x["loss"] for x in steps]
    kept = Path(a.out) / f"run_{v['name']}"  # the run's own files, to line its steps up with its telemetry
    kept.mkdir(parents=True, exist_ok=True)
    for f in [summary, run_dir / "steps.jsonl", *run_dir.glob("telemetry.*.csv")]:
        shutil.copy(f, kept / f.name)
    res.update(status="ok", images_per_s=s["images_per_s"], per_gpu=s["images_per_s"] / v["gpus"],
               step_cv=s["step_images_per_s_cv"], stable=s["stable"], device=s.get("device"),
               settings=s.get("pytorch"), workers=s.get("loader_workers"),
               input_wait_fraction=s.get("input_wait_s_timed", 0) / s["seconds_timed"],
               max_memory_gb=s.get("max_memory_allocated_gb"), losses=losses,
               step_wall_s=[x["wall_s"] for x in steps], step_input_wait_s=[x.get("input_wait_s") for x in steps],
               step_thread_cpu_s=[x.get("thread_cpu_s") for x in steps],
               step_runqueue_wait_s=[x.get("runqueue_wait_s") for x in steps],
               step_device_s=[x.get("device_s") for x in steps],
               loss_falls=statistics.fmean(losses[-5:]) < statistics.fmean(losses[:3]), versions=s.get("versions"),
               gpu_input=s.get("gpu_input"), gpu_clocks=gpu_clocks(run_dir, s["seconds_timed"]))
    return res


# NVML's clock limiters (nvmlClocksEventReasons) that lower the SM clock under load
LIMITERS = {0x4: "power cap", 0x8: "hardware slowdown", 0x20: "thermal (software)", 0x40: "thermal (hardware)",
            0x80: "power brake"}


def gpu_clocks(run_dir, seconds_timed):
    """GPU 0's mean power and SM clock over the telemetry samples of the timed steps (the last
    seconds_timed seconds of the run: the telemetry stops right after them), and the share of
    those samples with each clock limiter active."""
    csvs = sorted(Path(run_dir).glob("telemetry.*.csv"))
    if not csvs:
        return None
    with open(csvs[0]) as f:
        rows = [r for r in csv.DictReader(f) if r["device"] == "gpu0" or r["metric"] == "cpu_steal_percent"]
    end = max((float(r["time_s"]) for r in rows), default=0)
    by = {}
    for r in rows:
        if float(r["time_s"]) > end - seconds_timed:
            by.setdefault(r["metric"], []).append(float(r["value"]))
    if "gpu_sm_clock_MHz" not in by:
        return None
    limits = [int(x) for x in by.get("gpu_clock_limiters", [])]
    mean = lambda m: statistics.fmean(by[m]) if m in by else None  # noqa: E731
    return {"samples": len(by["gpu_sm_clock_MHz"]), "sm_clock_MHz": mean("gpu_sm_clock_MHz"),
            "sm_clock_min_MHz": min(by["gpu_sm_clock_MHz"]), "power_W": mean("gpu_power_W"),
            "util_percent": mean("gpu_util_percent"), "cpu_steal_percent": mean("cpu_steal_percent"),
            **{f"{m}_max": max(by[m]) for m in ("gpu_temp_C", "gpu_mem_temp_C", "gpu_power_limited_percent",
                                                 "gpu_thermal_limited_percent") if m in by},
            "mem_clock_min_MHz": min(by.get("gpu_mem_clock_MHz", [float("nan")])),
            "cpu_steal_max_percent": max(by.get("cpu_steal_percent", [float("nan")])),
            "limited": {name: sum(1 for x in limits if x & bit) / len(limits) for bit, name in LIMITERS.items()
                        if limits}}


# ---------------------------------------------------------------- data


def _render_one(arg):
    """One train image exactly as embedded.make renders and saves it (same per-image seed)."""
    import numpy as np

    from workflow_scripts.data import embedded

    root, c, i = arg
    wnid = embedded.class_spec(c)[0]
    kind = {(4, 1): "gray"}.get((c, i), "rgb")  # embedded.make's quirk beyond each class's first image
    embedded._save(embedded.render(c, np.random.default_rng([SEED, 0, c, i])),
                   Path(root) / "train" / wnid / f"{wnid}_{i + 1}.JPEG", kind)


def part_data(a, work):
    from workflow_scripts.data import embedded

    if (work / "lmdb" / "manifest.json").exists():
        return {"reused": True, **json.loads((work / "lmdb" / "manifest.json").read_text())["splits"]["train"]}
    t = time.perf_counter()
    root = work / "ILSVRC2012"
    embedded.make(root, classes=a.classes, train_per_class=1, val_per_class=2, seed=SEED)
    jobs = [(str(root), c, i) for c in range(a.classes) for i in range(1, a.per_class)]
    with multiprocessing.Pool(a.threads) as pool:
        pool.map(_render_one, jobs, chunksize=8)
    rendered = time.perf_counter() - t
    for module, args in (("index", ["--root", root, "--out", work / "index"]),
                         ("lmdb_caffe2", ["--index", work / "index", "--out", work / "lmdb"]),
                         ("lmdb_caffe2", ["--index", work / "index", "--out", work / LMDB_OF["real256"],
                                          "--resize-shorter", "256"])):
        proc = subprocess.run([PY, "-m", f"workflow_scripts.data.{module}", *map(str, args), "--threads", str(a.threads)],
                              cwd=REPO, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"{module} failed:\n{proc.stderr[-3000:]}")
    manifest = json.loads((work / "lmdb" / "manifest.json").read_text())
    jpegs = list((root / "train").rglob("*.JPEG"))
    return {"render_s": rendered, "total_s": time.perf_counter() - t, **manifest["splits"]["train"],
            "mean_jpeg_kb": sum(p.stat().st_size for p in jpegs) / len(jpegs) / 1024}


# ---------------------------------------------------------------- in-process parts (own process)


def part_ceilings(a, work):
    import torch

    if not torch.cuda.is_available():
        return {"note": "no GPU"}
    dev = torch.device("cuda")
    out = {"device": torch.cuda.get_device_name(dev), "sm_count": torch.cuda.get_device_properties(dev).multi_processor_count}

    from workflow_scripts.common.timing import cuda_times

    def timed(fn):
        return statistics.median(cuda_times(fn, warmup=3, reps=20))

    src = torch.randn(1 << 29, device=dev, dtype=torch.float32)  # 2 GiB
    dst = torch.empty_like(src)
    out["copy_TBps"] = 2 * src.numel() * 4 / timed(lambda: dst.copy_(src)) / 1e12
    del src, dst
    n = 8192
    for name, dtype, tf32 in (("bf16", torch.bfloat16, False), ("tf32", torch.float32, True)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        x, y = torch.randn(n, n, device=dev, dtype=dtype), torch.randn(n, n, device=dev, dtype=dtype)
        out[f"{name}_matmul_TFLOPs"] = 2 * n ** 3 / timed(lambda: x @ y) / 1e12
    return out


def _device(torch):
    """The GPU; the CPU only when smoke-testing this script on a machine without one."""
    if torch.cuda.is_available():
        torch.cuda.set_device(0)
        return torch.device("cuda", 0)
    return torch.device("cpu")


def _args(extra):
    from workflow_scripts.train import harness, pytorch_ddp

    return pytorch_ddp.add_experiment_args(pytorch_ddp.add_args(harness.arg_parser("bench"))).parse_args(["--out", "/nonexistent", *extra])


def part_loaders(a, work):
    """The input pipeline alone, no training: how fast each stage can feed a GPU."""
    import torch

    from workflow_scripts.common.launch import detect
    from workflow_scripts.data.lmdb_dataset import LMDBImageNet
    from workflow_scripts.train import gpu_input, pytorch_ddp

    dev = _device(torch)
    out = {"batch": a.batch}
    ds = LMDBImageNet(work / "lmdb" / "train")
    items = [ds.raw(i) for i in range(a.batch)]
    flat, sizes, _ = gpu_input.collate_raw(items)
    jpegs = gpu_input.split_batch(flat, sizes)
    rng = random.Random(0)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def rate(fn, reps):
        for _ in range(3):
            fn()
        sync()
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        return reps * a.batch / (time.perf_counter() - t)

    out["nvjpeg_decode"] = rate(lambda: gpu_input.decode(jpegs, dev), 20)
    try:
        nvimg = gpu_input.NvImgCodec(dev)
    except RuntimeError as exc:
        out["nvimgcodec"] = str(exc)
    else:
        out["nvimgcodec_decode"] = rate(lambda: nvimg(jpegs), 20)
        diff = [(p.int() - q.int()).abs() for p, q in zip(nvimg(jpegs), gpu_input.decode(jpegs, dev))]
        out["nvimgcodec_vs_torchvision_levels"] = {"mean": torch.cat([d.flatten().float() for d in diff]).mean().item(),
                                                   "max": max(d.max().item() for d in diff)}

    def decode_augment():
        ims = gpu_input.decode(jpegs, dev)
        gpu_input.augment(ims, [gpu_input.crop_box(i.shape[1], i.shape[2], rng) for i in ims],
                          [rng.random() < 0.5 for _ in ims], a.image_size, channels_last=True)

    out["decode_augment"] = rate(decode_augment, 20)
    launch = detect()
    for name, opts, reps in (("gpu_loader", GPU_DECODE, 40), ("cpu_loader", CPU_DECODE, 20), ("dali_loader", DALI, 40)):
        args = _args(["--data", str(work / "lmdb"), "--batch-per-gpu", str(a.batch), "--image-size", str(a.image_size),
                      "--channels-last", "on", *opts])
        s = pytorch_ddp.resolve(args, dev)
        try:
            data = pytorch_ddp.build_input(args, s, launch)
            out[f"{name}_workers"] = data.workers
            out[name] = rate(lambda: data.next_batch(), reps)
            data.close()
        except Exception as exc:  # e.g. DALI not installed: the other loaders' figures still count
            out[name] = f"{type(exc).__name__}: {exc}"[:500]
    return out


def part_check(a, work):
    """The project's step on one real batch, CPU path vs GPU paths, from the same weights."""
    import io

    import torch
    import torchvision
    from PIL import Image
    from torchvision.transforms import v2 as T
    from torchvision.transforms.v2 import functional as TF

    from workflow_scripts.data.lmdb_dataset import LMDBImageNet
    from workflow_scripts.train import gpu_input, harness, pytorch_ddp, pytorch_options

    B, K, size = min(64, 4 * a.batch), 3, a.image_size
    # Tolerances fixed before any GPU run: per-step |loss - CPU fp32 loss| over the CPU's first
    # loss. (Not over each step's own loss: on one repeated batch the loss collapses, and a
    # difference relative to a loss near zero says nothing.)
    tol = {"gpu_fp32_strict_cpu_inputs": 1e-3, "gpu_fp32_strict": 2e-2, "gpu_tf32_cl": 2e-2, "gpu_bf16_cl": 5e-2}
    dev = _device(torch)
    ds = LMDBImageNet(work / "lmdb" / "train")
    items = [ds.raw(i) for i in range(B)]
    flat, sizes, labels = gpu_input.collate_raw(items)
    images = gpu_input.decode(gpu_input.split_batch(flat, sizes), dev)
    rng = random.Random(1)
    boxes = [gpu_input.crop_box(im.shape[1], im.shape[2], rng) for im in images]
    flips = [i % 2 == 1 for i in range(B)]
    x_gpu = gpu_input.augment(images, boxes, flips, size, channels_last=True)
    post = T.Compose([T.PILToTensor(), T.ToDtype(torch.float32, scale=True),
                      T.Normalize(pytorch_ddp.MEAN, pytorch_ddp.STD)])
    ref = []
    for (jpeg, _), (t, l, h, w), f in zip(items, boxes, flips):
        im = TF.resized_crop(Image.open(io.BytesIO(jpeg)).convert("RGB"), t, l, h, w, [size, size], antialias=True)
        ref.append(post(TF.horizontal_flip(im) if f else im))
    x_cpu = torch.stack(ref)
    # Where GPU and CPU preprocessing differ: the decoders (nvJPEG vs libjpeg-turbo), and the
    # batched resize (float16 matrix products) against F.interpolate in float32 per image.
    dec = torch.cat([(im.cpu().float() - TF.pil_to_tensor(Image.open(io.BytesIO(j)).convert("RGB")).float()).abs().flatten()
                     for im, (j, _) in zip(images, items)])
    one = torch.cat([gpu_input._resize_one(im, b, f, size) for im, b, f in zip(images, boxes, flips)])
    mean_ = torch.tensor(pytorch_ddp.MEAN, device=dev).view(1, 3, 1, 1)
    std_ = torch.tensor(pytorch_ddp.STD, device=dev).view(1, 3, 1, 1)
    rsz = ((x_gpu.float() * std_ + mean_) * 255 - one).abs()
    levels = ((x_gpu.cpu() - x_cpu) * torch.tensor(pytorch_ddp.STD).view(1, 3, 1, 1) * 255).abs()
    out = {"batch": B, "steps": K, "tolerance": tol,
           "preprocessing_levels": {"mean": levels.mean().item(), "p99": levels.flatten().quantile(0.99).item(),
                                    "max": levels.max().item()},
           "decode_levels": {"mean": dec.mean().item(), "p99": dec[::7].quantile(0.99).item(), "max": dec.max().item()},
           "batched_resize_levels": {"mean": rsz.mean().item(), "max": rsz.max().item()}}
    classes = harness.classes_of(work / "lmdb")
    torch.manual_seed(0)
    state = torchvision.models.resnet50(num_classes=classes, zero_init_residual=True).state_dict()
    lr = 0.1 * B / 256

    def losses(settings, x, y):
        pytorch_ddp.configure_backends(settings)
        m = torchvision.models.resnet50(num_classes=classes, zero_init_residual=True)
        m.load_state_dict(state)
        tr = pytorch_ddp.Trainer(m, settings, lr, 0.9, 1e-4)
        return [tr.step(x, y).item() for _ in range(K)]

    torch.set_num_threads(os.cpu_count())
    cpu = losses(pytorch_options.Settings(torch.device("cpu")), x_cpu, labels)
    out["cpu_fp32"] = cpu
    runs = {
        "gpu_fp32_strict_cpu_inputs": (pytorch_options.Settings(dev), x_cpu.to(dev)),
        "gpu_fp32_strict": (pytorch_options.Settings(dev), x_gpu),
        "gpu_tf32_cl": (pytorch_options.Settings(dev, channels_last=True, tf32=True), x_gpu),
        "gpu_bf16_cl": (pytorch_options.Settings(dev, amp_dtype=torch.bfloat16, channels_last=True, tf32=True), x_gpu),
    }
    ok = True
    for name, (settings, x) in runs.items():
        got = losses(settings, x, labels.to(dev))
        rel = max(abs(g - c) for g, c in zip(got, cpu)) / abs(cpu[0])
        out[name] = {"losses": got, "max_rel_diff": rel, "within_tolerance": rel <= tol[name]}
        ok &= rel <= tol[name]
    out["all_within_tolerance"] = ok
    out["loss_falls_on_repeated_batch"] = cpu[-1] < cpu[0]
    return out


PARTS = {"ceilings": part_ceilings, "loaders": part_loaders, "check": part_check}


def run_part(name, a, work, timeout):
    """An in-process part in its own process, so this one never holds the GPU."""
    out = work / f"part_{name}.json"
    out.unlink(missing_ok=True)
    t = time.perf_counter()
    code, output = _run([PY, __file__, "--part", name, "--work", str(work), "--batch", str(a.batch),
                         "--image-size", str(a.image_size)], timeout)
    res = {"wall_s": time.perf_counter() - t}
    if code or not out.exists():
        return {**res, "status": "failed", "error": output[-2500:]}
    return {**res, "status": "ok", **json.loads(out.read_text())}


# ---------------------------------------------------------------- report


def report(results):
    lines = [f"# {results['plan']} on {results.get('gpu', '?')}, {results['date']}", ""]
    c = results.get("ceilings", {})
    if c.get("status") == "ok" and "copy_TBps" in c:
        lines.append(f"Ceilings: copy {c['copy_TBps']:.2f} TB/s (read + write), bf16 matmul "
                     f"{c['bf16_matmul_TFLOPs']:.0f} TFLOP/s, TF32 matmul {c['tf32_matmul_TFLOPs']:.0f} TFLOP/s")
    ld = results.get("loaders", {})
    if ld.get("status") == "ok":
        if "nvimgcodec_decode" in ld:
            lines.append(f"nvImageCodec decode {ld['nvimgcodec_decode']:.0f} images/s; vs torchvision's: "
                         f"{ld['nvimgcodec_vs_torchvision_levels']}")
        lines.append(f"Input alone (images/s, batch {ld['batch']}): nvJPEG decode {ld['nvjpeg_decode']:.0f}, "
                     f"decode + augment {ld['decode_augment']:.0f}, GPU loader ({ld['gpu_loader_workers']} workers) "
                     f"{ld['gpu_loader']:.0f}, CPU loader ({ld['cpu_loader_workers']} workers) {ld['cpu_loader']:.0f}"
                     + (f", DALI ({ld['dali_loader_workers']} threads) {ld['dali_loader']:.0f}"
                        if isinstance(ld.get("dali_loader"), float) else f"; DALI: {ld.get('dali_loader')}"))
    lines += ["", "| variant | GPUs | data | precision | batch/GPU | images/s | per GPU | step CV | input wait | "
              "loss first→last | wall s | status |", "|" + "---|" * 12]
    for v in results["variants"]:
        if v.get("status") == "ok":
            lines.append(f"| {v['name']} | {v['gpus']} | {v['data']} | {v['settings']['amp_dtype']} | {v['batch']} | "
                         f"{v['images_per_s']:.0f} | {v['per_gpu']:.0f} | {v['step_cv']:.1%} | "
                         f"{v['input_wait_fraction']:.1%} | {v['losses'][0]:.3f}→{v['losses'][-1]:.3f} | "
                         f"{v['wall_s']:.0f} | ok |")
        else:
            lines.append(f"| {v['name']} | {v['gpus']} | {v['data']} | {v['precision']} | {v.get('batch', '-')} | - | - | - | - | "
                         f"- | {v.get('wall_s', 0):.0f} | {v.get('status')}: {str(v.get('reason') or v.get('error', ''))[-160:].replace('|', '/').replace(chr(10), ' ')} |")
    lines += against_synthetic(results)
    stages = [v for v in results["variants"] if v.get("status") == "ok" and "fetch_s" in (v.get("gpu_input") or {})]
    if stages:
        lines += ["", "GPU input thread, mean ms per batch during the timed steps (fetch bytes from the workers / "
                  "nvJPEG call / augmentation launch):"]
        lines += [f"- {v['name']}: {1e3 * v['gpu_input']['fetch_s']:.1f} / {1e3 * v['gpu_input']['decode_s']:.1f} / "
                  f"{1e3 * v['gpu_input']['augment_launch_s']:.1f}" for v in stages]
    dali = [v for v in results["variants"] if v.get("status") == "ok" and "decoder" in (v.get("gpu_input") or {})]
    if dali:
        lines += ["", "DALI pipelines (decoder, CPU threads, batches prefetched, hardware decoder share; mean ms "
                  "per next() during the timed steps):"]
        lines += [f"- {v['name']}: {g['decoder']}, {g['threads']} threads, prefetch {g['prefetch']}, "
                  f"hw_decoder_load {g['hw_decoder_load']}; {1e3 * g.get('next_s', float('nan')):.2f} ms"
                  for v in dali for g in [v["gpu_input"]]]
    clocks = [v for v in results["variants"] if v.get("status") == "ok" and v.get("gpu_clocks")]
    if clocks:
        lines += ["", "| variant | images/s | GPU power W | SM clock MHz (min) | GPU util | CPU steal (max) | samples | "
                  "clock limited by | GPU / memory max C | time power / thermal limited (max) |", "|" + "---|" * 10]
        for v in clocks:
            c = v["gpu_clocks"]
            lim = ", ".join(f"{k} {x:.0%}" for k, x in c["limited"].items() if x) or "nothing"
            lines.append(f"| {v['name']} | {v['images_per_s']:.0f} | {c['power_W'] or float('nan'):.0f} | "
                         f"{c['sm_clock_MHz']:.0f} ({c['sm_clock_min_MHz']:.0f}) | {c['util_percent'] or float('nan'):.0f}% | "
                         f"{c.get('cpu_steal_percent') or 0:.1f}% ({c.get('cpu_steal_max_percent') or 0:.1f}%) | "
                         f"{c['samples']} | {lim} | {c.get('gpu_temp_C_max', '-')} / {c.get('gpu_mem_temp_C_max', '-')} | "
                         f"{c.get('gpu_power_limited_percent_max', float('nan')):.1f}% / "
                         f"{c.get('gpu_thermal_limited_percent_max', float('nan')):.1f}% |")
    traced = [v for v in results["variants"] if v.get("status") == "ok" and "window_ms" in v.get("trace", {})]
    if traced:
        lines += ["", "Profiled steps after the timed ones (benchmarks/trace_streams.py; times per step):", "",
                  "| variant | step ms | step stream busy | gaps ms: other stream busy / GPU idle | longest gaps ms | "
                  "other streams: kernels ms, of it beside the step | waits in CUDA calls, all threads (DALI's too), ms |",
                  "|" + "---|" * 7]
        for v in traced:
            t, n = v["trace"], v["trace"]["steps"]
            other = sum(x["kernel_ms"] for x in t["other_streams"].values())
            beside = sum(x["beside_step_ms"] for x in t["other_streams"].values())
            waits = ", ".join(f"{k} {x / n:.1f}" for k, x in t["wait_ms_all_threads"].items() if x / n >= 0.1)
            lines.append(f"| {v['name']} | {t['window_ms'] / n:.1f} | {t['step_stream_busy']:.1%} | "
                         f"{t['gap_ms_with_other_stream_busy'] / n:.2f} / {t['gap_ms_gpu_idle'] / n:.2f} | "
                         f"{', '.join(str(x) for x in t['longest_gaps_ms'][:4])} | {other / n:.2f}, {beside / n:.2f} | {waits} |")
    ck = results.get("check", {})
    if ck.get("status") == "ok":
        lines += ["", f"Check (batch {ck['batch']}, {ck['steps']} steps on one real batch): preprocessing GPU vs CPU "
                  f"mean {ck['preprocessing_levels']['mean']:.2f} / p99 {ck['preprocessing_levels']['p99']:.2f} / "
                  f"max {ck['preprocessing_levels']['max']:.1f} levels (decoders alone: mean "
                  f"{ck['decode_levels']['mean']:.2f} / max {ck['decode_levels']['max']:.0f}; batched float16 resize vs "
                  f"F.interpolate: mean {ck['batched_resize_levels']['mean']:.3f} / max {ck['batched_resize_levels']['max']:.2f});"
                  " CPU fp32 losses "
                  + ", ".join(f"{x:.4f}" for x in ck["cpu_fp32"])]
        for k, v in ck.items():
            if isinstance(v, dict) and "max_rel_diff" in v:
                lines.append(f"- {k}: max |loss - CPU loss| / first CPU loss {v['max_rel_diff']:.2e} (tolerance {ck['tolerance'][k]:.0e}) "
                             f"{'ok' if v['within_tolerance'] else 'OUT OF TOLERANCE'}")
    if results.get("allreduce", {}).get("status") == "ok":
        lines.append(f"All-reduce alone: { {k: v for k, v in results['allreduce'].items() if k != 'wall_s'} }")
    for t in results.get("long_tests", []):
        if t.get("status") != "ok":
            lines += ["", f"Long test {t['name']}: {t.get('status')}: {str(t.get('reason') or t.get('error', ''))[-300:]}"]
            continue
        lines += ["", f"Long test {t['name']} (compile {t['settings'].get('compile') or 'off'}, input "
                  f"{t['settings'].get('input')}; {t['long_test']['result']}; wall {t['wall_s']:.0f} s):", "",
                  "| epoch | loss | lr | top-1 % | top-5 % | train images/s | train s | eval s |", "|" + "---|" * 8]
        lines += [f"| {e['epoch']} | {e['loss']:.4f} | {e['lr']:.4g} | {e['top1']} | {e['top5']} | "
                  f"{e['train_images_per_s']:.0f} | {e['train_s']:.1f} | {e['eval_s']:.2f} |" for e in t["epochs_run"]]
    for k, v in results.get("derived", {}).items():
        lines.append(f"- {k}: {v}")
    return "\n".join(lines) + "\n"


INPUT_FLAGS = {"--input", "--jpeg-decoder", "--input-lanes",
               "--hw-decoder-load", "--prefetch", "--fetch-ahead"}


def _without_input(opts):
    """A variant's options (flag-value pairs) less those of its input path."""
    return [x for flag, value in zip(opts[::2], opts[1::2]) if flag not in INPUT_FLAGS for x in (flag, value)]


def against_synthetic(results):
    """Every run's images/s, step CV and median timed step, and each real-data run over the mean
    of the synthetic runs of the same call with the same GPUs, precision and other options."""
    ok = [v for v in results["variants"] if v.get("status") == "ok" and v.get("concurrent", 1) == 1]
    if not ok:
        return []
    lines = ["", "| variant | input | images/s | step CV | median step ms | real / synthetic |", "|" + "---|" * 6]
    for v in ok:
        timed = v["step_wall_s"][results["warmup_steps"]:]
        syn = [w["images_per_s"] for w in ok if w["data"] == "synthetic" and w["gpus"] == v["gpus"]
               and w["precision"] == v["precision"] and _without_input(w["opts"]) == _without_input(v["opts"])]
        ratio = (f"{v['images_per_s'] / statistics.fmean(syn):.1%} (of {', '.join(f'{x:.0f}' for x in syn)})"
                 if v["data"] != "synthetic" and syn else "-")
        lines.append(f"| {v['name']} | {(v.get('settings') or {}).get('input', '-') if v['data'] != 'synthetic' else '-'} | "
                     f"{v['images_per_s']:.0f} | {v['step_cv']:.1%} | {1e3 * statistics.median(timed):.1f} | {ratio} |")
    return lines


def derive(results):
    by = {v["name"]: v for v in results["variants"] if v.get("status") == "ok"}
    d = {}
    for a, b in (("real_bf16_gpudecode_compile", "syn_bf16_cl_compile"),
                 ("real_bf16_cpudecode_compile", "syn_bf16_cl_compile")):
        if a in by and b in by:
            d[f"{a} / {b}"] = f"{by[a]['images_per_s'] / by[b]['images_per_s']:.1%}"
    if "real_bf16_gpudecode_compile" in by and "real_bf16_gpudecode_eager" in by:
        x, y = by["real_bf16_gpudecode_compile"]["losses"][:5], by["real_bf16_gpudecode_eager"]["losses"][:5]
        d["compiled vs eager, same real batches, first 5 losses max rel diff"] = \
            f"{max(abs(p - q) / abs(q) for p, q in zip(x, y)):.2e}"
    for name, v in by.items():
        alone = by.get(name.split("_x")[0]) if v.get("concurrent", 1) > 1 else None
        if alone:
            d[f"{name}: each GPU side by side vs {alone['name']} alone"] = \
                (f"{v['per_gpu'] / alone['images_per_s']:.1%} ({', '.join(f'{x:.0f}' for x in v['each'])}; "
                 f"timed windows overlapping {v['timed_overlap']:.0%})")
        if v["data"].startswith("real"):
            d[f"{name}: loss falls"] = v["loss_falls"]
        if v["gpus"] > 1 and v.get("concurrent", 1) == 1:
            # the 1-GPU run of the same mode: the name up to "__" (or "_bucket"), 1gpu for Ngpu
            base = name.split("__")[0].replace(f"_{v['gpus']}gpu", "_1gpu").split("_bucket")[0]
            one = by.get(base) or by.get(base.replace("_cudagraphs", "_compile"))
            if one:
                d[f"{name}: scaling efficiency vs {one['name']}"] = \
                    f"{v['images_per_s'] / (v['gpus'] * one['images_per_s']):.1%}"
    return d


# ---------------------------------------------------------------- main


def _smi(*args, tool="nvidia-smi"):
    try:
        return subprocess.run([tool, *args], capture_output=True, text=True, timeout=60).stdout.strip()
    except OSError:
        return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", choices=sorted(PLANS), default="h100")
    ap.add_argument("--gpus", type=int, default=2, help="GPUs of the multi-GPU runs (plans scaling, ddp, ddp2, ddp3)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "pytorch_gpu"))
    ap.add_argument("--work", default=str(REPO / "benchmarks" / "out" / "gpu-work"))
    ap.add_argument("--budget-s", type=float, default=560, help="stop starting new work after this")
    ap.add_argument("--only", default="", help="comma-separated variant/part names")
    ap.add_argument("--classes", type=int, default=32)
    ap.add_argument("--per-class", type=int, default=128)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--batch", type=int, default=256, help="per GPU")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--warmup", type=int, default=WARMUP)
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--part", choices=sorted(PARTS), help=argparse.SUPPRESS)
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    os.environ.update(SAFE_ENV)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(work / "inductor-cache"))
    if a.part:
        (work / f"part_{a.part}.json").write_text(json.dumps(PARTS[a.part](a, work)))
        return
    start = time.perf_counter()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    only = set(filter(None, a.only.split(",")))
    results = {"plan": a.plan, "date": time.strftime("%Y-%m-%d %H:%M %Z"), "budget_s": a.budget_s,
               "warmup_steps": a.warmup, "timed_steps": a.steps, "batch_per_gpu": a.batch, "image_size": a.image_size, "cpus": os.cpu_count(), "variants": []}
    results["nvidia_smi"] = _smi("--query-gpu=name,memory.total,clocks.max.sm,power.limit,driver_version",
                                 "--format=csv,noheader").splitlines()
    results["gpu"] = results["nvidia_smi"][0].split(",")[0] if results["nvidia_smi"] else "no GPU"
    results["topology"] = _smi("topo", "-m")
    # which of the cores DALI's threads and the training thread share are one physical core's
    results["cpu_topology"] = _smi("--extended=CPU,CORE,SOCKET,NODE", tool="lscpu")

    def left():
        return a.budget_s - (time.perf_counter() - start)

    def save():
        results["elapsed_s"] = time.perf_counter() - start
        results["derived"] = derive(results)
        (out / "results.json").write_text(json.dumps(results, indent=1))
        (out / "results.md").write_text(report(results))

    t = time.perf_counter()
    results["data"] = part_data(a, work)
    print(f"data: {results['data']} ({time.perf_counter() - t:.0f} s)", flush=True)
    items = [("part", "ceilings"), ("part", "loaders")] + PLANS[a.plan](a.gpus)
    for kind, v in items:
        name = v if kind == "part" else (kind if kind in ("check", "allreduce") else v["name"])
        if only and name not in only:
            continue
        est = {"ceilings": 20, "loaders": 80, "check": 60, "allreduce": 30}.get(name, v["est_s"] if isinstance(v, dict) else 60)
        if left() < est:
            skipped = {"status": "skipped", "reason": f"time budget: {left():.0f} s left, about {est} s needed"}
            if kind == "variant":
                results["variants"].append({**v, **skipped})
            else:
                results[name] = skipped
            print(f"{name}: skipped", flush=True)
            continue
        try:
            if kind == "variant":
                r = run_variant(v, work, a, timeout=max(30, left() + 30))
                results["variants"].append(r)
                print(f"{name}: {r['status']} {r.get('images_per_s', 0):.0f} images/s ({r['wall_s']:.0f} s)", flush=True)
            elif kind == "long_test":
                r = run_long_test(v, work, a, timeout=max(30, left() + 30))
                results.setdefault("long_tests", []).append(r)
                print(f"{name}: {r['status']} ({r['wall_s']:.0f} s)", flush=True)
            elif kind == "allreduce":
                results[name] = run_allreduce(a, work, timeout=max(30, left() + 30))
                print(f"allreduce: {results[name]}", flush=True)
            else:
                results[name] = run_part(name, a, work, timeout=max(30, left() + 30))
                print(f"{name}: {results[name]['status']} ({results[name]['wall_s']:.0f} s)", flush=True)
        except subprocess.TimeoutExpired:
            r = {"status": "timeout", "reason": "ran past the time budget"}
            if kind == "variant":
                results["variants"].append({**v, **r})
            else:
                results[name] = r
            print(f"{name}: timeout", flush=True)
        save()
    save()
    print(report(results))


if __name__ == "__main__":
    main()
