"""Export one network with its weights to an FP32 ONNX model (batch dimension dynamic).

Uses torch.onnx's current (torch.export-based) exporter, weights inside the file (every one of
the seven networks is under protobuf's 2 GB). The export is checked before it is kept: ONNX
Runtime's output on a random batch must match PyTorch's. model.json records the network, class
count, input size and where the weights came from (file and sha256).
"""

import argparse
import os

import numpy as np
import torch

from ..cluster import cpus
from ..common.atomic import atomic_file, write_json
from ..common.errors import StageError, run_main
from . import models

INPUT, OUTPUT = "input", "logits"
OPSET = 20


def export(model, size, path):
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(0))
    with atomic_file(path) as tmp:
        torch.onnx.export(
            model,
            (x,),
            str(tmp),
            dynamo=True,
            external_data=False,
            opset_version=OPSET,
            input_names=[INPUT],
            output_names=[OUTPUT],
            verbose=False,
            dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=4096)},),
        )
        err = _max_error(model, tmp, x)
        if not err < 1e-3 * max(1.0, float(model(x).abs().max())):
            raise StageError(f"the ONNX export of this network differs from PyTorch by {err:g}")
    return err


def _max_error(model, path, x):
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        want = model(x).numpy()
    got = session.run([OUTPUT], {INPUT: x.numpy()})[0]
    return float(np.abs(got - want).max())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--network", required=True, choices=sorted(models.NETWORKS))
    ap.add_argument("--source", required=True, choices=models.SOURCES)
    ap.add_argument("--weights", default="", help="source pipeline or file: the state_dict file")
    ap.add_argument("--classes", type=int, default=0, help="source random: outputs (default 1000)")
    ap.add_argument("--seed", type=int, default=0, help="source random")
    ap.add_argument("--image-size", type=int, required=True)
    ap.add_argument("--key", default="", help="the config key the weights come from (for messages)")
    cpus.add_job_threads(ap)
    ap.add_argument(
        "--torch-home",
        default="",
        help="source torchvision: the cache fetch_weights filled on the login node (TORCH_HOME); the job "
        "downloads nothing",
    )
    ap.add_argument("--out", required=True, help="the FP32 ONNX model")
    ap.add_argument("--info", required=True, help="model.json")
    a = ap.parse_args()
    torch.set_num_threads(cpus.job_threads(a))
    if a.torch_home:
        os.environ["TORCH_HOME"] = a.torch_home  # read by torch.hub when the weights are looked up
    model, weights = models.load(a.network, a.source, a.weights, a.classes, a.seed, a.key or None)
    with torch.no_grad():
        err = export(model, a.image_size, a.out)
    write_json(
        a.info,
        {
            "network": a.network,
            "name": models.NETWORKS[a.network],
            "classes": models.classes_of(model, a.network),
            "image_size": a.image_size,
            "input": INPUT,
            "output": OUTPUT,
            "opset": OPSET,
            "weights": weights,
            "versions": {"torch": torch.__version__, "torchvision": models.torchvision.__version__},
        },
    )
    print(
        f"export: {a.network} ({weights['source']} weights), {a.image_size}x{a.image_size}, "
        f"max |ONNX Runtime - PyTorch| = {err:.2e}"
    )


if __name__ == "__main__":
    run_main(main)
