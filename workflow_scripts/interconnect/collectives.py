"""All-reduce and broadcast between the processes of one run, message size by message size, with
torch.distributed (NCCL on GPUs, Gloo on the CPU): per size the time of every timed call on every
rank, and the algorithm and bus bandwidth nccl-tests would print (interconnect/bandwidth.py).

    python -m workflow_scripts.cluster.launcher --nproc-per-node 2 [--nodes N ...] -- \\
        python -m workflow_scripts.interconnect.collectives --max-bytes 1073741824 --out OUT/x.json

Method. Sizes from --min-bytes to --max-bytes in x2 steps, float32 elements, in place (as DDP and
Horovod all-reduce their gradients), root 0 for broadcast. Per size --warmup untimed calls, then
--iterations timed calls, each after a barrier so that every rank starts it together; a call is
timed by CUDA events on its stream (GPU), or by perf_counter around the blocking call (CPU). The
call's time is the slowest rank's: the collective is done only when every rank has its result.
median/min/max are over the timed calls; the bandwidths use the median. Rank 0 writes the JSON;
every rank's own times are in it. Needs only torch (no pandas): it runs on bare GPU hosts too.
NCCL runs with the environment the launcher gives every rank, as the training runs do (config
nccl_env; NCCL's own defaults otherwise), recorded in the JSON (nccl_env). Each rank takes its GPU
as the training runs do (cluster/gpu_choice.py: the one next to its CPUs, agreed per node through
files beside --out, else its local rank's), so the all-reduce measured is between the GPUs the
runs pair with their ranks; recorded in the JSON (gpu_binding).
"""

import argparse
import os
import socket
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from ..cluster import comm_env, container_env, cpus, gpu_choice
from ..cluster.provenance import cpu_model
from ..cluster.rank_env import detect
from ..common.atomic import write_json
from ..common.errors import StageError, run_main
from ..common.schema import default as config_default
from ..common.timing import cuda_times, wall_times
from .bandwidth import COLLECTIVES, ELEMENT_BYTES, algbw_GBps, busbw_GBps, message_sizes


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collectives", nargs="+", choices=COLLECTIVES, default=list(COLLECTIVES))
    ap.add_argument("--min-bytes", type=int, default=config_default("interconnect.min_bytes"))
    ap.add_argument("--max-bytes", type=int, default=2**30)
    ap.add_argument("--warmup", type=int, default=config_default("interconnect.warmup"), help="untimed calls per size")
    ap.add_argument(
        "--iterations", type=int, default=config_default("interconnect.iterations"), help="timed calls per size"
    )
    ap.add_argument(
        "--device",
        choices=("auto", "cuda", "cpu"),
        default="auto",
        help="auto: the GPUs where CUDA is available (as the trainers), else the CPU",
    )
    ap.add_argument("--out", required=True, help="JSON written by rank 0")
    a = ap.parse_args(argv)
    try:
        a.sizes = message_sizes(a.min_bytes, a.max_bytes)
    except ValueError as exc:
        ap.error(str(exc))
    if a.iterations < 1 or a.warmup < 0:
        ap.error("--iterations must be >= 1 and --warmup >= 0")
    return a


def _device(choice, launch, base):
    """The rank's device, and on a GPU how it was chosen (gpu_choice's record; None on the CPU)."""
    if choice == "cuda" and not torch.cuda.is_available():
        raise StageError(
            "this system requests GPUs (config systems.<name>.gpu_request) but torch here has no "
            f"CUDA device (torch {torch.__version__}, CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"
        )
    if choice == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu"), None
    binding = gpu_choice.choose(launch, base, seen=torch.cuda.device_count())
    print(f"rank {launch.rank}: {gpu_choice.describe(binding)}", file=sys.stderr, flush=True)
    device = torch.device("cuda", binding["cuda_index"])
    torch.cuda.set_device(device)
    return device, binding


def gpu_bindings(records, hosts):
    """Every rank's GPU and how it was chosen, in the shape of the runs' summaries (gpu_binding in
    train/harness.py); None on the CPU."""
    ranks = [{"rank": r, "node": host, **rec} for r, (rec, host) in enumerate(zip(records, hosts)) if rec]
    if not ranks:
        return None
    hows = sorted({r["how"] for r in ranks})
    return {
        "how": hows[0] if len(hows) == 1 else "mixed",
        "status": "warning" if any(r["status"] != "ok" for r in ranks) else "ok",
        "ranks": ranks,
    }


