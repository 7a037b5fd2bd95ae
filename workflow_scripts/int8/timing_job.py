"""Fig. 9's timed runs of one system in one job (rules/int8_results.smk, int8_throughput_run): every network
of inference.throughput.models at every batch size, one pair after another in one process, each
timed as throughput.py times a pair (both precisions in ABBA blocks, each block after its own
warm-up) and written to its own record (<out_dir>/bs<N>.json) with its own isolation over its
blocks and each precision's stability. One allocation holds the node for the minutes the whole
figure takes, instead of one per batch size, each for a default time limit of hours.

    python -m workflow_scripts.int8.timing_job --engine onnxruntime --image-size 224 \\
        --batch-sizes 1 2 4 --pair resnet50 fp32.engine int8.engine results/int8/resnet50/onnxruntime/throughput
"""

import argparse
import copy
import sys

from ..cluster import cpus
from ..common.errors import run_main
from . import throughput


def arg_parser():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    throughput.add_timing_arguments(ap)
    ap.add_argument("--batch-sizes", type=int, nargs="+", required=True, help="config inference.throughput.batch_sizes")
    ap.add_argument(
        "--pair",
        nargs=4,
        action="append",
        required=True,
        metavar=("NETWORK", "FP32_ENGINE", "INT8_ENGINE", "OUT_DIR"),
        help="a network's two engine files and the folder of its records; once per network",
    )
    return ap


def pairs(a):
    """One settings namespace per (network, batch size), in the order they are timed: each network's
    batch sizes in turn, as listed."""
    for network, fp32, int8, out_dir in a.pair:
        for batch in a.batch_sizes:
            one = copy.copy(a)
            one.network, one.fp32, one.int8, one.batch_size = network, fp32, int8, batch
            one.out = f"{out_dir}/bs{batch}.json"
            yield one


def main():
    a = arg_parser().parse_args()
    a.threads = cpus.job_threads(a)
    todo = list(pairs(a))
    for n, one in enumerate(todo, 1):
        print(f"timing {n}/{len(todo)}: {one.network}, batch {one.batch_size}", file=sys.stderr, flush=True)
        throughput.run(one)


if __name__ == "__main__":
    run_main(main)
