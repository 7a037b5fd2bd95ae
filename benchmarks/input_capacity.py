"""Each framework's training input path alone, no model and no step: how many images a second it
hands one rank on this machine's CPUs (workflow_scripts/train/input_capacity.py, the trainers' own
input code).

    python3 benchmarks/input_capacity.py --root DIR --out OUT --budget-s 560
    python3 benchmarks/input_capacity.py --converted OUT/converted --out OUT --threads rule,1,2
    python3 benchmarks/input_capacity.py --root DIR --out OUT --dry-run   # the commands, flags checked

--root is a dataset in ILSVRC2012's raw layout (train/<wnid>/*.JPEG, val/...: the embedded
default, benchmarks/imagenet_like.py's set, ILSVRC2012 itself). It is indexed and converted as
rules/data.smk does, by the same modules with the config's defaults, into OUT/converted/{index,
tfrecord,recordio,lmdb} (kept: a later call with --converted OUT/converted measures again without
converting; so does a call whose OUT already holds them). Only the formats of the paths asked for
are made, each with its framework's interpreter. The TFRecord shards hold as many images each as
the study's 1024 shards of ILSVRC2012 train, at least 8 (the trainer interleaves 8 of them).

Each path at each --threads value is one run of input_capacity's CLI in its framework's
interpreter (--python-tf for tensorflow and mxnet, --python-torch for PyTorch's paths); a path whose
interpreter is missing or lacks its modules is listed as skipped, with why. Paths: tensorflow,
mxnet, dali-cpu, dali-mixed, gpu, cpu (PyTorch's input paths; dali-mixed and gpu need a GPU);
default tensorflow, mxnet, dali-cpu, and with --device gpu also dali-mixed and gpu. Runs start in
order while --budget-s allows one more; what does not fit is listed as skipped. Writes
OUT/input_capacity.md (the table) and OUT/input_capacity.json (every result), OUT/runs/<run>.json
and OUT/logs/. "others' CPU" is the share of the machine's CPUs that other processes used while a
run was timed: a figure measured beside other work measures both.
"""

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a file, not with -m from the repository
    sys.path.insert(0, str(REPO))

from workflow_scripts.cluster.provenance import cpu_model  # noqa: E402
from workflow_scripts.train import input_capacity  # noqa: E402

CLI = "workflow_scripts.train.input_capacity"
# path -> (interpreter, the CLI's words for it, the format it reads, the modules it needs, GPU only)
PATHS = {
    "tensorflow": ("tf", ["--framework", "tensorflow"], "tfrecord", ("tensorflow",), False),
    "mxnet": ("tf", ["--framework", "mxnet"], "recordio", ("mxnet",), False),
    "dali-cpu": (
        "torch",
        ["--framework", "pytorch", "--input", "dali", "--dali-decoder", "cpu"],
        "lmdb",
        ("torch", "torchvision", "nvidia.dali"),
        False,
    ),
    "dali-mixed": (
        "torch",
        ["--framework", "pytorch", "--input", "dali", "--dali-decoder", "mixed"],
        "lmdb",
        ("torch", "torchvision", "nvidia.dali"),
        True,
    ),
    "gpu": ("torch", ["--framework", "pytorch", "--input", "gpu"], "lmdb", ("torch", "torchvision"), True),
    "cpu": ("torch", ["--framework", "pytorch", "--input", "cpu"], "lmdb", ("torch", "torchvision"), False),
}
LABELS = {"tensorflow": "tf.data", "mxnet": "ImageRecordIter"}  # in the table
CPU_PATHS, GPU_PATHS = ("tensorflow", "mxnet", "dali-cpu"), ("dali-mixed", "gpu")
# format -> (its converter in workflow_scripts/data, the interpreter that runs it, the modules it needs)
CONVERTERS = {
    "tfrecord": ("tfrecord", "tf", ("tensorflow",)),
    "recordio": ("recordio", "tf", ("mxnet",)),
    "lmdb": ("lmdb_caffe2", "torch", ("lmdb",)),
}
# split -> (ILSVRC2012's images, the study's TFRecord shards, the fewest shards here)
STUDY_SHARDS = {"train": (1281167, 1024, 8), "val": (50000, 128, 2)}
START_ALLOWANCE_S = 60  # an interpreter's start, imports and the path's construction, beyond --seconds


def envs():
    return yaml.safe_load((REPO / "config.yaml").read_text())["envs"]


