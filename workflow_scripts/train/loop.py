"""The one timed loop of the three trainers, and the run around it (main).

A trainer supplies an Adapter: its framework's model, optimizer, step, input, all-reduce,
digest and save; everything else is here and in harness, the same for TensorFlow, MXNet and
PyTorch.

What images/s means (docs/training.md, "What images/s means")
-------------------------------------------------------------
images/s = global images of the timed steps / the sum of their wall times, on rank 0. A step's
wall time runs from the moment the loop last read a loss (or restarted the clock) to the moment
it reads this step's loss on the host. Reading the loss is where every framework waits for the
device: TensorFlow's tensor to float, MXNet's asscalar, PyTorch's CUDA event (the loss was
copied out behind the step's kernels). So one timed step contains: taking its batch from the
input (input_wait_s), launching the forward and backward passes, the gradient all-reduce and
the optimizer update, the loss's all-reduce over the ranks, and the wait for all of it on the
device. Outside every timed step: the warm-up steps; the weight digest after the first step;
a garbage collection (then frozen) after the first and after the last warm-up step. The clock
restarts after each of these with no step queued, so the first timed step starts from an idle
device, as the first warm-up step did.

Where the frameworks differ, as capabilities of their adapters:
  fetch_ahead  the next batch is taken while the device still runs this step (after the lagged
               loss read, so one step is queued meanwhile), so the device does not idle while the
               host waits for the input; its wait is still counted, in the step in which it
               happened. PyTorch on CUDA (--fetch-ahead). TensorFlow's and
               MXNet's input pipelines already hand over batches prepared in their own threads
               (tf.data prefetch, ImageRecordIter's prefetch buffer), and their steps are calls
               whose return the loop cannot separate from the device work they queue.
  loss_lag     1: a step's loss is read after the next step is queued, so the device has work
               while the host reads, logs and launches. Each logged step still spans one loss
               read to the next, and the steps after which the clock restarts (and the last) are
               read at once (nothing queued past them). PyTorch on CUDA, except on the inputs
               that pytorch_options.LOSS_AT_STEP_END names on a rank of fewer than LAG_MIN_CPUS
               CPUs (docs/decisions.md#loss_lag).
               Not TensorFlow or MXNet: they read each step's loss before the next, as their own
               benchmarks' loops do (tf_cnn_benchmarks' session run fetches the loss every step,
               MXNet's Module.fit reads a metric every batch: docs/decisions.md#loss_lag).
  drain_input  at the end of the warm-up, before the clock restarts, the batches the input has
               queued are taken and dropped until one has to be waited for: the timed steps then
               start with its queue empty and time what the input delivers beside the step, not
               batches it prepared during the warm-up, which hid a slow input from a short check
               (docs/decisions.md#drain_input). PyTorch on CUDA with input dali or gpu. Not
               TensorFlow or MXNet, whose prefetch the loop does not see.
  device_s     the step's time on the device, from an event before its first kernel to one
               after its loss copy: PyTorch on CUDA only; the other two have no such event
               outside their profilers.
Without a GPU PyTorch's capabilities are off by default, so all three time the same interval.

The long test (mode accuracy, long_test.LongTest) counts everything, warm-up included: it takes
the steps from here (launched and read at once) and times epochs itself.
"""

import gc
import importlib
import sys
import time

from ..cluster.rank_env import setup_horovod
from ..common.errors import StageError
from . import checkpoint, harness, long_test, thread_cpu

# drain_input: a take that lasts longer than this waited for the input (a queued batch is handed
# over in well under a millisecond); at most DRAIN_MAX batches are dropped.
DRAIN_WAIT_S = 0.002
DRAIN_MAX = 256


