"""The two inference engines behind one interface: build an engine file from an ONNX model,
then open it to run batches (`run`) or time them (`time_runs`).

  onnxruntime  CPU. Building applies ONNX Runtime's graph optimisations once, offline, and saves
               the optimised graph: in the INT8 model the Q/DQ pairs become integer kernels
               (QLinearConv, QLinearAdd, QGemm); the FP32 model gets its fused float kernels. Like a
               TensorRT plan, the file is specific to the machine type it was built on.
  tensorrt     one GPU (tensorrt_engine.py): a serialized TensorRT plan.
"""

import os
import platform
import socket
import time

import numpy as np

from ..common.timing import timed_runs, warm_up
from . import tensorrt_engine

ENGINES = ("onnxruntime", "tensorrt")


def _session_options(threads, optimize):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    return so


def host_name():
    """The node as SLURM names it (the name the pipeline's other records use), else the host name."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def build(engine, onnx_path, out_path, threads=1, max_batch=256, workspace_mb=4096):
    """Write the engine file; returns what to record about it, with the device and node it was
    built on (built_on), against which a TensorRT job checks its own GPU before it loads it."""
    if engine == "tensorrt":
        info = tensorrt_engine.build(onnx_path, out_path, max_batch, workspace_mb)
        info["built_on"]["host"] = host_name()
        return info
    import onnx
    import onnxruntime as ort

    so = _session_options(threads, optimize=True)
    so.optimized_model_filepath = str(out_path)
    start = time.perf_counter()
    ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])
    ops = {}
    for node in onnx.load(str(out_path)).graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    return {
        "onnxruntime": ort.__version__,
        "optimization": "ORT_ENABLE_ALL",
        "ops": dict(sorted(ops.items())),
        "built_on": {"device": cpu_name(), "host": host_name()},
        "build_s": time.perf_counter() - start,
    }


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            return next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


class OnnxRuntimeRunner:
    timing = "host perf_counter"  # how time_runs measures, for the throughput record

    def __init__(self, path, threads):
        import onnxruntime as ort

        self.ort = ort
        # The engine file is already optimised: loading it as it is keeps the graph that was built.
        self.session = ort.InferenceSession(
            str(path), _session_options(threads, optimize=False), providers=["CPUExecutionProvider"]
        )
        self.input = self.session.get_inputs()[0].name
        self.output = self.session.get_outputs()[0].name
        self.classes = self.session.get_outputs()[0].shape[1]
        self.device = f"{cpu_name()}, {threads} threads"

    def run(self, x):
        return self.session.run([self.output], {self.input: np.ascontiguousarray(x, dtype=np.float32)})[0]

    def time_runs(self, x, warmup, repeats, warmup_s=0.0, duration_s=0.0):
        """Seconds per run on the host clock around each run (the CPU does the work, so the
        call's return is the run's end), the batch bound once as the session's input (already in
        memory; no copy or conversion inside the timing); warm-up and timed runs by count and, where
        given, by duration (timing.warm_up, timing.timed_runs)."""
        binding = self.session.io_binding()
        binding.bind_ortvalue_input(
            self.input, self.ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(x, np.float32))
        )
        binding.bind_output(self.output)
        done, warm_s, run_s = warm_up(lambda: self.session.run_with_iobinding(binding), lambda: None, warmup, warmup_s)
        times = []
        for _ in range(timed_runs(repeats, duration_s, run_s)):
            start = time.perf_counter()
            self.session.run_with_iobinding(binding)
            times.append(time.perf_counter() - start)
        self.last = {"warmup_runs": done, "warmup_s": warm_s, "timed_runs": len(times), "timed_s": sum(times)}
        return times

    def close(self):
        pass


def add_engine_args(ap):
    """What an engine job runs: which engine and file, which precision of which network."""
    ap.add_argument("--engine", choices=ENGINES, required=True)
    ap.add_argument("--engine-file", required=True)
    ap.add_argument("--precision", choices=("fp32", "int8"), required=True)
    ap.add_argument("--network", required=True)


def open_engine(engine, path, threads=1):
    if engine == "tensorrt":
        return tensorrt_engine.Runner(path, host_name())
    return OnnxRuntimeRunner(path, threads)
