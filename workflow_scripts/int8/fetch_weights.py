"""Fetch torchvision's weights on the login node, before any job needs them: compute nodes often
have no internet. A local rule (rules/int8.smk, int8_weights) runs it; the export job then reads
the same cache (--torch-home) and downloads nothing.

    python -m workflow_scripts.int8.fetch_weights --network resnet50 --torch-home data/weights/torch --out X.json
"""

import argparse
import os

from ..common.atomic import write_json
from ..common.errors import run_main
from . import models


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--network", required=True, choices=sorted(models.NETWORKS))
    ap.add_argument("--torch-home", required=True, help="the cache (TORCH_HOME) the export job reads")
    ap.add_argument("--key", default="", help="the config key (for messages)")
    ap.add_argument("--out", required=True, help="a record of the file fetched and its sha256")
    a = ap.parse_args()
    os.environ["TORCH_HOME"] = a.torch_home  # torch.hub reads it when the weights are looked up
    _, info = models.torchvision_state(a.network, a.key or f"inference.models.{a.network}")
    write_json(a.out, info)
    print(f"fetched {info['weights']} into {info['file']} (sha256 {info['sha256']})")


if __name__ == "__main__":
    run_main(main)