class Adapter:
    """What a framework supplies. main calls, in this order: add_args, versions, gpus, start,
    build_input, build_model; then per step next_batch and launch (digest after the first);
    long_test_parts for mode accuracy; close, digest, save, summary, finish. Those that raise
    NotImplementedError here must be supplied; the others do nothing unless overridden."""

    framework = ""  # the summary's name: tensorflow | mxnet | pytorch
    name = ""  # as messages name it: TensorFlow
    description = ""  # --help's first line
    fetch_ahead = False  # capabilities (module docstring); set in start() where they depend on the device
    loss_lag = 0
    drain_input = False

    def add_args(self, ap):
        return ap

    def versions(self):
        """{package: version} for the summary."""
        raise NotImplementedError

    def gpus(self, run):
        """(GPUs the framework sees on this node, whether it was built with CUDA, (all-reduce on
        the GPU possible, what is missing) or None for one process): harness.check_gpus's facts."""
        raise NotImplementedError

    def start(self, run):
        """Distributed start-up, the rank's device (and its first kernel: run.check_kernel), seeds."""

    def build_input(self, run, classes, manifest):
        """The train input (synthetic when manifest is None) and run.record_threads."""

    def build_model(self, run, classes):
        """Model and optimizer. The last BatchNorm of each residual block starts at zero gamma
        (Goyal et al.; torchvision's zero_init_residual): every block starts as identity, which
        keeps the first steps from scratch stable."""

    def next_batch(self):
        raise NotImplementedError

    def launch(self, batch, step):
        """Queue one step on `batch` (which must live until the step has run); -> a callable that
        waits for the step and returns (its loss, mean over the ranks, as a float; its device
        seconds or None)."""
        raise NotImplementedError

    def digest(self):
        """sha256 of the weights (harness.weights_digest)."""
        raise NotImplementedError

    def long_test_parts(self, run, classes):
        """(set_lr(lr), evaluate() -> (records, labels, top-5), allreduce_sum(int array)): LongTest's."""
        raise NotImplementedError

    def save_state(self, directory):
        """Mode accuracy with a checkpoint directory, rank 0: the model's, optimizer's and loss
        scale's state into `directory` (an empty directory of its own)."""
        raise NotImplementedError

    def load_state(self, directory):
        """Every rank: the state save_state wrote, into the model and optimizer just built."""
        raise NotImplementedError

    def close(self):
        """The input's end (its threads and workers)."""

    def save(self, out):
        """The final weights, into the run directory (rank 0 only)."""
        raise NotImplementedError

    def summary(self, run):
        """The framework's own summary keys."""
        return {}

    def figures(self, run):
        """The framework's own per-run figures, {name: number or None} (e.g. its peak device memory):
        each becomes a column of the training tables' per-run rows (results/runs.py) with nothing
        else changed; a name must not be one of those rows' own columns."""
        return {}

    def math(self, run):
        """(fp16's 16-bit type as it ran, which operations TF32 covers in fp32): harness.math_record's."""
        raise NotImplementedError

    def finish(self, run):
        """After the summary: distributed shut-down."""


class HorovodAdapter(Adapter):
    """What TensorFlow's and MXNet's adapters share: Horovod (its module, version, NCCL, start-up)."""

    package = None  # the framework's module: tf, mx

    def versions(self):
        import horovod

        self.hvd = importlib.import_module(f"horovod.{self.framework}")
        return {self.framework: self.package.__version__, "horovod": horovod.__version__}

    def nccl(self, run):
        """harness.check_gpus's last fact."""
        if run.launch.world_size == 1:
            return None
        return self.hvd.nccl_built(), "Horovod was built without NCCL (HOROVOD_GPU_OPERATIONS=NCCL)"

    def start(self, run):
        setup_horovod(run.launch, mpi_built=self.hvd.mpi_built)
        self.hvd.init()


def check_gpus(launch, args, name, seen, cuda_build, nccl):
    """No silent CPU fallback: a run of a system that requests GPUs stops here, naming the
    interpreter, the config key that chose it and the fix (harness.gpu_problem)."""
    if not args.require_gpu:
        return
    key = args.env_key or "envs_gpu"
    problem = harness.gpu_problem(launch, f"{name} in {sys.executable} (config {key})", key, seen, cuda_build, nccl)
    if problem:
        raise StageError(f"{problem[0]}. Fix: {problem[1]}")


