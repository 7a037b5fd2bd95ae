"""The explicitly quantized INT8 model: QuantizeLinear/DequantizeLinear (Q/DQ) pairs with the
calibrated scales around every quantizable op of the FP32 model, weights stored as INT8 with
per-output-channel scales (ONNX Runtime's quantize_static, QDQ format, from calibrate.py's ranges
without running calibration again).

Activations are encoded for the engine that runs the model:
  int8   symmetric, zero point 0: the only form TensorRT's explicit quantization accepts
  uint8  asymmetric: ONNX Runtime's fast U8S8 CPU kernels, and a ReLU output uses all 256 levels
Both come from the same calibrated ranges.

Biases, likewise:
  int32  quantized with scale input x weight scale behind a DequantizeLinear: ONNX Runtime folds
         them into its integer kernels
  float  left as they are: TensorRT's parser dequantizes INT8 only (an INT32 bias fails to parse)
         and folds the float bias into the INT8 layer it fuses
A model for TensorRT is checked against its explicit-quantization rules (qdq_rules.py) before it
is kept.

Also writes the calibration cache: per activation tensor the scale and zero point the model
holds, with the calibrated range they came from (what TensorRT's calibration cache held).
"""

import argparse
import collections

import numpy as np
import onnx
from onnx import numpy_helper
from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.calibrate import load_tensors_data

from ..common.atomic import atomic_file, write_json
from ..common.errors import run_main
from ..common.schema import default as config_default
from . import qdq_rules
from .calibrate import METHODS

ACTIVATIONS = {"int8": (QuantType.QInt8, True), "uint8": (QuantType.QUInt8, False)}
BIASES = ("float", "int32")


def quantize(fp32, ranges_path, out, activations, per_channel, bias="int32", engine="onnxruntime"):
    """Write the Q/DQ model; for engine tensorrt it is kept only if it follows TensorRT's rules."""
    ranges = load_tensors_data(ranges_path)
    act_type, symmetric = ACTIVATIONS[activations]
    with atomic_file(out) as tmp:
        quantize_static(
            str(fp32),
            str(tmp),
            None,
            quant_format=QuantFormat.QDQ,
            per_channel=per_channel,
            activation_type=act_type,
            weight_type=QuantType.QInt8,
            calibrate_method=ranges.calibration_method,
            calibration_cache_path=str(ranges_path),
            extra_options={"ActivationSymmetric": symmetric, "WeightSymmetric": True, "QuantizeBias": bias == "int32"},
        )
        if engine == "tensorrt":  # fail here, not at parse time on the GPU node
            qdq_rules.require(
                out,
                onnx.load(str(tmp)),
                f"config inference.engine = tensorrt; activations {activations}, biases {bias}",
            )
    return ranges


def qdq_summary(model):
    """Q/DQ facts of a model: op counts, per quantized activation tensor its scale and zero point
    (QuantizeLinear nodes whose input is computed, not stored), and the stored quantized tensors
    by type."""
    inits = {t.name: t for t in model.graph.initializer}
    tensors = {}
    for node in model.graph.node:
        if node.op_type == "QuantizeLinear" and node.input[0] not in inits:
            scale = numpy_helper.to_array(inits[node.input[1]])
            zp = numpy_helper.to_array(inits[node.input[2]])
            tensors[node.input[0]] = {"scale": float(scale), "zero_point": int(zp), "type": str(zp.dtype)}
    # Stored quantized tensors: INT8 weights, and INT32 biases where quantized (scale = input scale x weight scale).
    stored = collections.Counter(
        str(numpy_helper.to_array(inits[n.input[0]]).dtype)
        for n in model.graph.node
        if n.op_type == "DequantizeLinear" and n.input[0] in inits
    )
    return {
        "ops": dict(sorted(collections.Counter(n.op_type for n in model.graph.node).items())),
        "tensors": tensors,
        "stored": dict(sorted(stored.items())),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--onnx", required=True, help="the FP32 model")
    ap.add_argument("--ranges", required=True, help="calibrate.py's output")
    ap.add_argument("--activations", choices=sorted(ACTIVATIONS), required=True)
    ap.add_argument(
        "--per-channel", type=int, choices=(0, 1), default=int(config_default("inference.quantization.per_channel"))
    )
    ap.add_argument("--bias", choices=BIASES, required=True, help="float for TensorRT, int32 for ONNX Runtime")
    ap.add_argument(
        "--engine",
        choices=("onnxruntime", "tensorrt"),
        required=True,
        help="the engine the model is for: tensorrt checks it against TensorRT's Q/DQ rules",
    )
    ap.add_argument("--calibration-images", type=int, required=True, help="for the cache's record")
    ap.add_argument("--out", required=True, help="the INT8 Q/DQ model")
    ap.add_argument("--cache", required=True, help="the calibration cache (JSON)")
    a = ap.parse_args()
    ranges = quantize(a.onnx, a.ranges, a.out, a.activations, bool(a.per_channel), a.bias, a.engine)
    summary = qdq_summary(onnx.load(a.out))
    method = next(k for k, v in METHODS.items() if v == ranges.calibration_method)
    for name, t in summary["tensors"].items():
        if name in ranges.data:
            t["calibrated_range"] = [float(np.asarray(v)) for v in ranges[name].range_value]
    write_json(
        a.cache,
        {
            "method": method,
            "calibration_images": a.calibration_images,
            "activations": a.activations,
            "symmetric": ACTIVATIONS[a.activations][1],
            "per_channel_weights": bool(a.per_channel),
            "bias": a.bias,
            "engine": a.engine,
            **summary,
        },
    )
    print(
        f"quantize: {len(summary['tensors'])} activation tensors ({a.activations}), stored quantized tensors "
        f"{summary['stored']}, ops {summary['ops']}"
    )


if __name__ == "__main__":
    run_main(main)
