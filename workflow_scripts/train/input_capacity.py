"""A framework's training input path alone: read, decode and augment to the batch tensors its
trainer's step takes, with no model and no step. How many images a second the input can hand a
rank, on the CPUs this process may run on.

    python -m workflow_scripts.train.input_capacity --framework {tensorflow,mxnet,pytorch} \\
        --data <the framework's converted copy> [--input dali|gpu|cpu] [--dali-decoder cpu|mixed] \\
        --batch-per-gpu N [--image-size N] [--threads N] [--seconds S] [--warmup-batches K] \\
        [--device cpu|gpu] [--seed N] [--out result.json]

prints the result as one JSON line (and writes it to --out); a StageError is one line on stderr,
exit 2. From Python, in the framework's environment:

    measure(framework, data, *, input="dali", decoder="cpu", batch, image_size, threads=None,
            seconds, warmup_batches, device="cpu", seed=0) -> dict

framework: tensorflow (tf.data from the TFRecord shards), mxnet (ImageRecordIter from the
RecordIO), pytorch (the LMDB through `input`: dali, gpu or cpu, pytorch_input's paths; `decoder`
is DALI's, cpu or mixed). TensorFlow and MXNet have one path each and ignore input and decoder.
device: where the trainer's rank would run, cpu or gpu (its first visible GPU); it picks the
thread rule and, for MXNet and PyTorch, where the batches land. threads: the decode threads
(TensorFlow's map calls, MXNet's preprocess threads, PyTorch's DataLoader workers or DALI
threads); None or 0: the trainer's own rule on this process's CPUs, as a rank alone on them
(cluster.cpus; the flag takes config training.decode_threads, whose 0 means the same).

The input is the trainer's own: its adapter's build_input (and next_batch) with the trainer's
argument parser's defaults, for a single process (world size 1, rank 0) that reads the whole
train split; nothing is written, no Horovod or process group starts. Each adapter's input_alone
supplies a Feed (below); everything else is here, the same for the three.

Timing: `warmup_batches` batches are taken first and not timed, raised to the batches the path
prepares ahead (`ahead`: MXNet's prefetch buffer, DALI's queue, the DataLoader workers' prefetch)
where that is larger, so the timed batches are not ones prepared while the input started. Then
batches are taken as fast as the input gives them for `seconds`: a batch's time runs from the
previous batch's arrival to its own, on the device where it lands (each ready() waits for it).

The result's keys: framework, input (the path: tf.data, ImageRecordIter, dali, gpu, cpu),
decoder (what decoded the JPEGs), device, threads (the count that ran), threads_given (false: the
trainer's rule chose it), threads_detail (the counts the trainer records in rank<r>.json), note
(where the path ran otherwise: MXNet starts fewer decode threads than asked on few CPUs), cpus
(CPUs in this process's affinity set, os.sched_getaffinity), cpu_set, physical_cores,
images_per_s (images timed / seconds timed), images_per_s_per_core (images_per_s / cpus),
batch_time_mean_s, batch_time_cv (population standard deviation / mean of the timed batches'
times), batches_timed, images_timed, seconds_timed, seconds, warmup_batches (excluded),
warmup_asked, ahead, batch, image_size, data, host, versions, path_stats (PyTorch's path's own
figures: DALI's settings, the gpu path's stage times), and what other processes used of the
node's CPUs over the timed window (cluster.neighbours, as a training run's isolation): others_cpu_s,
others_cpu_share, isolated (that share within the runs' rule, docs/training.md#isolation),
busiest_others.
"""

import argparse
import gc
import importlib
import json
import os
import shlex
import socket
import statistics
import sys
import time
from dataclasses import dataclass, field

import psutil

from ..cluster import cpus as cpu_rules
from ..cluster import neighbours
from ..cluster.affinity import core_groups
from ..cluster.rank_env import Launch
from ..common import frameworks, schema
from ..common.atomic import write_json
from ..common.errors import StageError, run_main
from ..common.schema import default as config_default
from ..data import verify
from . import harness

# framework -> (its trainer's module, its adapter class), imported only when measured: each
# framework lives in its own environment.
TRAINERS = {f.name: (f.trainer, f.title) for f in frameworks.REGISTRY.values()}
INPUTS = ("dali", "gpu", "cpu")  # PyTorch's paths (pytorch_input); its 'auto' is dali on a GPU, cpu on a CPU
DECODERS = tuple(schema.section("training.pytorch")["dali_decoder"]["enum"])
DEVICES = ("cpu", "gpu")
DALI_DECODER = config_default("training.pytorch.dali_decoder")
SEED = config_default("training.seed")


