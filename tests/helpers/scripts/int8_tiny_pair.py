"""A tiny network's FP32 and INT8 ONNX models for tests/test_int8_pairs.py (runs in the torch
environment; prints one JSON line).

int8_tiny_pair.py WORKDIR IMAGE_SIZE
    a two-convolution network with seeded weights, exported by the stage's own exporter to
    WORKDIR/fp32.onnx, calibrated (minmax) on seeded noise and quantized as int8_quantize does for
    ONNX Runtime (uint8 activations, per-channel int8 weights) into WORKDIR/int8.onnx: the
    stage's chain on a model that takes seconds, not ResNet-50's minutes
"""

import json
import sys
from pathlib import Path

import numpy as np


def main():
    import torch
    from onnxruntime.quantization.calibrate import save_tensors_data

    from workflow_scripts.int8 import calibrate, export, quantize

    work, size = Path(sys.argv[1]), int(sys.argv[2])
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 16, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, 10),
    ).eval()
    with torch.no_grad():
        export.export(model, size, work / "fp32.onnx")
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((4, 3, size, size), dtype=np.float32), None, None) for _ in range(2)]
    tensors, _ = calibrate.calibrate(work / "fp32.onnx", iter(batches), export.INPUT, "minmax", 256, 99.999, 2, 1)
    save_tensors_data(tensors, work / "ranges.json")
    quantize.quantize(work / "fp32.onnx", work / "ranges.json", work / "int8.onnx", "uint8", True)
    print(json.dumps({p: str(work / f"{p}.onnx") for p in ("fp32", "int8")}))


if __name__ == "__main__":
    main()
