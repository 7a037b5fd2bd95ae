"""What the three trainers share: their command line, the run directory, the step log and summary,
telemetry, the per-rank weight digests and the run's provenance. The scale-out whitepaper's long
test (mode accuracy) is long_test.py.

A run directory holds:
  steps.jsonl              rank 0's per-iteration log (global images per step)
  epochs.jsonl             mode accuracy: rank 0's per-epoch records (LongTest)
  predictions/             mode accuracy: epoch<E>.rank<r>.tsv.gz, each rank's top-5 of every val
                           image it scored at epoch E (record, label, top5)
  rank<r>.json             per rank: host, launch, its CPUs and thread counts (cluster.cpus), its GPU
                           and how it was chosen (cluster.gpu_choice), weight digest after the first
                           step and at the end; in a container, the launcher's variables as it saw
                           them (cluster.container_env)
  .gpu_choice/             the ranks' CPU sets, exchanged per node to pair each with its nearest GPU
  telemetry.<node>.csv     one time series per node (written by local rank 0)
  cache.<node>.json        the page-cache report of that node (written before training)
  provenance.<node>.json   that node's CPU, memory, GPUs, driver, CUDA, GPU topology (local rank 0)
  summary.json             images/s and variation (metrics.summarize), config, versions, cache,
                           the gradients one step all-reduces
  weights.*                the final weights (framework format)
"""

import argparse
import hashlib
import json
import math
import os
import platform
import socket
import sys
import time
from pathlib import Path

from ..cluster import comm_env, container_env, cpus, gpu_choice, gpu_identity, kernel_check, netif, provenance
from ..cluster.rank_env import detect
from ..cluster.telemetry import Telemetry
from ..common import metrics
from ..common.atomic import write_json
from ..common.errors import PermanentError, StageError
from ..data import verify
from . import trainer_flags, watchdog


def arg_parser(description):
    """The trainer's command line: the run's own flags (its data, precision, batch and run
    directory), the config keys of trainer_flags, each made from its schema entry, and the long
    test's checkpoints."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--data", default="", help="the data stage's output directory for this framework")
    ap.add_argument("--data-source", choices=("real", "synthetic"), default="real")
    ap.add_argument("--precision", choices=("fp32", "fp16"), default="fp32")
    ap.add_argument("--batch-per-gpu", type=int, required=True, help="per rank (per GPU, or per CPU process)")
    ap.add_argument("--classes", type=int, default=0, help="synthetic data: number of classes (default 1000)")
    long_test = trainer_flags.add_arguments(ap)
    long_test.add_argument(
        "--checkpoint-dir",
        default="",
        help="write the model's and optimizer's state here after every epoch, and resume from it "
        "(a later job of the same run: train/checkpoint.py); empty: no checkpoints",
    )
    ap.add_argument(
        "--require-gpu",
        action="store_true",
        help="the run's system requests GPUs: fail before training unless every task has one "
        "(and, with several, the GPU all-reduce: NCCL)",
    )
    ap.add_argument(
        "--env-key",
        default="",
        help="the config key that chose this interpreter (named in the messages), e.g. envs_gpu.tensorflow",
    )
    ap.add_argument("--out", required=True, help="run directory")
    return ap


def gpu_problem(launch, where, key, seen, cuda_build, nccl):
    """(cause, fix) when a framework cannot use a GPU per task of a system that requests GPUs, or
    (with several tasks) cannot all-reduce on them; None when it can. Shared by the trainers'
    check (loop.check_gpus) and preflight's.

    where: the framework and its interpreter, as the messages name them; key: the config key that
    chose the interpreter; seen: GPUs the framework sees on this node; cuda_build: whether it was
    built with CUDA; nccl: (ok, what is missing) for the GPU all-reduce, or None for one process."""
    setup = f"'bash envs/setup.sh --gpu' makes the GPU environments; point config {key} at one"
    if not cuda_build:
        return f"{where} is a CPU build, but the system requests GPUs: it would train on the CPU", setup
    if seen < launch.local_size:
        return (
            f"{where} sees {seen} GPU(s) on {launch.hostname} for {launch.local_size} task(s), but the system "
            f"requests GPUs (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})",
            f"check systems.<name>.gpu_request and gpu_type, and the node's driver; or {setup}",
        )
    if nccl is not None and not nccl[0]:
        return (
            f"{where}: {nccl[1]}, but the system requests GPUs: its gradients would not be all-reduced on the GPUs",
            setup,
        )
    return None


def apply_fp32_math(args):
    """Strict fp32 through NVIDIA's own switch, which cuBLAS and cuDNN read when the framework first
    uses them (after this, before any GPU work): it covers what a framework's own switch does not
    reach (MXNet has none). The frameworks' switches are set in their adapters too."""
    if args.fp32_math == "strict":
        os.environ["NVIDIA_TF32_OVERRIDE"] = "0"


