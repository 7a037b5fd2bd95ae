"""NVIDIA's nccl-tests beside our own measurement: all_reduce_perf and broadcast_perf from a build
of nccl-tests (config interconnect.nccl_tests), with the sizes, warm-up and iterations of
collectives.py, started on the run's nodes and GPUs; their printed table parsed into one JSON.

    python -m workflow_scripts.interconnect.nccl_tests --build NCCL_TESTS [--collectives ...] \\
        [--min-bytes 8 --max-bytes N --warmup 5 --iterations 20] [launcher options] --out OUT.json

Geometry. Through srun (a SLURM job) the binaries run as the training ranks do, one task per GPU
on every node (-g 1): that needs nccl-tests built with MPI=1, and an srun that starts MPI
programs (--srun-mpi, config systems.<name>.srun_mpi); a build or launch without MPI would run
as separate one-GPU worlds, which is detected from its output and refused: first on the
smallest message alone, so a wrong launch fails before the sweep. The binaries run in the
system's PyTorch environment (--exec: its container) with the launcher's environment for the
ranks (config nccl_env), recorded in the JSON. Elsewhere (one node) one process drives all the node's GPUs (-g
K), the way
nccl-tests runs without MPI. The rows keep nccl-tests' own figures: the mean time of its timed
iterations (it times them together, not one by one) and its algbw/busbw, in-place (as torch's
collectives are); the out-of-place figures are kept in the JSON.
"""

import argparse
import os
import re
import shlex
import sys
import tempfile
from pathlib import Path

from ..cluster import launcher, nccl_log
from ..common.atomic import write_json
from ..common.errors import StageError, run_main
from ..common.schema import default as config_default
from .bandwidth import COLLECTIVES, message_sizes

BINARY = {c: f"{c}_perf" for c in COLLECTIVES}  # all_reduce_perf, broadcast_perf
# The first columns of nccl-tests' table (src/util.cu prints them): the message, then time,
# algbw, busbw and wrong elements, out-of-place and then in-place. Newer versions add columns after.
COLUMNS = [
    "size",
    "count",
    "type",
    "redop",
    "root",
    "time",
    "algbw",
    "busbw",
    "#wrong",
    "time",
    "algbw",
    "busbw",
    "#wrong",
]
RANK_LINE = re.compile(
    r"^#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.*)$"
)
SRUN_LABEL = re.compile(r"^\s*\d+:\s?")  # srun --label's "<task>: " prefix


def binary(build, collective):
    """The nccl-tests binary for a collective in a build: the folder that holds the binaries, or
    the checkout whose build/ does. A clear error naming the config key otherwise."""
    build = Path(build)
    for folder in (build, build / "build"):
        exe = folder / BINARY[collective]
        if exe.is_file() and os.access(exe, os.X_OK):
            return exe
    raise StageError(
        f"config interconnect.nccl_tests = {str(build)!r}: no executable {BINARY[collective]} in it or in "
        f"its build/ (build NVIDIA nccl-tests there: make MPI=1 for runs over several nodes)"
    )


def _number(text):
    return None if text == "N/A" else float(text)


def parse(text, collective):
    """nccl-tests' printed output -> the ranks it ran (rank -> host, device) and one record per size."""
    ranks, rows, header = {}, [], None
    for line in text.splitlines():
        line = SRUN_LABEL.sub("", line, count=1).rstrip()
        m = RANK_LINE.match(line)
        if m:
            ranks[int(m.group(1))] = {"host": m.group(2), "device": m.group(3).strip()}
            continue
        words = line.lstrip("#").split()
        if line.startswith("#") and words[:2] == ["size", "count"]:
            header = words
            if header[: len(COLUMNS)] != COLUMNS:
                raise StageError(
                    f"{collective}: nccl-tests printed a table of unexpected columns {header}; "
                    f"this parser reads {COLUMNS}"
                )
            continue
        if header is None or line.startswith("#") or len(words) < len(COLUMNS) or not words[0].isdigit():
            continue
        size, count = int(words[0]), int(words[1])
        oop = dict(zip(("time_us", "algbw_GBps", "busbw_GBps", "wrong"), map(_number, words[5:9])))
        inp = dict(zip(("time_us", "algbw_GBps", "busbw_GBps", "wrong"), map(_number, words[9:13])))
        rows.append(
            {
                "collective": collective,
                "bytes": size,
                "count": count,
                "type": words[2],
                "time_s": inp["time_us"] / 1e6,
                "algbw_GBps": inp["algbw_GBps"],
                "busbw_GBps": inp["busbw_GBps"],
                "wrong": inp["wrong"],
                "out_of_place": oop,
            }
        )
    if header is None or not rows:
        raise StageError(f"{collective}: no result table in nccl-tests' output (see the log above)")
    return ranks, rows


