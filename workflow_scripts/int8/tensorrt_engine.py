"""TensorRT engines on one GPU (the study's engine), with TensorRT 10/11's Python API and device
buffers from pycuda.

The FP32 engine is built from the FP32 ONNX model, the INT8 engine from the Q/DQ model: explicit
quantization, the only INT8 path TensorRT 11 has (the implicit calibrator the study used,
IInt8EntropyCalibrator2, was deprecated in 10.1 and removed in 11). Both networks are strongly
typed: the Q/DQ nodes fix which tensors are INT8, everything else stays FP32 (TF32 math is
switched off, so FP32 means FP32 as on the study's V100).

Nothing here imports tensorrt or pycuda until an engine is built or run, so the rest of the
stage works without them; asking for this engine where they or a GPU are missing is an error
naming the config key, never a silent switch to another engine.

A plan holds kernels chosen for the GPU model that built it: the build records that model, and an
engine is never deserialized on another one (check_built_for), whose TensorRT would refuse it or
run it with kernels tuned for the other GPU.
"""

import json
import sys
import time
from pathlib import Path

import numpy as np

from ..common.errors import StageError
from ..common.timing import timed_runs, warm_up
from . import engine_imports

KEY = "inference.engine"


def require():
    """(tensorrt, pycuda.driver) ready to use on GPU 0, or a StageError saying what is missing and the
    install command for this interpreter's CUDA build (engine_imports.fix)."""

    def missing(why):
        return StageError(
            f"config {KEY} = tensorrt, but in this environment ({sys.executable}) {why}; "
            f"{engine_imports.fix(sys.executable, engine_imports.torch_cuda())}; or set {KEY}: onnxruntime"
        )

    try:
        import tensorrt as trt
    except ImportError as exc:
        raise missing(f"the tensorrt Python package does not import ({exc})") from None
    if int(trt.__version__.split(".")[0]) < engine_imports.MIN_MAJOR:
        raise missing(
            f"TensorRT is {trt.__version__}; the engine needs >= {engine_imports.MIN_MAJOR} (name-based I/O, "
            f"execute_async_v3)"
        )
    try:
        import pycuda.driver as cuda
    except ImportError as exc:
        raise missing(f"pycuda does not import ({exc})") from None
    try:
        cuda.init()
        count = cuda.Device.count()
    except cuda.Error as exc:
        raise StageError(
            f"config {KEY} = tensorrt, but CUDA finds no usable GPU here ({exc}); set {KEY}: onnxruntime "
            f"to run on the CPU"
        )
    if count == 0:
        raise StageError(f"config {KEY} = tensorrt, but this machine has no CUDA GPU; set {KEY}: onnxruntime")
    return trt, cuda


# What stops a job whose GPU is not the engine's: both halves of the cure.
REBUILD = (
    "set gpu_type or constraint of the system config inference.system names (systems.<name>) so that every "
    "inference job lands on one GPU model; `snakemake --forcerun int8_engine` then rebuilds the engines"
)


def gpu_model(cuda, index=0):
    """The GPU a job runs on, as the build records it: name and compute capability (pycuda)."""
    dev = cuda.Device(index)
    major, minor = dev.compute_capability()
    return {"device": dev.name(), "compute_capability": f"{major}.{minor}"}


def check_built_for(engine_file, built, running):
    """Refuse to deserialize `engine_file` on another GPU model than the one that built it.
    `built` is the engine record's built_on (None in a record from before it was kept), `running`
    this job's GPU; each {"device": GPU name, "host": node}."""
    built = built or {}
    here = f"{running['device']} ({running.get('host') or 'this node'})"
    if not built.get("device"):
        raise StageError(
            f"{engine_file}: its record {engine_file}.json does not say which GPU model built it, so it cannot "
            f"be checked against this job's {here}; {REBUILD}"
        )
    if built["device"] != running["device"]:
        raise StageError(
            f"{engine_file} was built on {built['device']} ({built.get('host') or 'unknown node'}) and this job "
            f"runs on {here}: a TensorRT engine runs only on the GPU model it was built on; {REBUILD}"
        )


def profile_shapes(input_shape, max_batch):
    """(min, opt, max) of the optimisation profile: any batch from 1 to max_batch, tuned for the
    largest (the study's throughput regime)."""
    _, c, h, w = input_shape
    return (1, c, h, w), (max_batch, c, h, w), (max_batch, c, h, w)


def buffer_layout(input_shape, output_shape, batch, dtype=np.float32):
    """Shapes and bytes of the device buffers for one batch: input N x C x H x W, output N x classes."""
    item = np.dtype(dtype).itemsize
    ins = (batch, *input_shape[1:])
    outs = (batch, *output_shape[1:])
    return {
        "input": ins,
        "output": outs,
        "input_bytes": int(np.prod(ins)) * item,
        "output_bytes": int(np.prod(outs)) * item,
    }


def run_seconds(marks_ms):
    """Per-run seconds from CUDA event times in milliseconds since the first event, one event
    before the first run and one after each run (pycuda's Event.time_since)."""
    marks = np.asarray(marks_ms, dtype=np.float64)
    if marks.ndim != 1 or len(marks) < 2:
        raise ValueError(f"need an event before the first run and one after each run, got {len(marks)} events")
    runs = np.diff(marks) / 1000.0
    if marks[0] != 0 or not np.all(runs >= 0):
        raise ValueError(f"event times must start at 0 and never decrease: {marks.tolist()}")
    return runs.tolist()