def math_record(args, first_kernel, half, tf32_reach, env=None):
    """What the run's precisions ran as on its device, for the summary and the tables: fp32 is TF32
    on a GPU of compute capability 8.0 or more unless strict (or NVIDIA_TF32_OVERRIDE=0 came with the
    environment `env`, default this process's), float32 elsewhere (a CPU, a V100); half: fp16's 16-bit
    type (None in an fp32 run); tf32_reach: which of the framework's operations TF32 covers."""
    capability = tuple(first_kernel["capability"]) if first_kernel and first_kernel.get("capability") else None
    capable = capability is not None and capability >= (8, 0)
    overridden = (os.environ if env is None else env).get("NVIDIA_TF32_OVERRIDE") == "0"
    tf32 = capable and args.fp32_math == "tf32" and not overridden
    if not capable:
        how = "float32: " + ("a CPU" if first_kernel is None else f"{kernel_check.sm(capability)} has no TF32")
    elif tf32:
        how = f"TF32 ({tf32_reach})"
    else:
        how = "float32: " + ("training.fp32_math strict" if args.fp32_math == "strict" else "NVIDIA_TF32_OVERRIDE=0")
    return {
        "fp32_math": args.fp32_math,
        "fp32": "tf32" if tf32 else "float32",
        "fp32_how": how,
        "tf32_capable": capable,
        "half": half if args.precision == "fp16" else None,
        # the precision as it ran, in a table cell
        "ran_as": (f"{half} mixed" if args.precision == "fp16" else "tf32" if tf32 else "float32"),
    }


def read_manifest(data_dir):
    path = Path(data_dir) / "manifest.json"
    if not path.is_file():
        raise StageError(f"{path} is missing: {data_dir} is not an output of the data stage")
    return json.loads(path.read_text())


def classes_of(data_dir):
    """Number of classes of a data stage output (its synsets.txt)."""
    return len((Path(data_dir) / "synsets.txt").read_text().split())


def weights_digest(arrays):
    """sha256 over the model's parameters in order (numpy arrays): equal on every rank iff the
    ranks hold identical weights."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(a.tobytes())
    return h.hexdigest()


def gradients(elements, element_bytes, dtype):
    """What one step all-reduces, for the summary: the trainable parameters' gradients as the
    framework sends them. The interconnect stage predicts the step's communication from it."""
    return {
        "elements": int(elements),
        "element_bytes": int(element_bytes),
        "bytes": int(elements) * int(element_bytes),
        "dtype": str(dtype),
    }


def _every_rank(run_dir, pattern, n, wait_s):
    """The records the run's n ranks wrote to run_dir (pattern, one file each), waiting up to wait_s
    for all of them; a rank that never writes is left out."""
    deadline, seen = time.time() + wait_s, {}
    while len(seen) < n and time.time() < deadline:
        for path in Path(run_dir).glob(pattern):
            try:
                seen.setdefault(path.name, json.loads(path.read_text()))
            except (OSError, ValueError):  # being written: read next time
                pass
        if len(seen) < n:
            time.sleep(0.2)
    return list(seen.values())


def _container_record():
    """{'container_env': ...} for a rank in a container (cluster/container_env.py), {} on the host."""
    seen = container_env.record()
    return {"container_env": seen} if seen is not None else {}


