"""INT8 vs FP32 inference images/s by batch size on the CPU (ONNX Runtime): Fig. 9's measurement
for ResNet-50 at 224x224, through the inference stage's own code (export, calibrate, quantize,
engine build, timed runs).

The weights are seeded random and the calibration batches seeded noise: speed does not depend
on what the weights or pixels are (accuracy does; that is the pipeline's Table III). Per batch
size, as the pipeline's timed job does (workflow_scripts/int8/throughput.py): each precision's
`--repeats` timed runs in two blocks, FP32, INT8, INT8, FP32, each block after `--warmup` discarded
runs; images/s = batch / median.
Run with the torch environment:

    .envs/torch/bin/python benchmarks/int8_throughput.py --batch-sizes 1 2 4 8 16 32 64 --threads 2
"""

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from onnxruntime.quantization.calibrate import save_tensors_data

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from workflow_scripts.int8 import calibrate, engines, export, models, quantize, throughput  # noqa: E402


def noise_batches(n, batch, size):
    rng = np.random.default_rng(1)
    for _ in range(n):
        yield rng.standard_normal((batch, 3, size, size), dtype=np.float32), None, None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--network", default="resnet50", choices=sorted(models.NETWORKS))
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--activations", choices=sorted(quantize.ACTIVATIONS), default="uint8")
    ap.add_argument("--per-channel", type=int, choices=(0, 1), default=1)
    ap.add_argument(
        "--method",
        choices=sorted(calibrate.METHODS),
        default="minmax",
        help="calibration method (speed does not depend on it; minmax is the quickest)",
    )
    ap.add_argument("--workdir", default="", help="keep the models here instead of a temp dir")
    ap.add_argument("--dry-run", action="store_true", help="check the arguments, print them and stop")
    a = ap.parse_args(argv)
    if a.dry_run:
        print(vars(a))
        return
    torch.set_num_threads(a.threads)
    work = Path(a.workdir or tempfile.mkdtemp(prefix="dlscale-int8-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    fp32, int8, ranges = work / "fp32.onnx", work / "int8.onnx", work / "ranges.json"
    model, _ = models.load(a.network, "random", seed=0)
    with torch.no_grad():
        export.export(model, a.image_size, fp32)
    tensors, _ = calibrate.calibrate(
        fp32, noise_batches(4, 8, a.image_size), export.INPUT, a.method, 512, 99.999, 2, a.threads
    )
    save_tensors_data(tensors, ranges)
    quantize.quantize(fp32, ranges, int8, a.activations, bool(a.per_channel))
    runners = {}
    for p, src in (("fp32", fp32), ("int8", int8)):
        built = work / f"{p}.engine"
        engines.build("onnxruntime", src, built, a.threads)
        runners[p] = engines.open_engine("onnxruntime", built, a.threads)
    print(
        f"{a.network} {a.image_size}x{a.image_size}, random weights; ONNX Runtime {ort.__version__} on "
        f"{engines.cpu_name()}, {a.threads} threads; INT8: {a.activations} activations, "
        f"{'per-channel' if a.per_channel else 'per-tensor'} int8 weights, QDQ; {a.repeats} timed runs per point "
        f"in blocks {' '.join(p.upper() for p, _ in throughput.blocks(a.repeats))}, each after {a.warmup} warm-up "
        f"runs, images/s = batch / median (slowest..fastest run)"
    )
    print(f"{'batch':>5}  {'FP32 images/s':>24}  {'INT8 images/s':>24}  {'INT8/FP32':>9}")
    rng = np.random.default_rng(0)
    for bs in a.batch_sizes:
        x = rng.standard_normal((bs, 3, a.image_size, a.image_size), dtype=np.float32)
        times = throughput.time_alternating(runners, x, a.warmup, a.repeats)
        r = {p: throughput.summarize(times[p], bs) for p in runners}
        cells = [
            f"{r[p]['images_per_s']:8.1f} ({r[p]['images_per_s_worst']:6.1f}..{r[p]['images_per_s_best']:6.1f})"
            for p in ("fp32", "int8")
        ]
        print(
            f"{bs:5d}  {cells[0]:>24}  {cells[1]:>24}  {r['int8']['images_per_s'] / r['fp32']['images_per_s']:8.2f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