def build(onnx_path, plan_path, max_batch, workspace_mb):
    """Parse the ONNX model into a strongly typed network and build a serialized engine."""
    trt, cuda = require()
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = 0
    # Required on 10.x for explicit quantization; accepted and ignored on 11.x (always strong).
    if hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED"):
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise StageError(f"TensorRT cannot parse {onnx_path}: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_mb << 20)
    if hasattr(trt.BuilderFlag, "TF32"):
        config.clear_flag(trt.BuilderFlag.TF32)
    inp = network.get_input(0)
    profile = builder.create_optimization_profile()
    profile.set_shape(inp.name, *profile_shapes(tuple(inp.shape), max_batch))
    config.add_optimization_profile(profile)
    start = time.perf_counter()
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise StageError(f"TensorRT could not build an engine from {onnx_path} (see the log above)")
    Path(plan_path).write_bytes(bytes(plan))
    return {
        "tensorrt": trt.__version__,
        "strongly_typed": True,
        "max_batch": max_batch,
        "workspace_mb": workspace_mb,
        # The builder times its kernels on GPU 0, the one Runner runs on.
        "built_on": gpu_model(cuda),
        "build_s": time.perf_counter() - start,
    }


class Runner:
    """A deserialized engine with one execution context, a CUDA stream and device buffers
    sized for the largest batch seen so far."""

    timing = "cuda-events"  # how time_runs measures, for the throughput record

    def __init__(self, plan_path, host="", info_path=None):
        trt, cuda = require()
        self.trt, self.cuda = trt, cuda
        running = {**gpu_model(cuda), "host": host}
        # engine.py writes the build's record beside the plan (rule int8_engine: <plan>.json).
        info_path = Path(info_path or f"{plan_path}.json")
        try:
            built = json.loads(info_path.read_text()).get("built_on")
        except (OSError, ValueError) as exc:
            raise StageError(f"{plan_path}: cannot read its build record {info_path} ({exc}); {REBUILD}")
        check_built_for(plan_path, built, running)
        self.context_gpu = cuda.Device(0).retain_primary_context()
        self.context_gpu.push()
        self.runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        self.engine = self.runtime.deserialize_cuda_engine(Path(plan_path).read_bytes())
        if self.engine is None:
            raise StageError(
                f"{plan_path} is not a TensorRT engine of this TensorRT version ({trt.__version__}) and GPU "
                f"({running['device']}): `snakemake --forcerun int8_engine` rebuilds it"
            )
        self.context = self.engine.create_execution_context()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.input = next(n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT)
        self.output = next(n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT)
        self.input_shape = tuple(self.engine.get_tensor_shape(self.input))
        self.max_batch = self.engine.get_tensor_profile_shape(self.input, 0)[2][0]
        self.stream = cuda.Stream()
        self.capacity = 0
        self.device = running["device"]

    @property
    def classes(self):
        return self.engine.get_tensor_shape(self.output)[1]

    def _bind(self, batch):
        if batch > self.max_batch:
            raise StageError(
                f"batch {batch} exceeds the engine's profile (max {self.max_batch}): raise inference.tensorrt.max_batch"
            )
        self.context.set_input_shape(self.input, (batch, *self.input_shape[1:]))
        out_shape = tuple(self.context.get_tensor_shape(self.output))
        layout = buffer_layout(self.input_shape, out_shape, batch)
        if batch > self.capacity:  # grow once; smaller batches reuse the buffers
            self.d_input = self.cuda.mem_alloc(layout["input_bytes"])
            self.d_output = self.cuda.mem_alloc(layout["output_bytes"])
            self.capacity = batch
        self.h_output = self.cuda.pagelocked_empty(layout["output"], np.float32)
        self.context.set_tensor_address(self.input, int(self.d_input))
        self.context.set_tensor_address(self.output, int(self.d_output))

    def _execute(self):
        if not self.context.execute_async_v3(self.stream.handle):
            raise StageError("TensorRT execute_async_v3 failed (see the log above)")

    def run(self, x):
        """Logits of a host batch: copy in, run, copy out."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        self._bind(len(x))
        self.cuda.memcpy_htod_async(self.d_input, x, self.stream)
        self._execute()
        self.cuda.memcpy_dtoh_async(self.h_output, self.d_output, self.stream)
        self.stream.synchronize()
        return np.array(self.h_output)

    def time_runs(self, x, warmup, repeats, warmup_s=0.0, duration_s=0.0):
        """Seconds per run with the batch already on the GPU (copied once, outside the timing),
        timed as trtexec does: CUDA events recorded on the stream between back-to-back enqueues,
        no host synchronisation until the last run is queued. Run i's interval runs from the
        event recorded before its enqueue to the one after it (the next run's start), so the
        intervals tile the whole span: the engine's GPU work for that run plus any time the GPU
        waited for the host to queue it, never a host sync's wake-up or Python's call overhead
        after the GPU finished. Warm-up and timing also go by duration, as trtexec's do (warm_up,
        timed_runs): a few runs alone can time a GPU whose clocks are still rising. `last` records
        what was run."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        self._bind(len(x))
        self.cuda.memcpy_htod(self.d_input, x)
        done, warm_s, run_s = warm_up(self._execute, self.stream.synchronize, warmup, warmup_s)
        repeats = timed_runs(repeats, duration_s, run_s)
        marks = [self.cuda.Event() for _ in range(repeats + 1)]
        marks[0].record(self.stream)
        for mark in marks[1:]:
            self._execute()
            mark.record(self.stream)
        marks[-1].synchronize()
        times = run_seconds([m.time_since(marks[0]) for m in marks])
        self.last = {"warmup_runs": done, "warmup_s": warm_s, "timed_runs": len(times), "timed_s": sum(times)}
        return times

    def close(self):
        self.context_gpu.pop()
