"""INT8 calibration: per-tensor ranges of an FP32 ONNX model over the calibration images, with
ONNX Runtime's calibrators (the study used TensorRT's implicit calibrator, which TensorRT 11
removed; the ranges here become an explicitly quantized Q/DQ model in quantize.py).

Methods:
  entropy     the KL-divergence threshold of TensorRT's entropy calibrator ("8-bit Inference
              with TensorRT", the study's ref. 25): per tensor, the clipping threshold whose
              8-bit histogram loses least information; histogram_bins sets its resolution
  percentile  clip at the given percentile of |x|
  minmax      the observed minimum and maximum
ONNX Runtime keeps every intermediate output of a collection pass in memory (ResNet-18 over
1,250 images at 224 needed 22.7 GB), so images are fed in passes of `chunk` batches; histograms
and ranges are merged across passes, which gives the same result as one pass.

Output: ONNX Runtime's calibration cache (JSON: per tensor lowest/highest, and the histogram for
entropy/percentile), which quantize.py turns into the Q/DQ model.
"""

import argparse
import math
import tempfile
import time
from pathlib import Path

import onnxruntime as ort
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod
from onnxruntime.quantization.calibrate import (
    EntropyCalibrater,
    MinMaxCalibrater,
    PercentileCalibrater,
    save_tensors_data,
)
from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

from ..cluster import cpus
from ..common import schema
from ..common.atomic import atomic_file
from ..common.errors import StageError, run_main

METHODS = {
    "entropy": CalibrationMethod.Entropy,
    "percentile": CalibrationMethod.Percentile,
    "minmax": CalibrationMethod.MinMax,
}
# Quantized levels the entropy search compares against: 8 bits over the symmetric window ORT's
# histogram spans (-t..t), i.e. 128 levels per sign as TensorRT's calibrator uses on |x|.
QUANTIZED_BINS = 256


class _Batches(CalibrationDataReader):
    def __init__(self, arrays, input_name):
        self.it = iter(arrays)
        self.input_name = input_name

    def get_next(self):
        x = next(self.it, None)
        return None if x is None else {self.input_name: x}


def calibrate(onnx_path, batch_iter, input_name, method, bins, percentile, chunk, threads):
    """TensorsData over all batches of `batch_iter`, collected `chunk` batches at a time."""
    # The tensors quantize_static would quantize: inputs and outputs of every op it knows.
    op_types = sorted(set(QLinearOpsRegistry) | set(QDQRegistry))
    with tempfile.TemporaryDirectory(prefix="dlscale-calib-") as tmp:
        augmented = str(Path(tmp) / "augmented.onnx")
        if method == "entropy":
            calibrator = EntropyCalibrater(
                Path(onnx_path), op_types, augmented, num_bins=bins, num_quantized_bins=QUANTIZED_BINS
            )
        elif method == "percentile":
            calibrator = PercentileCalibrater(
                Path(onnx_path), op_types, augmented, symmetric=True, num_bins=bins, percentile=percentile
            )
        else:
            calibrator = MinMaxCalibrater(Path(onnx_path), op_types, augmented)
        calibrator.augment_graph()
        # As ONNX Runtime's create_calibrator does (no graph optimisation, so every tensor keeps
        # its name), but on this job's threads.
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.intra_op_num_threads = threads
        calibrator.infer_session = ort.InferenceSession(augmented, so, providers=["CPUExecutionProvider"])
        passes, pending = 0, []
        for x, _, _ in batch_iter:
            pending.append(x)
            if len(pending) == chunk:
                calibrator.collect_data(_Batches(pending, input_name))
                passes, pending = passes + 1, []
        if pending:
            calibrator.collect_data(_Batches(pending, input_name))
            passes += 1
        return calibrator.compute_data(), passes


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--onnx", required=True, help="the FP32 model (export.py)")
    ap.add_argument("--images", required=True, help="calibration.tsv (split.py)")
    ap.add_argument("--lmdb", required=True, help="the data stage's LMDB directory")
    ap.add_argument("--image-size", type=int, required=True)
    ap.add_argument("--batch-size", type=int, required=True)
    schema.add_arguments(ap, "inference.calibration", ("method", "histogram_bins", "percentile", "chunk_batches"))
    cpus.add_job_threads(ap)
    ap.add_argument("--out", required=True, help="the calibration ranges (JSON)")
    a = ap.parse_args()
    a.threads = cpus.job_threads(a)
    if a.method == "entropy" and a.histogram_bins < QUANTIZED_BINS:
        raise StageError(
            f"config inference.calibration.histogram_bins = {a.histogram_bins}: entropy calibration needs at "
            f"least {QUANTIZED_BINS} bins"
        )
    # here, not at the top: val_images brings torch, which quantize.py (it imports METHODS) has no use for
    from . import val_images

    items = val_images.read_list(a.images)
    if not items:
        raise StageError(f"{a.images} lists no image")
    start = time.perf_counter()
    ranges, passes = calibrate(
        a.onnx,
        val_images.batches(a.lmdb, items, a.image_size, a.batch_size, a.threads, "calibrate"),
        "input",
        a.method,
        a.histogram_bins,
        a.percentile,
        a.chunk_batches,
        a.threads,
    )
    with atomic_file(a.out) as tmp:
        save_tensors_data(ranges, tmp)
    # Timings to the log only: equal inputs give equal outputs.
    print(
        f"calibrate: {a.method} over {len(items)} images ({math.ceil(len(items) / a.batch_size)} batches of "
        f"{a.batch_size}, {passes} passes), {len(ranges.data)} tensors, {time.perf_counter() - start:.1f} s"
    )


if __name__ == "__main__":
    run_main(main)