class Run:
    first_kernel = None  # check_kernel's record: rank 0's first op on its GPU
    gpu_binding = None  # choose_gpu's record: this rank's GPU and how it was chosen

    def __init__(self, args, framework, versions):
        self.args, self.framework, self.versions = args, framework, versions
        self.launch = detect()
        self.dir = Path(args.out)
        self.dir.mkdir(parents=True, exist_ok=True)
        if args.data_source == "real" and not args.data:
            raise StageError("--data is required with --data-source real")
        if args.data_source == "real":  # before any reader maps a file that a damaged copy left short
            verify.require(args.data)
        if args.mode == "accuracy" and args.data_source != "real":
            raise StageError("mode accuracy needs the dataset's val split: --data-source real")
        if args.mode == "accuracy" and (args.epochs != int(args.epochs) or args.epochs < 1):
            raise StageError(
                f"mode accuracy runs whole epochs: --epochs {args.epochs} (config training.long_test.epochs)"
            )
        self.global_batch = args.batch_per_gpu * self.launch.world_size
        # The long test excludes nothing from its time, as time-to-train does: no warm-up steps.
        warmup = 0 if args.mode == "accuracy" else args.warmup_steps
        self.log = metrics.StepLog(
            self.dir / "steps.jsonl",
            warmup,
            self.global_batch,
            write=self.launch.rank == 0,
            beat=self.dir / watchdog.BEAT.format(rank=self.launch.rank),
        )
        # The watchdog's SIGUSR1 on a hang: every thread's stack into the job's log (a rank that
        # gives none did not answer: stopped, or stuck outside Python), and the rank goes on
        self._stacks = watchdog.answer_stacks(self.dir, self.launch)
        self.digests = {}
        self.cpus, self.threads = cpus.of(self.launch), {}
        self.telemetry = None
        if self.launch.local_rank == 0:
            write_json(self.dir / f"provenance.{self.node}.json", provenance.node_facts())
        if self.launch.local_rank == 0 and args.telemetry_interval > 0:
            # Synthetic runs watch the dataset's device too: it should show no reads.
            self.telemetry = Telemetry(
                self.dir / f"telemetry.{self.node}.csv", args.data or None, args.telemetry_interval
            )
            self.telemetry.start()

    def choose_gpu(self, seen):
        """This rank's GPU among the `seen` ones the framework numbers 0, 1, ...: the one next to its
        CPUs, agreed with the node's other ranks, else its local rank's (cluster/gpu_choice.py, which
        says why). Said in the log, recorded in rank<r>.json and the summary (gpu_binding);
        -> its CUDA index."""
        self.gpu_binding = gpu_choice.choose(self.launch, self.dir, seen=seen)
        print(f"rank {self.launch.rank}: {gpu_choice.describe(self.gpu_binding)}", file=sys.stderr, flush=True)
        self._write_rank()
        return self.gpu_binding["cuda_index"]

    def gpu_bindings(self):
        """Every rank's GPU and how it was chosen, from the ranks' rank<r>.json (rank 0, at the end);
        None without GPUs."""
        if self.gpu_binding is None:
            return None
        ranks = []
        for p in self.dir.glob("rank*.json"):
            try:
                r = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            if r.get("gpu"):
                ranks.append({"rank": r["rank"], "node": r["node"], **r["gpu"]})
        ranks.sort(key=lambda r: r["rank"])
        hows = sorted({r["how"] for r in ranks})
        return {
            "how": hows[0] if len(hows) == 1 else "mixed",
            "status": "warning" if any(r["status"] != "ok" for r in ranks) else "ok",
            "ranks": ranks,
        }

    def check_kernel(self, kernel, gpu, build):
        """Before training, on this task's GPU: kernel() runs one small op there and reads it back;
        a build without code for the GPU stops here with a permanent error (kernel_check). gpu:
        (name, compute capability); build: the framework's version and the CUDA it was built for.
        The summary records the kernel's time, which includes loading or JIT-compiling its code."""
        seconds = kernel_check.first_kernel(
            kernel, kernel_check.NAMES[self.framework], gpu, build, self.args.env_key, self.node
        )
        self.first_kernel = {
            "gpu": gpu[0],
            "arch": kernel_check.sm(gpu[1]),
            "capability": list(gpu[1]) if gpu[1] else None,
            "build": build,
            "seconds": seconds,
            "cuda_jit_cache": {k: os.environ.get(k) for k in ("CUDA_CACHE_PATH", "CUDA_CACHE_MAXSIZE")},
        }
        self.one_gpu_model(gpu)

    def one_gpu_model(self, gpu, wait_s=300.0):
        """Every rank's GPU model, compute capability and memory bandwidth, through the run directory:
        a run over two models for the study (a partition of V100 and A100 nodes, or A100s of 40 and
        80 GB, whose memory bandwidths differ) is refused before its first step, naming the nodes; one
        whose boards differ in memory size only (V100-SXM2 16 GB beside 32 GB) goes on, rank 0 saying
        so in the log (gpu_identity.gpu_mix). Over two compute capabilities its ranks would pick
        precision and loss scaling per GPU (float16 with scaling on a V100, bfloat16 without on an
        A100), and DDP would average scaled and unscaled gradients."""
        bus = (getattr(self, "gpu_binding", None) or {}).get("bus_id")
        mine = {
            "rank": self.launch.rank,
            "node": self.node,
            "gpu": gpu[0],
            "capability": list(gpu[1] or []),
            "memory_GBps": gpu_identity.memory_GBps(bus) if bus else None,
        }
        write_json(self.dir / f"gpu.rank{self.launch.rank}.json", mine)
        problem, warning = gpu_identity.gpu_mix(_every_rank(self.dir, "gpu.rank*.json", self.launch.world_size, wait_s))
        if problem:
            raise PermanentError(
                f"{problem}. Each rank would run at its own GPU's pace, precision and loss scaling, and the "
                "gradients averaged would mix them. Fix: give the system a gpu_type or constraint "
                "(systems.<name>.gpu_type, constraint) so that its runs get one GPU model"
            )
        if warning and self.launch.rank == 0:
            print(f"rank 0: warning: {warning}", file=sys.stderr, flush=True)

    @property
    def node(self):
        return self.launch.hostname or socket.gethostname()

    @property
    def lr(self):
        return self.args.lr * self.global_batch / 256

    def total_steps(self, train_images):
        """steps: warm-up + timed; epochs: passes over the data at the global batch (the warm-up
        steps are part of the first epoch and excluded from timing)."""
        if self.args.mode == "steps":
            return self.args.warmup_steps + self.args.steps
        if not train_images:
            raise StageError("mode epochs needs real data: a synthetic run has no epoch (use mode steps)")
        steps = math.ceil(self.args.epochs * train_images / self.global_batch)
        if steps <= self.args.warmup_steps:
            raise StageError(
                f"{self.args.epochs} epoch(s) of {train_images} images at global batch "
                f"{self.global_batch} is {steps} steps, not more than the {self.args.warmup_steps} warm-up steps"
            )
        return steps

    def record_threads(self, **counts):
        """The thread counts this rank uses (from self.cpus), for its rank<r>.json and the summary."""
        self.threads.update(counts)
        self._write_rank()

    def record_digest(self, phase, digest):
        self.digests[phase] = digest
        self._write_rank()

    def _write_rank(self):
        write_json(
            self.dir / f"rank{self.launch.rank}.json",
            {
                "rank": self.launch.rank,
                "node": self.node,
                "launch": self.launch.as_dict(),
                "cpus": self.cpus.describe(**self.threads),
                "weights_sha256": self.digests,
                "gpu": self.gpu_binding,
                **_container_record(),
            },
        )

    def finish(self, extra=None):
        if self.telemetry:
            self.telemetry.stop()
        self.log.close()
        if self.launch.rank != 0:
            return None
        caches = {p.stem.split(".", 1)[1]: json.loads(p.read_text()) for p in sorted(self.dir.glob("cache.*.json"))}
        settings = {k: v for k, v in vars(self.args).items() if k != "out"}
        summary = {
            "status": "ok",
            "framework": self.framework,
            **metrics.summarize(self.log.steps),
            # Without a warm-up step the first step's one-time start-up (tracing, kernels JIT-compiled
            # from PTX on a GPU the build has no machine code for, autotuning) is inside images_per_s.
            "first_step_timed": self.log.warmup_steps == 0,
            "global_batch": self.global_batch,
            "world_size": self.launch.world_size,
            "num_nodes": self.launch.num_nodes,
            "launch": self.launch.as_dict(),
            # config nccl_env and the launcher's interface and Horovod settings, as the ranks had them
            "nccl_env": comm_env.recorded(),
            # in a container: what the launcher set against what rank 0 saw at its start, any difference named
            **_container_record(),
            # the sockets' interface between nodes and its link speed (rank 0's node)
            "socket_interface": netif.describe(os.environ),
            "cpus": self.cpus.describe(**self.threads),  # rank 0's; each rank's in its rank<r>.json
            "args": vars(self.args),
            "lr": self.lr,
            "versions": {"python": sys.version.split()[0], "platform": platform.platform(), **self.versions},
            "page_cache": caches or {"note": "no cache report: clearing did not run before this run"},
            # steps.jsonl's t_end minus this is the time_s of rank 0's node telemetry
            "telemetry_origin_s": self.telemetry.origin if self.telemetry else None,
            # rank 0's first op on its GPU (None without one): a JIT compile of the build's PTX shows here
            "first_kernel": self.first_kernel,
            # each rank's GPU (CUDA index, PCI bus id, NUMA node, its CPUs and the GPU's) and whether
            # CPU affinity or the local rank chose it, and why (cluster/gpu_choice.py); None without GPUs
            "gpu_binding": self.gpu_bindings(),
            "provenance": {
                "nodes": {
                    p.stem.split(".", 1)[1]: json.loads(p.read_text())
                    for p in sorted(self.dir.glob("provenance.*.json"))
                },
                "code": provenance.code_version(),
                "settings_hash": provenance.settings_hash(settings),
            },
            **(extra or {}),
        }
        write_json(self.dir / "summary.json", summary)
        return summary
