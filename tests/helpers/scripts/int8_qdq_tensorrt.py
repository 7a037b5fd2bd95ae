"""Q/DQ models for tests/test_tensorrt_qdq.py (runs in the torch environment; prints one JSON line).

int8_qdq_tensorrt.py prepare WORKDIR NETWORK IMAGE_SIZE
    seeded random weights for NETWORK (16 classes, batch-norm statistics set off identity),
    exported to WORKDIR/fp32.onnx and calibrated (minmax) on seeded noise into
    WORKDIR/ranges.json, and quantized as the
    TensorRT-bound model was before biases had a setting (INT8 activations, INT32 biases)
    into WORKDIR/int32_biases.onnx
int8_qdq_tensorrt.py inspect FP32.onnx MODEL.onnx [MODEL.onnx ...]
    per model: the element type of what each DequantizeLinear reads (read off the graph
    here, not by the checker), the checker's violations, and top-1 on ONNX Runtime's CPU
    engine over a seeded noise batch beside the FP32 model's
int8_qdq_tensorrt.py doctor MODEL.onnx WORKDIR
    copies of MODEL with one defect each (an INT32 weight behind a DequantizeLinear, a
    non-zero zero point, a Conv weight scaled along the wrong axis, a QuantizeLinear read by
    a non-DequantizeLinear op), and per copy the nodes doctored and the checker's violations
"""

import collections
import json
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from workflow_scripts.int8 import qdq_rules


def prepare(work, network, size):
    import torch
    from onnxruntime.quantization.calibrate import save_tensors_data

    from workflow_scripts.int8 import calibrate, export, models, quantize

    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = models.build(network, 16).eval()
    # Batch-norm statistics away from their initial identity, as a trained network's are: the
    # export folds them into the convolutions, which then carry biases too.
    with torch.no_grad():
        for bn in (m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)):
            bn.running_mean.uniform_(-0.1, 0.1)
            bn.running_var.uniform_(0.5, 2.0)
            bn.bias.uniform_(-0.1, 0.1)
    with torch.no_grad():
        export.export(model, size, work / "fp32.onnx")
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((4, 3, size, size), dtype=np.float32), None, None) for _ in range(2)]
    tensors, _ = calibrate.calibrate(work / "fp32.onnx", iter(batches), "input", "minmax", 256, 99.999, 2, 2)
    save_tensors_data(tensors, work / "ranges.json")
    # The TensorRT-bound model as it was made before biases had a setting: INT8 activations,
    # ONNX Runtime's default INT32 biases.
    quantize.quantize(work / "fp32.onnx", work / "ranges.json", work / "int32_biases.onnx", "int8", True)
    return {"fp32": str(work / "fp32.onnx"), "ranges": str(work / "ranges.json")}


def dq_input_types(model):
    """{element type: count} of DequantizeLinear inputs: a stored tensor's dtype, else the
    producing QuantizeLinear's zero-point dtype."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    types = collections.Counter()
    for n in model.graph.node:
        if n.op_type != "DequantizeLinear":
            continue
        x = n.input[0]
        if x in inits:
            types[f"stored {inits[x].dtype}"] += 1
        else:
            q = producer[x]
            types[f"computed {inits[q.input[2]].dtype}"] += 1
    return dict(types)


def inspect(fp32, paths):
    import onnxruntime as ort

    shape = onnx.load(fp32).graph.input[0].type.tensor_type.shape.dim
    x = np.random.default_rng(1).standard_normal(
        (64, 3, shape[2].dim_value or 32, shape[3].dim_value or 32), dtype=np.float32
    )

    def top1(path):
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return session.run(None, {session.get_inputs()[0].name: x})[0].argmax(1)

    ref = top1(fp32)
    out = {}
    for p in paths:
        model = onnx.load(p)
        t = top1(p)
        out[p] = {
            "dq_inputs": dq_input_types(model),
            "violations": qdq_rules.violations(model),
            "top1": t.tolist(),
            "same_top1_as_fp32": int((t == ref).sum()),
            "images": len(ref),
        }
    return out


def doctor(path, work):
    model = onnx.load(path)
    nodes = list(model.graph.node)
    inits = {t.name: t for t in model.graph.initializer}
    made = {}

    def save(name, m, doctored):
        target = work / f"{name}.onnx"
        onnx.save(m, target)
        made[name] = {"file": str(target), "doctored": doctored, "violations": qdq_rules.violations(onnx.load(target))}

    def copy():
        m = onnx.ModelProto()
        m.CopyFrom(model)
        return m, {n.name: n for n in m.graph.node}, {t.name: t for t in m.graph.initializer}

    conv_w = next(
        n
        for n in nodes
        if n.op_type == "DequantizeLinear"
        and n.input[0] in inits
        and any(c.op_type == "Conv" and c.input[1] == n.output[0] for c in nodes)
    )
    act_q = next(n for n in nodes if n.op_type == "QuantizeLinear" and n.input[0] not in inits)
    act_dq = [n.name for n in nodes if n.op_type == "DequantizeLinear" and n.input[0] == act_q.output[0]]

    # A stored weight widened to INT32, as an INT32 bias is stored.
    m, _, mi = copy()
    t = mi[conv_w.input[0]]
    t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.int32), t.name))
    save("int32_weight", m, [conv_w.name])

    # An activation's zero point moved off 0 (the QuantizeLinear and its DequantizeLinear share it).
    m, _, mi = copy()
    t = mi[act_q.input[2]]
    t.CopyFrom(numpy_helper.from_array(np.full_like(numpy_helper.to_array(t), 3), t.name))
    save("zero_point", m, [act_q.name, *act_dq])

    # A Conv weight's per-channel scales declared along its input channels.
    m, mn, _ = copy()
    dq = mn[conv_w.name]
    kept = [a for a in dq.attribute if a.name != "axis"]
    del dq.attribute[:]
    dq.attribute.extend([*kept, helper.make_attribute("axis", 1)])
    save("conv_axis", m, [conv_w.name])

    # A QuantizeLinear's INT8 output read by an op that is not its DequantizeLinear.
    m, _, _ = copy()
    m.graph.node.append(helper.make_node("Identity", [act_q.output[0]], ["stray"], name="stray_reader"))
    save("stray_reader", m, [act_q.name])
    return made


def main():
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "prepare":
        out = prepare(Path(args[0]), args[1], int(args[2]))
    elif mode == "inspect":
        out = inspect(args[0], args[1:])
    else:
        out = doctor(args[0], Path(args[1]))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
