"""Run the inference stage's code path on each of the study's seven networks, for
tests/test_int8.py (runs in the torch environment; prints one JSON line).

    int8_networks.py WORKDIR LMDB CALIBRATION_TSV IMAGE_SIZE

Per network: seeded random weights saved as a state_dict file (as a user's local weights file) and
loaded back through models.load (source "file"). One network of each kind of layers (CHAIN) is then exported
to ONNX, calibrated (entropy) on the listed val images, quantized to a Q/DQ model, and both models run
by ONNX Runtime on one batch; a deeper member of a family (SAME_LAYERS) is built of exactly the
layer types of its family's member that went through the chain (ResNet-50's chain is the pipeline's
own), so the chain meets nothing new in it.
Also loads ResNet-50 through the "torchvision" source from a cache directory made here
(TORCH_HOME), with nothing downloaded.
"""

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
import torchvision

from workflow_scripts.int8 import calibrate, export, models, quantize, val_images

work, lmdb, calib_tsv, size = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
torch.set_num_threads(2)
items = val_images.read_list(calib_tsv)
batch = next(val_images.batches(lmdb, items, size, len(items), 2, "batch"))[0]
CHAIN = ("googlenet", "alexnet")
# VGG is AlexNet's layers (convolutions, ReLU, max pooling, adaptive average pooling, dropout, linear),
# more of them.
SAME_LAYERS = {
    "resnet50": "resnet50",
    "resnet101": "resnet50",
    "resnet152": "resnet50",
    "vgg16": "alexnet",
    "vgg19": "alexnet",
}


def layer_types(model):
    """The kinds of layer below the network's own class."""
    return sorted({type(m).__name__ for m in model.modules() if m is not model})


out = {}
for name in models.NETWORKS:
    start = time.perf_counter()
    torch.manual_seed(0)
    weights = work / f"{name}.pt"
    torch.save(models.build(name, 16).state_dict(), weights)
    model, info = models.load(name, "file", str(weights))
    weights.unlink()
    if name not in CHAIN:
        family = SAME_LAYERS[name]
        out[name] = {
            "weights": info,
            "classes": models.classes_of(model, name),
            "layers": layer_types(model),
            "family_layers": layer_types(models.build(family, 16)),
        }
        continue
    fp32, int8, ranges = work / f"{name}.fp32.onnx", work / f"{name}.int8.onnx", work / f"{name}.ranges.json"
    with torch.no_grad():
        err = export.export(model, size, fp32)
    tensors, passes = calibrate.calibrate(
        fp32, val_images.batches(lmdb, items, size, 2, 2, "calibrate"), "input", "entropy", 256, 99.999, 1, 2
    )
    from onnxruntime.quantization.calibrate import save_tensors_data

    save_tensors_data(tensors, ranges)
    quantize.quantize(fp32, ranges, int8, "uint8", True)
    summary = quantize.qdq_summary(__import__("onnx").load(int8))
    logits = {
        p: ort.InferenceSession(str(f), providers=["CPUExecutionProvider"]).run(None, {"input": batch})[0]
        for p, f in (("fp32", fp32), ("int8", int8))
    }
    out[name] = {
        "weights": info,
        "classes": models.classes_of(model, name),
        "export_error": err,
        "passes": passes,
        "calibrated_tensors": len(tensors.data),
        "quantized_activations": len(summary["tensors"]),
        "stored": summary["stored"],
        "ops": summary["ops"],
        "shapes": {p: list(v.shape) for p, v in logits.items()},
        "finite": all(bool(np.isfinite(v).all()) for v in logits.values()),
        "seconds": round(time.perf_counter() - start, 1),
    }
    for f in (fp32, int8):
        f.unlink()

# torchvision's source, from a cache that holds the file under torchvision's own name.
os.environ["TORCH_HOME"] = str(work / "torch-home")
url = torchvision.models.get_model_weights("resnet50")[models.TORCHVISION_WEIGHTS].url
cached = Path(torch.hub.get_dir()) / "checkpoints" / Path(url).name
cached.parent.mkdir(parents=True)
torch.manual_seed(1)
torch.save(models.build("resnet50", 1000).state_dict(), cached)
model, info = models.load("resnet50", "torchvision")
out["torchvision_cache"] = {
    "weights": info,
    "classes": models.classes_of(model, "resnet50"),
    "expected_file": str(cached),
}
print(json.dumps(out))