def measure(collective, buf, count, a, device, launch):
    """Every rank's seconds for each timed call of one collective on `count` elements."""
    x = buf[:count]
    op = (lambda: dist.all_reduce(x)) if collective == "all_reduce" else (lambda: dist.broadcast(x, src=0))
    if device.type == "cuda":

        def together():
            dist.barrier(device_ids=[device.index])
            torch.cuda.synchronize()

        mine = cuda_times(op, a.warmup, a.iterations, before=together)
    else:
        mine = wall_times(op, a.warmup, a.iterations, before=dist.barrier)
    every = [None] * launch.world_size
    dist.all_gather_object(every, mine)
    return every


def size_record(collective, nbytes, per_rank, ranks):
    calls = [max(t) for t in zip(*per_rank)]  # the slowest rank, call by call
    median = statistics.median(calls)
    return {
        "collective": collective,
        "bytes": nbytes,
        "count": nbytes // ELEMENT_BYTES,
        "per_rank_s": per_rank,
        "call_s": calls,
        "median_s": median,
        "min_s": min(calls),
        "max_s": max(calls),
        "algbw_GBps": algbw_GBps(nbytes, median),
        "busbw_GBps": busbw_GBps(collective, nbytes, median, ranks),
    }


def main(argv=None):
    a = parse_args(argv)
    started = time.time()
    launch = detect()
    device, binding = _device(a.device, launch, Path(a.out).parent)
    mine = cpus.of(launch)
    if device.type == "cpu":  # the rank's share of its CPUs
        torch.set_num_threads(mine.per_rank)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(
        backend,
        rank=launch.rank,
        world_size=launch.world_size,
        init_method=f"tcp://{launch.master_addr}:{launch.master_port}",
    )
    host = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    hosts = [None] * launch.world_size
    dist.all_gather_object(hosts, host)
    bindings = [None] * launch.world_size
    dist.all_gather_object(bindings, binding)
    buf = torch.ones(a.sizes[-1] // ELEMENT_BYTES, dtype=torch.float32, device=device)
    results = []
    for collective in a.collectives:
        for nbytes in a.sizes:
            per_rank = measure(collective, buf, nbytes // ELEMENT_BYTES, a, device, launch)
            rec = size_record(collective, nbytes, per_rank, launch.world_size)
            results.append(rec)
            if launch.rank == 0:
                print(
                    f"{collective:10s} {nbytes:>12d} B  median {rec['median_s'] * 1e6:12.1f} us  "
                    f"algbw {rec['algbw_GBps']:8.3f}  busbw {rec['busbw_GBps']:8.3f} GB/s",
                    file=sys.stderr,
                    flush=True,
                )
    if launch.rank == 0:
        cuda = device.type == "cuda"
        write_json(
            a.out,
            {
                # wall-clock start and end of rank 0's measurement: no other job ran beside it
                "started_at": started,
                "ended_at": time.time(),
                "source": "torch.distributed",
                "backend": backend,
                "world_size": launch.world_size,
                "num_nodes": len(set(hosts)),
                "rank_hosts": hosts,
                "launch": launch.as_dict(),
                "cpus": mine.describe(torch=torch.get_num_threads()),  # rank 0's
                "device": torch.cuda.get_device_name(device) if cuda else f"CPU: {cpu_model()}",
                "gpu_binding": gpu_bindings(bindings, hosts),
                "versions": {
                    "torch": torch.__version__,
                    "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else "",
                },
                "nccl_env": comm_env.recorded(),
                # in a container the nccl_env above is the rank's view; this says whether it was the launcher's
                **({"container_env": seen} if (seen := container_env.record()) is not None else {}),
                "dtype": "float32",
                "in_place": True,
                "warmup": a.warmup,
                "iterations": a.iterations,
                "timer": "CUDA events" if cuda else "perf_counter around the blocking call",
                "call_time": "slowest rank per call, each call after a barrier",
                "results": results,
            },
        )
    dist.barrier(**({"device_ids": [device.index]} if device.type == "cuda" else {}))
    dist.destroy_process_group()


if __name__ == "__main__":
    run_main(main)
