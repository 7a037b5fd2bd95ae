"""TensorRT's explicit-quantization rules that a Q/DQ ONNX graph can be checked against before it
reaches a GPU: what TensorRT's ONNX parser (onnx-tensorrt) refuses or cannot place.

  - DequantizeLinear reads INT8 only, stored or computed: an INT32 bias or a UINT8 activation
    behind a DequantizeLinear fails at parse time ("only activation types allowed as input to
    this layer")
  - every zero point is 0 (TensorRT's quantization is symmetric)
  - QuantizeLinear writes INT8, and its output goes to DequantizeLinear nodes only
  - scales are stored, finite and positive
  - one scale per channel only on stored weights, along their output-channel axis: Conv axis 0,
    ConvTranspose axis 1, Gemm axis 0 with transB else 1, a 2-D MatMul weight axis 1 (the axes
    ONNX Runtime's quantizer writes); activations take one scale

    python -m workflow_scripts.int8.qdq_rules MODEL.onnx   # lists violations, exit 2 if any
"""

import argparse

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from ..common.errors import StageError, run_main

INT8 = TensorProto.INT8


def _constants(model):
    """Stored tensors by name: initializers and Constant nodes' values."""
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(attr.t)
    return values


def _elem_types(model):
    """Element type of every tensor ONNX's shape inference can type (0 where it cannot)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # a graph inference cannot type still gets the other checks
        inferred = model
    graph = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*graph.value_info, *graph.input, *graph.output]}
    types.update({t.name: t.data_type for t in graph.initializer})
    return types


def _type_name(elem_type):
    return TensorProto.DataType.Name(elem_type) if elem_type else "unknown"


def _attr(node, name, default):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _weight_axis(consumer, index, rank):
    """The output-channel axis TensorRT takes per-channel scales on, for input `index` of
    `consumer` (a weight of rank `rank`), or None where TensorRT takes no per-channel scale."""
    if index != 1:
        return None
    if consumer.op_type == "Conv":
        return 0
    if consumer.op_type == "ConvTranspose":
        return 1
    if consumer.op_type == "Gemm":
        return 0 if _attr(consumer, "transB", 0) else 1
    if consumer.op_type == "MatMul" and rank == 2:
        return 1
    return None


def _q_output_type(node, consts):
    """QuantizeLinear's output type: its zero point's type, or output_dtype, or UINT8 (ONNX's default)."""
    if len(node.input) > 2 and node.input[2]:
        zp = consts.get(node.input[2])
        return None if zp is None else onnx.helper.np_dtype_to_tensor_dtype(zp.dtype)
    return _attr(node, "output_dtype", 0) or TensorProto.UINT8


def violations(model):
    """Every rule the graph breaks, as 'node NAME (OP): what' strings (empty: none found)."""
    consts, types = _constants(model), _elem_types(model)
    consumers, producer = {}, {}
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node, i))
        for name in node.output:
            producer[name] = node
    outputs = {o.name for o in model.graph.output}
    found = []

    def bad(node, what):
        found.append(f"node {node.name or '(unnamed)'} ({node.op_type}): {what}")

    for node in model.graph.node:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        scale = consts.get(node.input[1])
        zp = consts.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        if scale is None:
            bad(node, f"scale {node.input[1]} is computed, not stored")
        elif not (np.all(np.isfinite(scale)) and np.all(scale > 0)):
            bad(node, f"scale {node.input[1]} is not finite and positive")
        if zp is not None and np.any(zp != 0):
            bad(node, f"zero point {node.input[2]} is {np.unique(zp)[:4].tolist()}, not 0 (TensorRT is symmetric)")
        if len(node.input) > 2 and node.input[2] and zp is None:
            bad(node, f"zero point {node.input[2]} is computed, not stored")
        x = node.input[0]
        if node.op_type == "DequantizeLinear":
            src = producer.get(x)
            if x in consts:
                elem = onnx.helper.np_dtype_to_tensor_dtype(consts[x].dtype)
            elif src is not None and src.op_type == "QuantizeLinear":
                elem = _q_output_type(src, consts)
            else:
                elem = types.get(x, 0)
            if elem != INT8:
                what = "stored" if x in consts else "computed"
                bad(node, f"input {x} ({what}) is {_type_name(elem)}; TensorRT dequantizes INT8 only")
                continue  # its scales' layout (an INT32 bias's per-channel ones) goes with the wrong type
        else:
            elem = _q_output_type(node, consts)
            if elem != INT8:
                bad(node, f"output {node.output[0]} is {_type_name(elem or 0)}; TensorRT quantizes to INT8 only")
            readers = consumers.get(node.output[0], [])
            if node.output[0] in outputs or not readers or any(r.op_type != "DequantizeLinear" for r, _ in readers):
                others = sorted({r.name or r.op_type for r, _ in readers if r.op_type != "DequantizeLinear"})
                bad(
                    node,
                    f"output {node.output[0]} is not read by DequantizeLinear only"
                    + (f" (also by {', '.join(others)})" if others else " (a graph output or unread)"),
                )
        if scale is not None and scale.size > 1:
            _check_per_channel(node, x, consts, producer, consumers, scale, bad)
    return found


def _check_per_channel(node, x, consts, producer, consumers, scale, bad):
    # A weight is stored, or quantized from a stored tensor by a QuantizeLinear (as QAT exports write it).
    src = producer.get(x)
    weight = (
        consts.get(x)
        if x in consts
        else (consts.get(src.input[0]) if src is not None and src.op_type == "QuantizeLinear" else None)
    )
    if weight is None:
        bad(node, f"{scale.size} scales on activation {x}; TensorRT takes one scale per activation tensor")
        return
    if node.op_type == "QuantizeLinear":
        return  # the DequantizeLinear it feeds is checked against the op that reads the weight
    rank = weight.ndim
    axis = _attr(node, "axis", 1)
    axis = axis + rank if axis < 0 else axis
    for reader, index in consumers.get(node.output[0], []):
        want = _weight_axis(reader, index, rank)
        if want is None:
            bad(
                node,
                f"per-channel scales on {x}, which {reader.name or reader.op_type} ({reader.op_type}) "
                f"reads as input {index}: TensorRT takes them on Conv/ConvTranspose/Gemm/2-D MatMul weights only",
            )
        elif axis != want:
            bad(
                node,
                f"per-channel scales on axis {axis} of {x}; {reader.op_type} {reader.name} needs its "
                f"output-channel axis {want}",
            )


def require(path, model=None, why=""):
    """Raise a StageError naming the model file (and `why` it is checked) and every offending node,
    if TensorRT would reject the model."""
    found = violations(model if model is not None else onnx.load(str(path)))
    if found:
        shown = "; ".join(found[:10]) + (f"; ... {len(found) - 10} more" if len(found) > 10 else "")
        raise StageError(
            f"{path}{f' ({why})' if why else ''} breaks TensorRT's explicit-quantization rules in "
            f"{len(found)} place(s): {shown}"
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a Q/DQ ONNX model")
    a = ap.parse_args()
    require(a.model)
    print(f"qdq_rules: {a.model} follows TensorRT's explicit-quantization rules")


if __name__ == "__main__":
    run_main(main)
