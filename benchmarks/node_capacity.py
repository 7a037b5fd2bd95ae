"""A node's input capacity with no training: one input_capacity process per GPU, all at once, each
on its own GPU with the decode threads a rank of the same launch would get, on all of the node's
CPUs as the local launcher leaves them by default (a setting named *_bound gives each the cores
that config training.bind_cpus auto would: cluster/cpu_bind.py), so the GPUs' ranks share the
node's CPUs (and copy engines) as in a run. Their images/s add up to what the node's input can
hand its GPUs at most; against the step's rate at that count it says whether a run is input-bound
before any run is made (benchmarks/pytorch_gpu.py --part capacity).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from workflow_scripts.cluster import cpu_bind, gpu_identity
from workflow_scripts.train import pytorch_options

REPO = Path(__file__).resolve().parent.parent
SECONDS, WARMUP = 8.0, 8


def more(words):
    return ["--trainer-args", words]


def settings(cpus, gpus):
    """(name, data, input_capacity flags) of the DALI settings the photos plan weighs."""
    share = max(1, cpus // gpus)
    default = pytorch_options.loader_workers(
        SimpleNamespace(loader_workers=0, decode_threads=0), SimpleNamespace(input="dali"), share
    )
    spare1 = max(1, share - 1)
    return [
        ("dali_cpu", "lmdb", ["--dali-decoder", "cpu", "--threads", str(default)]),
        ("dali_cpu_bound", "lmdb", ["--dali-decoder", "cpu", "--threads", str(default)]),
        ("dali_cpu_spare1", "lmdb", ["--dali-decoder", "cpu", "--threads", str(spare1)]),
        ("dali_cpu_capped", "lmdb-capped", ["--dali-decoder", "cpu", "--threads", str(default)]),
        ("dali_mixed", "lmdb", ["--dali-decoder", "mixed", "--threads", str(default)]),
        (
            "dali_mixed_hw1",
            "lmdb",
            ["--dali-decoder", "mixed", "--threads", str(default), *more("--hw-decoder-load 1.0")],
        ),
        (
            "dali_mixed_hint",
            "lmdb",
            ["--dali-decoder", "mixed", "--threads", str(default), *more("--dali-size-hint largest")],
        ),
    ]


def one_setting(work, gpus, batch, image_size, data, flags, bind=False):
    procs, outs = [], []
    sets = cpu_bind.slices(os.sched_getaffinity(0), gpus, cpu_bind.near_gpus(gpus)) if bind else None
    for g in range(gpus):
        out = work / f"capacity_{g}.json"
        out.unlink(missing_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "workflow_scripts.train.input_capacity",
            "--framework",
            "pytorch",
            "--input",
            "dali",
            "--data",
            str(work / data),
            "--batch-per-gpu",
            str(batch),
            "--image-size",
            str(image_size),
            "--device",
            "gpu",
            "--seconds",
            str(SECONDS),
            "--warmup-batches",
            str(WARMUP),
            "--out",
            str(out),
            *flags,
        ]
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(g)}
        pin = None
        if sets:
            env[cpu_bind.BOUND_ENV] = "1"
            pin = cpu_bind.pinner(sets[g])
        procs.append(
            subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=pin)
        )
        outs.append(out)
    logs = [p.communicate(timeout=300)[0].decode(errors="replace")[-1500:] for p in procs]
    ranks = [json.loads(o.read_text()) if o.exists() else {"error": log} for o, log in zip(outs, logs)]
    ok = [r for r in ranks if "images_per_s" in r]
    return {
        "flags": flags,
        "data": data,
        "processes": gpus,
        "node_images_per_s": sum(r["images_per_s"] for r in ok) if len(ok) == gpus else None,
        "per_process": [r.get("images_per_s") for r in ranks],
        "batch_cv": [r.get("batch_time_cv") for r in ranks],
        "threads": [r.get("threads") for r in ranks],
        "cpus": [gpu_identity.cpu_text(c) for c in sets] if sets else "all",
        "errors": [r["error"] for r in ranks if "error" in r],
    }


def part_capacity(a, work):
    cpus = len(os.sched_getaffinity(0))
    out = {"cpus": cpus, "gpus": a.gpus, "seconds": SECONDS, "warmup_batches": WARMUP, "settings": {}}
    for name, data, flags in settings(cpus, a.gpus):
        t = time.perf_counter()
        bind = name.endswith("_bound")
        out["settings"][name] = {**one_setting(work, a.gpus, a.batch, a.image_size, data, flags, bind)}
        out["settings"][name]["wall_s"] = time.perf_counter() - t
    return out