def arg_parser():
    e = envs()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--root", help="a dataset in ILSVRC2012's raw layout, converted into OUT/converted")
    src.add_argument("--converted", help="a folder holding tfrecord/, recordio/ and lmdb/ (a data_dir)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "input_capacity"))
    ap.add_argument("--paths", default="", help=f"comma-separated, of {', '.join(PATHS)}; default: see above")
    ap.add_argument("--threads", default="rule", help="comma-separated thread counts; rule: the trainer's own")
    ap.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto", help="auto: gpu where torch sees one")
    ap.add_argument("--batch", type=int, default=64, help="images per batch (one rank's)")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--seconds", type=float, default=20, help="timed seconds per run")
    ap.add_argument("--warmup-batches", type=int, default=10)
    ap.add_argument(
        "--budget-s",
        type=float,
        default=560,
        help="seconds for the whole call, conversion included: no run starts that would end later",
    )
    ap.add_argument("--python-tf", default=e["tensorflow"], help="TensorFlow's and MXNet's interpreter")
    ap.add_argument("--python-torch", default=e["pytorch"], help="PyTorch's (and DALI's) interpreter")
    ap.add_argument("--python-workflow", default=e["workflow"], help="the index stage's interpreter")
    ap.add_argument("--conversion-threads", type=int, default=os.cpu_count())
    ap.add_argument("--converter-args", default="", help="more words for every converter, e.g. '--shorter-cap 500'")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, each checked by the CLI's parser")
    return ap


def python(path):
    """An interpreter as given: a path relative to the repository, or a name on PATH."""
    return str(REPO / path) if "/" in path and not os.path.isabs(path) else path


def checkout_env():
    """This checkout first on PYTHONPATH, whichever checkout an interpreter's install names."""
    path = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def missing(interpreter, modules):
    """Why `interpreter` cannot run a path needing `modules`, or None: found, not imported (an
    import that fails anyway is the run's failure, with its message)."""
    probe = "import importlib.util as u, sys; print(' '.join(m for m in sys.argv[1:] if u.find_spec(m) is None))"
    try:
        proc = subprocess.run(
            [interpreter, "-c", probe, *modules], capture_output=True, text=True, timeout=120, env=checkout_env()
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{interpreter}: {exc}"
    if proc.returncode:
        return f"{interpreter} failed: {proc.stderr.strip()[-200:]}"
    lacking = proc.stdout.split()
    return f"{interpreter} cannot import {', '.join(lacking)}" if lacking else None


def sees_gpu(interpreter):
    probe = "import torch; print(torch.cuda.is_available())"
    try:
        proc = subprocess.run([interpreter, "-c", probe], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.stdout.strip().endswith("True")


def shards(split, images):
    """TFRecord shards of a split: as many images each as the study's shards of ILSVRC2012."""
    study_images, study_shards, fewest = STUDY_SHARDS[split]
    return min(study_shards, max(fewest, round(images * study_shards / study_images)))


def conversion_commands(a, pys, formats, work):
    """[(what, command)]: the index, then each format's converter, as rules/data.smk runs them."""
    threads = ["--threads", str(a.conversion_threads)]
    index = [pys["workflow"], "-m", "workflow_scripts.data.index", "--root", a.root, "--out", str(work / "index")]
    cmds = [("index", [*index, *threads])]
    for fmt in formats:
        module, env, _ = CONVERTERS[fmt]
        cmd = [pys[env], "-m", f"workflow_scripts.data.{module}", "--index", str(work / "index"), "--out"]
        cmds.append((fmt, [*cmd, str(work / fmt), *threads, *shlex.split(a.converter_args)]))
    return cmds


def convert(a, pys, formats, work, log):
    """Makes the formats work/ lacks; the TFRecord shard counts follow the index's image counts."""
    for what, cmd in conversion_commands(a, pys, formats, work):
        if (work / what).exists():
            print(f"{work / what} exists: not converted again", flush=True)
            continue
        if what == "tfrecord":
            images = json.loads((work / "index" / "summary.json").read_text())["images"]
            cmd += ["--train-shards", str(shards("train", images["train"]))]
            cmd += ["--val-shards", str(shards("val", images["val"]))]
        began = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=checkout_env())
        (log / f"convert_{what}.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode:
            raise SystemExit(f"{shlex.join(cmd)} failed:\n{proc.stderr[-3000:]}")
        print(f"converted {what} in {time.perf_counter() - began:.0f} s", flush=True)


def run_command(a, pys, name, threads, data, out):
    env, words, fmt, _, _ = PATHS[name]
    return [
        pys[env],
        "-m",
        CLI,
        *words,
        "--data",
        str(data / fmt),
        "--batch-per-gpu",
        str(a.batch),
        "--image-size",
        str(a.image_size),
        "--threads",
        "0" if threads == "rule" else str(threads),
        "--seconds",
        str(a.seconds),
        "--warmup-batches",
        str(a.warmup_batches),
        "--device",
        a.device,
        "--out",
        str(out),
    ]


def plan(a):
    """The (path, threads) runs asked for, in order."""
    names = [p for p in a.paths.split(",") if p] or [*CPU_PATHS, *(GPU_PATHS if a.device == "gpu" else ())]
    unknown = set(names) - set(PATHS)
    threads = [t if t == "rule" else int(t) for t in a.threads.split(",") if t]
    if unknown or not threads or any(t != "rule" and t < 1 for t in threads):
        raise SystemExit(f"--paths {a.paths!r} (of {', '.join(PATHS)}), --threads {a.threads!r}: rule or counts >= 1")
    return [(n, t) for n in names for t in threads]


def measure_all(a, pys, runs, data, out, began):
    rows, why_not = [], {}
    for name, threads in runs:
        env, _, fmt, modules, gpu_only = PATHS[name]
        row = {"path": name, "threads_asked": threads}
        if name not in why_not:
            why_not[name] = (
                "needs a GPU (--device gpu)"
                if gpu_only and a.device != "gpu"
                else missing(pys[env], modules) or (None if (data / fmt).is_dir() else f"no {data / fmt}")
            )
        left = a.budget_s - (time.perf_counter() - began)
        if why_not[name] or left < a.seconds + START_ALLOWANCE_S:
            rows.append({**row, "status": "skipped", "reason": why_not[name] or f"budget: {left:.0f} s left"})
            continue
        stem = f"{name}_t{threads}"
        cmd = run_command(a, pys, name, threads, data, out / "runs" / f"{stem}.json")
        row["command"] = shlex.join(cmd)
        print(f"# {stem}: {row['command']}", flush=True)
        try:
            proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=left, env=checkout_env())
        except subprocess.TimeoutExpired:
            rows.append({**row, "status": "failed", "reason": f"over the budget's {left:.0f} s"})
            continue
        (out / "logs" / f"{stem}.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode:
            last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
            rows.append({**row, "status": "failed", "reason": last[-300:]})
            continue
        rows.append({**row, "status": "ok", **json.loads(proc.stdout.strip().splitlines()[-1])})
    return rows


def table(rows):
    lines = [
        "| framework | input path | decoder | device | threads | CPUs | images/s | images/s per CPU | batch CV | "
        "timed / warm-up batches | others' CPU | status |",
        "|" + "---|" * 12,
    ]
    for r in rows:
        framework, path = PATHS[r["path"]][1][1], LABELS.get(r["path"], r["path"])
        if r["status"] != "ok":
            lines.append(
                f"| {framework} | {path} | - | - | {r['threads_asked']} | - | - | - | - | - | - | "
                f"{r['status']}: {r['reason'].replace('|', '/')} |"
            )
            continue
        threads = f"{r['threads']}" + ("" if r["threads_given"] else " (rule)")
        status = "ok" + (f": {r['note']}" if r.get("note") else "")
        lines.append(
            f"| {framework} | {path} | {r['decoder']} | {r['device']} | {threads} | {r['cpus']} | "
            f"{r['images_per_s']:.0f} | {r['images_per_s_per_core']:.1f} | {r['batch_time_cv']:.1%} | "
            f"{r['batches_timed']} / {r['warmup_batches']} | {r['others_cpu_share']:.1%} | {status} |"
        )
    return lines


def report(a, rows, data, out, argv):
    facts = {}
    manifest = next((data / f / "manifest.json" for f in CONVERTERS if (data / f / "manifest.json").exists()), None)
    if manifest:
        facts = json.loads(manifest.read_text())["splits"]["train"]
    images = facts.get("images", "?")
    head = (
        f"Input paths alone on {platform.node()} ({cpu_model()}, {len(os.sched_getaffinity(0))} CPUs): "
        f"{data} ({images} train images), batch {a.batch}, {a.image_size} px, {a.seconds:g} s timed "
        f"after at least {a.warmup_batches} warm-up batches per run."
    )
    command = shlex.join(["python3", "benchmarks/input_capacity.py", *argv])
    md = [head, "", *table(rows), "", f"    {command}", ""]
    (out / "input_capacity.md").write_text("\n".join(md))
    summary = {"date": time.strftime("%Y-%m-%d"), "host": platform.node(), "cpu_model": cpu_model()}
    summary |= {"command": command, "settings": vars(a), "data": str(data), "train_images": images, "rows": rows}
    (out / "input_capacity.json").write_text(json.dumps(summary, indent=2) + "\n")
    print("\n".join(md))


def main(argv=None):
    began = time.perf_counter()
    argv = sys.argv[1:] if argv is None else list(argv)
    a = arg_parser().parse_args(argv)
    # The stages run in the repository: paths as given are the caller's.
    a.root, a.converted, a.out = (str(Path(p).resolve()) if p else p for p in (a.root, a.converted, a.out))
    pys = {k: python(getattr(a, f"python_{k}")) for k in ("tf", "torch", "workflow")}
    out = Path(a.out)
    if a.device == "auto":
        a.device = "gpu" if not a.dry_run and sees_gpu(pys["torch"]) else "cpu"
    runs = plan(a)
    data = Path(a.converted) if a.converted else out / "converted"
    formats = sorted({PATHS[n][2] for n, _ in runs})
    if a.dry_run:
        if a.root:
            for _, cmd in conversion_commands(a, pys, formats, data):
                print(shlex.join(cmd))
        for name, threads in runs:
            cmd = run_command(a, pys, name, threads, data, out / "runs" / f"{name}_t{threads}.json")
            input_capacity.arg_parser().parse_args(cmd[3:])  # a flag the CLI lacks fails here
            print(shlex.join(cmd))
        return
    (out / "logs").mkdir(parents=True, exist_ok=True)
    (out / "runs").mkdir(exist_ok=True)
    if a.root:
        usable = [f for f in formats if not missing(pys[CONVERTERS[f][1]], CONVERTERS[f][2])]
        convert(a, pys, usable, data, out / "logs")
    report(a, measure_all(a, pys, runs, data, out, began), data, out, argv)


if __name__ == "__main__":
    main()