class Loop:
    def __init__(self, run, adapter):
        self.run, self.adapter = run, adapter
        self.waits = []  # seconds spent taking batches from the input, per batch taken
        self.counted = 0  # of them, those already logged with a step
        self.ahead = [] if adapter.fetch_ahead else None
        self.cpu_marks = [None, None]  # thread_cpu snapshots at the timed steps' start and end
        self.drained = None  # batches dropped by drain_input

    def fetch(self):
        t = time.perf_counter()
        batch = self.adapter.next_batch()
        self.waits.append(time.perf_counter() - t)
        return batch

    def launch(self, step):
        """Queues one step on the batch taken ahead, or on one taken now; -> (its read(); its batch,
        kept alive until the step is read)."""
        batch = self.ahead.pop() if self.ahead else self.fetch()
        return self.adapter.launch(batch, step), batch

    def take_ahead(self):
        """With fetch_ahead, the next step's batch, taken while the device runs the step just
        queued. It is taken after the lagged loss read, so that one step is queued while the input
        works whatever the lag: two queued made DALI's batches wait behind both
        (docs/decisions.md#loss_lag)."""
        if self.ahead is not None:
            self.ahead.append(self.fetch())

    def end(self, queued):
        """Reads a queued step's loss and logs it with the input waits since the last logged step."""
        loss, device_s = queued[0]()
        wait, self.counted = sum(self.waits[self.counted :]), len(self.waits)
        self.run.log.end(loss, input_wait_s=wait, device_s=device_s)

    def short_test(self, train_images):
        """Mode steps or epochs: warm-up, then the timed steps (module docstring)."""
        run, warmup = self.run, self.run.args.warmup_steps
        steps = run.total_steps(train_images)
        behind = None
        run.log.start()
        for step in range(steps):
            queued = self.launch(step)
            if behind is not None:
                self.end(behind)
            if step < steps - 1:
                self.take_ahead()
            behind = queued
            if self.adapter.loss_lag and step not in (0, warmup - 1, steps - 1):
                continue
            self.end(behind)  # caught up: nothing is queued past this step
            behind = None
            if step == 0:
                run.record_digest("after_step_1", self.adapter.digest())
            if step in (0, warmup - 1):
                # Start-up (tracing, compilation) leaves many live objects: frozen, later collections
                # skip them rather than rescanning them during timed steps.
                gc.collect()
                gc.freeze()
                if step == warmup - 1:  # before the clock restarts: outside the timed steps
                    self.drain()
                    self.cpu_marks[0] = thread_cpu.snapshot()
                run.log.start()
        self.cpu_marks[1] = thread_cpu.snapshot()
        return {}

    def drain(self):
        """drain_input (module docstring): drops the batch taken ahead and the input's queued ones
        until a take waits; the last one is dropped too, so the first timed step takes its own."""
        if not self.adapter.drain_input:
            return
        if self.ahead:
            self.ahead.clear()
        self.drained = 0
        while self.drained < DRAIN_MAX:
            t = time.perf_counter()
            self.adapter.next_batch()
            self.drained += 1
            if time.perf_counter() - t > DRAIN_WAIT_S:
                break

    def train_step(self, step):
        """One step launched and read at once: the long test's, which logs it itself."""
        return self.launch(step)[0]()[0]

    def long_test(self, classes):
        parts = self.adapter.long_test_parts(self.run, classes)
        return long_test.LongTest(self.run).run_epochs(
            self.train_step, *parts, self.adapter.digest, self.adapter.save_state, self.adapter.load_state
        )

    def summary(self):
        return {
            "fetch_ahead": self.ahead is not None,
            "loss_lag": self.adapter.loss_lag,
            "drained_batches": self.drained,
            # the waits logged with the timed steps, each inside its step's wall time: at most the
            # time timed
            "input_wait_s_timed": sum(s.get("input_wait_s", 0.0) for s in self.run.log.steps if s["phase"] == "timed"),
            # the process's threads' CPU use over the timed steps (None: mode accuracy, no /proc)
            "timed_cpu": thread_cpu.cores(*self.cpu_marks),
        }


def main(adapter):
    """A trainer's whole run: the same steps in the same order for every framework."""
    args = adapter.add_args(harness.arg_parser(adapter.description)).parse_args()
    harness.apply_fp32_math(args)
    run = harness.Run(args, adapter.framework, adapter.versions())
    check_gpus(run.launch, args, adapter.name, *adapter.gpus(run))
    adapter.start(run)
    manifest = harness.read_manifest(args.data) if args.data_source == "real" else None
    classes = harness.classes_of(args.data) if manifest else args.classes or 1000
    train_images = manifest["splits"]["train"]["images"] if manifest else 0
    adapter.build_input(run, classes, manifest)
    adapter.build_model(run, classes)
    loop = Loop(run, adapter)
    extra = loop.long_test(classes) if args.mode == "accuracy" else loop.short_test(train_images)
    adapter.close()
    run.record_digest("final", adapter.digest())
    if run.launch.rank == 0:
        adapter.save(run.dir)
    math = harness.math_record(args, run.first_kernel, *adapter.math(run))
    run.finish(
        {
            "classes": classes,
            "train_images": train_images,
            "data_encoding": manifest.get("encoding") if manifest else None,
            "math": math,
            **loop.summary(),
            **adapter.summary(run),
            "figures": adapter.figures(run),
            **extra,
        }
    )
    if args.mode == "accuracy" and args.checkpoint_dir and run.launch.rank == 0:
        # The run has its summary: a later run of the same arguments starts from epoch 1.
        checkpoint.Checkpoint(args.checkpoint_dir, None).remove()
    adapter.finish(run)