@dataclass
class Feed:
    """A trainer's train input as its adapter's input_alone builds it."""

    next_batch: object  # () -> the batch the step would take
    ready: object = lambda batch: None  # (batch) -> once the batch is complete on its device
    close: object = lambda: None
    path: str = ""
    decoder: str = ""
    threads: int = 0  # decode threads or workers used
    ahead: int = 0  # batches the path prepares ahead of the consumer (None: autotuned)
    stats: object = lambda skip: {}  # (batches to skip) -> the path's own figures
    versions: dict = field(default_factory=dict)
    note: str = ""  # where the path runs otherwise than the trainer's settings say


class InputRun:
    """What an adapter's build_input reads of harness.Run (args, launch, cpus, record_threads), for
    one process alone, with no run directory."""

    def __init__(self, args):
        self.args, self.threads = args, {}
        self.launch = Launch(hostname=socket.gethostname())
        self.cpus = cpu_rules.of(self.launch)

    def record_threads(self, **counts):
        self.threads.update(counts)


def trainer_words(framework, data, input, decoder, batch, image_size, threads, seed, trainer_args=()):
    """The trainer's command-line words for this input (its parser supplies every other default;
    trainer_args: more of its flags, e.g. PyTorch's --hw-decoder-load 1.0)."""
    words = ["--data", str(data), "--batch-per-gpu", str(batch), "--image-size", str(image_size)]
    words += ["--decode-threads", str(threads or 0), "--seed", str(seed)]
    # harness requires a run directory; none is made: only harness.Run would make it.
    words += ["--out", os.devnull]
    if framework == "pytorch":
        words += ["--input", input, "--dali-decoder", decoder]
    return words + list(trainer_args)


def take(feed, seconds, warmup, at_start=lambda: None):
    """The seconds of each timed batch, after `warmup` batches untimed: the module docstring's
    timing. at_start() runs once the warm-up is over, before the clock starts."""
    for _ in range(warmup):
        feed.ready(feed.next_batch())
    at_start()
    times = []
    start = last = time.perf_counter()
    while not times or last - start < seconds:
        feed.ready(feed.next_batch())
        now = time.perf_counter()
        times.append(now - last)
        last = now
    return times


def rates(times, batch, cpus):
    """The result's figures from the timed batches' times."""
    if not times or cpus < 1:
        raise ValueError("no timed batches, or no CPUs")
    seconds = sum(times)
    mean = statistics.fmean(times)
    images_per_s = batch * len(times) / seconds
    return {
        "images_per_s": images_per_s,
        "images_per_s_per_core": images_per_s / cpus,
        "batch_time_mean_s": mean,
        "batch_time_cv": statistics.pstdev(times) / mean if len(times) > 1 and mean > 0 else 0.0,
        "batches_timed": len(times),
        "images_timed": batch * len(times),
        "seconds_timed": seconds,
    }


def others(sample, mine, seconds, node_cpus):
    """What processes other than this one and its children (`mine`: DataLoader workers) used of
    the node's CPUs over the timed window, from cluster.neighbours' sample at its end."""
    theirs = [o for o in sample.get("others", []) if o[0] not in mine]
    used = max(0.0, sample["others_s"] - sum(o[3] for o in sample.get("others", []) if o[0] in mine))
    share = used / (seconds * node_cpus)
    return {
        "others_cpu_s": used,
        "others_cpu_share": share,
        "isolated": share <= neighbours.FOREIGN_CPU_SHARE,
        "busiest_others": [{"pid": pid, "name": name, "cpu_s": s} for pid, name, _, s in theirs[:3]],
    }


def cpu_set(cpus):
    """A CPU set as Linux's cpulist format writes it: 0-3,8."""
    ranges, ordered = [], sorted(cpus)
    for c in ordered:
        if ranges and c == ranges[-1][1] + 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def warmup_for(asked, ahead):
    """Warm-up batches: as asked, at least the batches the path prepares ahead."""
    return max(asked, ahead or 0)


