"""Describe ONNX models for tests/test_int8.py (runs in the torch environment). Prints JSON.

    int8_inspect.py MODEL.onnx [MODEL.onnx ...]

Per model: op counts; the element type of every QuantizeLinear/DequantizeLinear zero point and of
every stored tensor a DequantizeLinear reads; and, per Conv/Gemm, whether its data input and its
weight each come straight from a DequantizeLinear (i.e. the op really computes on INT8 values).
"""

import collections
import json
import sys

import onnx
from onnx import numpy_helper


def describe(path):
    model = onnx.load(path)
    inits = {t.name: t for t in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    zp_types, stored_types, compute = collections.Counter(), collections.Counter(), []
    for n in model.graph.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear") and len(n.input) > 2 and n.input[2] in inits:
            zp_types[f"{n.op_type}:{numpy_helper.to_array(inits[n.input[2]]).dtype}"] += 1
        if n.op_type == "DequantizeLinear" and n.input[0] in inits:
            stored_types[str(numpy_helper.to_array(inits[n.input[0]]).dtype)] += 1
        if n.op_type in ("Conv", "Gemm"):

            def from_dq(name):
                p = producer.get(name)
                return p is not None and p.op_type == "DequantizeLinear"

            compute.append(
                {"op": n.op_type, "data_from_dq": from_dq(n.input[0]), "weight_from_dq": from_dq(n.input[1])}
            )
    return {
        "ops": dict(collections.Counter(n.op_type for n in model.graph.node)),
        "zero_point_types": dict(zp_types),
        "stored_types": dict(stored_types),
        "compute": compute,
        "opset": [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")],
    }


print(json.dumps({p: describe(p) for p in sys.argv[1:]}))