def command(exe, a, gpus_per_process, min_bytes, max_bytes):
    return [
        *shlex.split(a.exec),
        str(exe),
        "-b",
        str(min_bytes),
        "-e",
        str(max_bytes),
        "-f",
        "2",
        "-n",
        str(a.iterations),
        "-w",
        str(a.warmup),
        "-g",
        str(gpus_per_process),
    ]


def run_one(collective, a, min_bytes, max_bytes, env_record=None):
    """One binary in the run's geometry over these sizes; its output (also copied to our log) and
    the parsed table."""
    exe = binary(a.build, collective)
    world = a.nodes * a.nproc_per_node
    if launcher.uses_srun(a, a.nproc_per_node):
        cmd, geometry = command(exe, a, 1, min_bytes, max_bytes), a
    else:
        cmd = command(exe, a, a.nproc_per_node, min_bytes, max_bytes)
        geometry = argparse.Namespace(**{**vars(a), "nproc_per_node": 1})
    print("nccl-tests:", " ".join(cmd), file=sys.stderr, flush=True)
    with tempfile.TemporaryFile("w+") as out:
        rc = launcher.run(cmd, geometry, stdout=out, env_record=env_record)
        out.seek(0)
        text = out.read()
    sys.stderr.write(text)
    if rc != 0:
        raise StageError(f"{exe} failed with exit status {rc} (its output is in the log)")
    ranks, rows = parse(text, collective)
    if len(ranks) != world:
        raise StageError(
            f"{exe} ran {len(ranks)} rank(s) per world, not the run's {world}: over srun each task "
            f"must join one world, so build nccl-tests with MPI=1 and let srun start MPI programs: "
            f"config systems.<name>.srun_mpi (now {a.srun_mpi or 'unset: the cluster default'!r}), "
            f"e.g. pmix (srun --mpi=list shows the cluster's)"
        )
    return {"command": cmd, "ranks": ranks, "rows": rows, "output": text}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True, help="config interconnect.nccl_tests")
    ap.add_argument("--collectives", nargs="+", choices=COLLECTIVES, default=list(COLLECTIVES))
    ap.add_argument("--min-bytes", type=int, default=config_default("interconnect.min_bytes"))
    ap.add_argument("--max-bytes", type=int, default=2**30)
    ap.add_argument("--warmup", type=int, default=config_default("interconnect.warmup"))
    ap.add_argument("--iterations", type=int, default=config_default("interconnect.iterations"))
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--exec",
        default="",
        help="words that run a program in the system's PyTorch environment "
        "(its container's exec line; empty: on the host), as a shell would split them",
    )
    launcher.add_arguments(ap)
    a = ap.parse_args(argv)
    try:
        sizes = message_sizes(a.min_bytes, a.max_bytes)
    except ValueError as exc:
        ap.error(str(exc))
    # The smallest message alone first: a launch that does not make one world fails in seconds,
    # not after a whole sweep in every task.
    run_one(a.collectives[0], a, a.min_bytes, a.min_bytes)
    env = {}
    runs = {c: run_one(c, a, a.min_bytes, a.max_bytes, env) for c in a.collectives}
    first = next(iter(runs.values()))["ranks"]
    hosts = [first[r]["host"] for r in sorted(first)]
    for c, r in runs.items():
        missing = sorted(set(sizes) - {row["bytes"] for row in r["rows"]})
        if missing:
            raise StageError(f"{c}: nccl-tests printed no row for {len(missing)} size(s), e.g. {missing[0]} B")
    write_json(
        a.out,
        {
            "source": "nccl-tests",
            "backend": "nccl",
            "build": str(Path(a.build).resolve()),
            "world_size": len(hosts),
            "num_nodes": len(set(hosts)),
            "rank_hosts": hosts,
            "device": first[min(first)]["device"],
            "nccl_env": env,
            # the last binary's, read after the launcher returned (every rank's debug file closed)
            "nccl": nccl_log.read_logs(a.nccl_log_dir) if a.nccl_log_dir else None,
            "dtype": "float",
            "in_place": True,
            "warmup": a.warmup,
            "iterations": a.iterations,
            "timer": "nccl-tests: the timed iterations together, mean per iteration",
            "commands": {c: r["command"] for c, r in runs.items()},
            "output": {c: r["output"] for c, r in runs.items()},
            "results": [row for r in runs.values() for row in r["rows"]],
        },
    )


if __name__ == "__main__":
    run_main(main)