def measure(
    framework,
    data,
    *,
    input="dali",
    decoder=DALI_DECODER,
    batch,
    image_size,
    threads=None,
    seconds,
    warmup_batches,
    device="cpu",
    seed=SEED,
    trainer_args=(),
):
    """One framework's input path alone, in this process: the module docstring's result dict."""
    if framework not in TRAINERS:
        raise StageError(f"framework {framework!r}: one of {', '.join(TRAINERS)}")
    if framework == "pytorch" and input not in INPUTS:
        raise StageError(f"input {input!r}: one of {', '.join(INPUTS)}")
    if decoder not in DECODERS or device not in DEVICES:
        raise StageError(f"decoder {decoder!r}, device {device!r}: one of {DECODERS} and one of {DEVICES}")
    if batch < 1 or image_size < 1 or seconds <= 0 or warmup_batches < 0 or (threads or 0) < 0:
        raise StageError(
            f"batch {batch}, image size {image_size}, seconds {seconds}, warm-up {warmup_batches}, "
            f"threads {threads}: positive (warm-up and threads may be 0)"
        )
    verify.require(data)  # as harness.Run: before a reader maps a file that a damaged copy left short
    module, name = TRAINERS[framework]
    adapter = getattr(importlib.import_module(f"{__package__}.{module}"), name)()
    words = trainer_words(framework, data, input, decoder, batch, image_size, threads, seed, trainer_args)
    run = InputRun(adapter.add_args(harness.arg_parser(adapter.description)).parse_args(words))
    feed = adapter.input_alone(run, device == "gpu")
    # Other processes' CPU time over the timed window: a figure measured beside other work measures both.
    sampler = neighbours.NodeSampler(squeue_every=None)
    try:
        warmup = warmup_for(warmup_batches, feed.ahead)
        times = take(feed, seconds, warmup, at_start=sampler.sample)
        sample = sampler.sample()
        mine = {p.pid for p in psutil.Process().children(recursive=True)}
        path_stats = feed.stats(warmup)
    finally:
        feed.close()
    allowed = os.sched_getaffinity(0)
    result = {
        "framework": framework,
        "input": feed.path,
        "decoder": feed.decoder,
        "device": device,
        "threads": feed.threads,
        "threads_given": bool(threads),
        "threads_detail": run.threads,
        "note": feed.note,
        "cpus": len(allowed),
        "cpu_set": cpu_set(allowed),
        "physical_cores": len(core_groups(allowed)),
        **rates(times, batch, len(allowed)),
        "seconds": seconds,
        "warmup_batches": warmup,
        "warmup_asked": warmup_batches,
        "ahead": feed.ahead,
        "batch": batch,
        "image_size": image_size,
        "data": str(data),
        "host": socket.gethostname(),
        **others(sample, mine, sum(times), cpu_rules.on_node() or len(allowed)),
        "versions": {"python": sys.version.split()[0], **feed.versions},
        "path_stats": path_stats,
    }
    # The path's threads, workers and buffers go before the caller measures anything else.
    del feed, adapter
    gc.collect()
    return result


def arg_parser():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--framework", choices=sorted(TRAINERS), required=True)
    ap.add_argument("--data", required=True, help="its converted copy: tfrecord, recordio or lmdb")
    ap.add_argument("--input", choices=INPUTS, default="dali", help="PyTorch's input path (the others have one)")
    schema.add_arguments(ap, "training.pytorch", ("dali_decoder",))
    ap.add_argument("--batch-per-gpu", type=int, required=True, help="images per batch, as one rank's")
    schema.add_arguments(ap, "training", ("image_size", "seed"))
    ap.add_argument(
        "--threads",
        type=int,
        default=config_default("training.decode_threads"),
        help="decode threads or workers; 0: the trainer's rule on this process's CPUs (config training.decode_threads)",
    )
    ap.add_argument("--seconds", type=float, default=10.0, help="timed seconds, after the warm-up")
    ap.add_argument(
        "--warmup-batches",
        type=int,
        default=10,
        help="batches taken before timing (at least the batches the path prepares ahead)",
    )
    ap.add_argument("--device", choices=DEVICES, default="cpu", help="where the rank would train (gpu: the first)")
    ap.add_argument(
        "--trainer-args",
        default="",
        help="more of the trainer's own flags, as one string (e.g. '--hw-decoder-load 1.0'), checked by its parser",
    )
    ap.add_argument("--out", default="", help="also write the result here (JSON)")
    return ap


def main(argv=None):
    a = arg_parser().parse_args(argv)
    result = measure(
        a.framework,
        a.data,
        input=a.input,
        decoder=a.dali_decoder,
        batch=a.batch_per_gpu,
        image_size=a.image_size,
        threads=a.threads or None,
        seconds=a.seconds,
        warmup_batches=a.warmup_batches,
        device=a.device,
        seed=a.seed,
        trainer_args=shlex.split(a.trainer_args),
    )
    if a.out:
        write_json(a.out, result)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    run_main(main)
