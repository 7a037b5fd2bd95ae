"""The pipeline's PyTorch trainer beside a plain loop of the same settings, in one call, on one GPU
or several of one node (docs/benchmarks.md, "The study's settings on one GPU").

    python3 -m benchmarks.trainer_vs_plain --list
    python3 -m benchmarks.trainer_vs_plain --dry-run --items preset-fp16                      # the commands
    python3 -m benchmarks.trainer_vs_plain --items preset-fp16,plain-preset-fp16 --repeats 3 --out OUT
    python3 -m benchmarks.trainer_vs_plain --data LMDB --items real-preset-fp16@12 --out OUT

A point is a config the pipeline runs: `preset` is config.yaml + presets/study.yaml, `defaults` is
config.yaml at a GPU's size (study_points.DEFAULTS); its precision picks the run. The trainer's command
line is the one the sweep's rule gives that run (plan/commands.py, from the config with the
schema's defaults), with --out and, for real data, --data replaced. The plain loop
(benchmarks/plain_loop.py, none of the pipeline's code) runs the same model, batch, precision, 16-bit
type, fp32 math and torch.compile mode as the trainer resolves them on this GPU.

An item's name: [plain-|real-|check-]POINT[xGPUS][@CPUS][+VARIANT...]
  POINT      preset-fp32, preset-fp16, defaults-fp16
  plain-     the plain loop (else the pipeline's trainer on synthetic data)
  real-      the trainer on --data through the point's input path (DALI on a GPU)
  check-     preflight's input check of the point (preflight/preflight_job.py --only-input), judged
             as preflight's data table judges it
  xGPUS      the point at GPUS GPUs of one node: the trainer (and the check) under the project's
             launcher with the sweep rule's geometry words, the plain loop under torchrun with DDP
             as the trainer resolves it; without xGPUS one GPU, the trainer started directly
  @CPUS      a node's share of CPUs per GPU: the processes bound to CPUs 0..GPUS x CPUS - 1 (taskset)
  +VARIANT   config values or trainer words (study_points.VARIANTS), one or more, e.g. +lag1+threads4
Items run in the order given, each --repeats times, the repeats of a list alternated (a, b, a, b);
an item whose estimate no longer fits --budget-s is recorded as skipped. Writes OUT/results.json,
OUT/results.md, and prints the table.
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.multicast import MULTICAST_OFF as SAFE_ENV  # noqa: E402
from benchmarks.study_points import (  # noqa: E402
    FRAMEWORK,
    OVERRIDES,
    POINTS,
    SYSTEM,
    VARIANTS,
    config_of,
    launcher_words,
    parse_item,
    trainer_words,
    words_of,
)

PY = sys.executable
EST_S = {"plain": 30, "synthetic": 30, "real": 35, "check": 75}


def pinned(item):
    cpus = item["cpus"] and item["cpus"] * (item.get("gpus") or 1)
    return ["taskset", "-c", f"0-{cpus - 1}"] if cpus else []


def with_data(words, data):
    """The words with --data DATA, or without --data (None: synthetic data reads none)."""
    out = list(words)
    if "--data" in out:
        i = out.index("--data")
        del out[i : i + 2]
    return out + (["--data", str(data)] if data else [])


def resolved(words, gpus=1):
    """What the trainer resolves its words to on this machine's GPU (pytorch_options.Settings), as a
    rank of a run of `gpus` GPUs of one node."""
    import torch

    from benchmarks.gpu_parts import trainer_parser
    from workflow_scripts.train.pytorch_options import resolve

    args = trainer_parser().parse_args([*words, "--out", "/nonexistent"])
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    return args, resolve(args, device, distributed=gpus > 1)


def plain_command(item, out):
    gpus = item["gpus"] or 1
    args, s = resolved(trainer_words(item["point"], "synthetic", item["variants"], gpus), gpus)
    amp = str(s.amp_dtype).replace("torch.", "") if s.amp_dtype else "bfloat16"
    ddp = []
    if item["gpus"]:
        launch = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={gpus}"]
        ddp = ["--ddp-graph", s.ddp_graph, "--bucket-cap-mb", str(s.bucket_cap_mb)]
        ddp += ["--broadcast-buffers", "on" if s.broadcast_buffers else "off"]
    return [
        *pinned(item),
        PY,
        *(launch if item["gpus"] else []),
        "-m",
        "benchmarks.plain_loop",
        "--batch",
        str(args.batch_per_gpu),
        "--image-size",
        str(args.image_size),
        "--precision",
        args.precision,
        "--amp-dtype",
        amp,
        "--fp32-math",
        args.fp32_math,
        "--compile",
        s.compile or "off",
        "--warmup",
        str(args.warmup_steps),
        "--steps",
        str(args.steps),
        "--read-loss",
        "every" if "read-every" in item["variants"] else "never",
        *ddp,
        "--out",
        str(out),
    ]


def trainer_command(item, run_dir, data):
    real = item["kind"] == "real"
    gpus = item["gpus"] or 1
    words = with_data(
        trainer_words(item["point"], "real" if real else "synthetic", item["variants"], gpus), data if real else None
    )
    words += words_of(item)
    launch = []
    if item["gpus"]:
        launch = [PY, "-m", "workflow_scripts.cluster.launcher"]
        launch += [*launcher_words(item["point"], item["variants"], gpus), "--"]
    cmd = [*pinned(item), *launch, PY, "-m", "workflow_scripts.train.pytorch_ddp", *words, "--out", str(run_dir)]
    return spied(cmd, run_dir) if "spy" in item["variants"] else cmd


def spied(cmd, run_dir):
    """cmd under py-spy: every thread's Python and native stacks sampled 100 times a second, without
    pausing the process, into RUN_DIR.spy.txt (collapsed stacks: where the host's time went)."""
    spy = os.environ.get("PY_SPY", "py-spy")
    out = f"{run_dir}.spy.txt"
    return [
        spy,
        "record",
        "--native",
        "--nonblocking",
        "--threads",
        "--idle",
        "-r",
        "100",
        "-f",
        "raw",
        "-o",
        out,
        "--",
        *cmd,
    ]


def check_command(item, out, data):
    """Preflight's input check of the point, as its rule runs it on a node of the point's CPUs."""
    from benchmarks import input_check_run

    gpus = item["gpus"] or 1
    config = config_of(item["point"], item["variants"], gpus)
    config["training"]["precisions"] = [POINTS[item["point"]][2]]
    launch = launcher_words(item["point"], item["variants"], gpus) if item["gpus"] else ["--nproc-per-node", "1"]
    return [*pinned(item), *input_check_run.command(config, SYSTEM, FRAMEWORK, data, out, PY, launch)]


def run_summary(run_dir):
    s = json.loads((run_dir / "summary.json").read_text())
    steps = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines() if line.strip()]
    timed = [x for x in steps if x["phase"] == "timed"]
    walls = sorted(x["wall_s"] for x in timed)
    device = [x["device_s"] for x in timed if x.get("device_s") is not None]
    return {
        "images_per_s": s["images_per_s"],
        "step_cv": s["step_images_per_s_cv"],
        "window_cv": s.get("window_images_per_s_cv"),
        "stable": s["stable"],
        "median_step_ms": statistics.median(walls) * 1e3,
        "median_device_ms": statistics.median(device) * 1e3 if device else None,
        "slow_steps": sum(w > 1.06 * statistics.median(walls) for w in walls),
        "loss_lag": s.get("loss_lag"),
        "fetch_ahead": s.get("fetch_ahead"),
        "drained_batches": s.get("drained_batches"),
        "input_wait_s_timed": s.get("input_wait_s_timed"),
        "seconds_timed": s.get("seconds_timed"),
        "wait_share": (s.get("input_wait_s_timed") or 0) / s["seconds_timed"] if s.get("seconds_timed") else None,
        "execution_mode": s.get("execution_mode"),
        "pytorch": s.get("pytorch"),
        "threads": (s.get("cpus") or {}).get("threads"),
        "cpus_per_rank": (s.get("cpus") or {}).get("per_rank"),
        "gpu_input": s.get("gpu_input"),
        "isolated": s.get("isolated"),
        "device": s.get("device"),
        "last_loss": s.get("last_loss"),
        "timed_cpu": s.get("timed_cpu"),
    }


def run_item(item, work, out, data, timeout):
    name = item["name"]
    path = work / "runs" / f"{item['index']:02d}_{name}_{item['repeat']}".replace("@", "at").replace("+", "_")
    if item["kind"] == "plain":
        path.parent.mkdir(parents=True, exist_ok=True)
        cmd = plain_command(item, path.with_suffix(".json"))
    elif item["kind"] == "check":
        cmd = check_command(item, path, data)
    else:
        cmd = trainer_command(item, path, data)
    env = {**os.environ, **SAFE_ENV, "PYTHONUNBUFFERED": "1"}
    log = out / "logs" / f"{path.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    with open(log, "w") as f:
        print(shlex.join(cmd), file=f, flush=True)
        try:
            rc = subprocess.run(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    rec = {**item, "command": shlex.join(cmd), "wall_s": time.perf_counter() - t, "rc": rc}
    try:
        if item["kind"] == "plain":
            rec.update(json.loads(path.with_suffix(".json").read_text()))
        elif item["kind"] == "check":
            from benchmarks import input_check_run

            rec.update(input_check_run.verdict(path))
        else:
            rec.update(run_summary(path))
        rec["status"] = "ok" if rc == 0 else f"rc {rc}"
    except (OSError, ValueError, KeyError) as exc:
        rec["status"] = f"failed (rc {rc}): {type(exc).__name__}: {exc}"
        rec["log_tail"] = log.read_text()[-2000:]
    return rec


def make_photos(sources, work, threads, classes=100, per_class=128):
    """benchmarks/imagenet_like.py's photographs (classes x per_class train images) in the ILSVRC2012
    layout, indexed and converted to the pipeline's LMDB by the data stage's own modules; reused
    where made before. -> (the LMDB, what was made)."""
    from benchmarks import imagenet_like
    from benchmarks.gpu_parts import SEED, _convert

    lmdb = work / "photos" / "lmdb"
    if (lmdb / "manifest.json").exists():
        return lmdb, {"reused": True}
    t = time.perf_counter()
    root = work / "photos" / "ILSVRC2012"
    stats = imagenet_like.make(root, imagenet_like.folder_photos(sources), classes, per_class, 2, SEED, threads)
    _convert("index", "--root", root, "--out", work / "photos" / "index", "--threads", threads)
    _convert("lmdb_caffe2", "--index", work / "photos" / "index", "--out", lmdb, "--threads", threads)
    return lmdb, {"made_s": time.perf_counter() - t, "train": stats["train"]}


def schedule(names, repeats):
    """The items of `names`, each `repeats` times, the list's repeats alternated."""
    out = []
    for r in range(1, repeats + 1):
        for name in names:
            out.append({"name": name, "repeat": r, **parse_item(name)})
    return out


def table(results):
    """Markdown: one row per item name, its repeats' figures, and the pipeline's mean over the plain
    loop's of the same point and CPUs."""
    by = {}
    for r in results:
        by.setdefault(r["name"], []).append(r)
    rows = [
        "| item | runs | images/s | window CV | step CV | other |",
        "|---|---|---|---|---|---|",
    ]
    means = {}
    for name, rs in by.items():
        ok = [r for r in rs if r.get("status") == "ok" and r.get("images_per_s")]
        if ok:
            means[name] = statistics.fmean(r["images_per_s"] for r in ok)
        fig = "; ".join(f"{r['images_per_s']:,.0f}" for r in ok) or "-"
        wcv = "; ".join(f"{r['window_cv']:.1%}" if r.get("window_cv") is not None else "-" for r in ok)
        if ok and "window_images_per_s_cv" in ok[0]:
            wcv = "; ".join(f"{r['window_images_per_s_cv']:.1%}" for r in ok)
        scv = "; ".join(f"{r.get('step_cv', r.get('step_images_per_s_cv', 0)):.1%}" for r in ok if "verdict" not in r)
        other = "; ".join(other_text(r) for r in rs)
        rows.append(f"| {name} | {len(ok)}/{len(rs)} | {fig} | {wcv} | {scv} | {other} |")
    ratios = []
    for name, mean in means.items():
        item = parse_item(name)
        at = f"@{item['cpus']}" if item["cpus"] else ""
        point = item["point"] + (f"x{item['gpus']}" if item["gpus"] else "")
        if item["kind"] == "synthetic" and not item["variants"]:
            refs = [(f"plain-{point}{at}", "plain loop")]
        elif item["kind"] == "real":  # the same step on synthetic data: at the same CPUs, else on all
            refs = [(f"{point}{at}", "synthetic"), (point, "synthetic")][: 2 if at else 1]
        else:
            refs = []
        for ref, what in refs:
            if ref in means:
                ratios.append(f"- {name}: {mean / means[ref]:.1%} of {what} ({ref}, mean {means[ref]:,.0f})")
                break
        if (item["gpus"] or 1) > 1 and item["kind"] in ("synthetic", "plain", "real"):
            prefix = "" if item["kind"] == "synthetic" else item["kind"] + "-"
            tail = at + "".join("+" + v for v in item["variants"])
            ones = [f"{prefix}{item['point']}{g}{tail}" for g in ("x1", "")]
            one = next((r for r in ones if r in means), None)
            if one:
                n = item["gpus"]
                eff = mean / (n * means[one])
                ratios.append(f"- {name}: scaling {eff:.1%} of {n} x {one} (mean {means[one]:,.0f})")
    return "\n".join(rows + [""] + ratios)


def other_text(r):
    if r.get("status") != "ok":
        return r.get("status", "")
    if "verdict" in r:
        return r["verdict"]
    bits = []
    if r.get("wait_share") is not None:
        bits.append(f"wait {r['wait_share']:.1%}")
    if r.get("threads"):
        bits.append(",".join(f"{k} {v}" for k, v in r["threads"].items()))
    if r.get("loss_lag") is not None:
        bits.append(f"lag {r['loss_lag']}")
    if r.get("drained_batches") is not None:
        bits.append(f"drained {r['drained_batches']}")
    dali = r.get("gpu_input") or {}
    if dali.get("decoder"):
        bits.append(f"{dali['decoder']}" + (f" {dali['hw_share']:.2f}" if dali.get("hw_share") is not None else ""))
    if r.get("median_step_ms"):
        bits.append(f"median {r['median_step_ms']:.1f} ms")
    cpu = r.get("timed_cpu")
    if cpu:
        most = sorted(cpu["by_thread"].items(), key=lambda kv: -kv[1])[:4]
        top = ", ".join(f"{k} {v:.1f}" for k, v in most)
        bits.append(f"cores {cpu['cores']:.1f} ({top})")
    bits.append(f"{r['wall_s']:.0f} s")
    return " ".join(bits)


def tool_output(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{cmd[0]}: {exc}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", default="preset-fp16,plain-preset-fp16", help="comma-separated item names")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--then", default="", help="items run once each after the repeated ones")
    ap.add_argument("--data", default="", help="the LMDB the real- and check- items read")
    ap.add_argument(
        "--photos",
        default="",
        help="a folder of source photos (imagenet_like --save-sources): make the ImageNet-like set's LMDB "
        "under --work (or reuse it) and read it as --data",
    )
    ap.add_argument("--work", default=str(REPO / ".work"))
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "trainer_vs_plain"))
    ap.add_argument("--budget-s", type=float, default=520)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--dry-run", action="store_true", help="print each item's command")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config value for every point")
    a = ap.parse_args(argv)
    OVERRIDES[:] = a.set
    if a.list:
        print("points:", ", ".join(POINTS), "\nvariants:", ", ".join(VARIANTS))
        return
    items = schedule(a.items.split(","), a.repeats) + schedule(list(filter(None, a.then.split(","))), 1)
    for index, item in enumerate(items):
        item["index"] = index
    work, out = Path(a.work), Path(a.out)
    if a.dry_run:
        for item in items:
            if item["kind"] == "plain":
                print(item["name"], shlex.join(plain_command(item, work / "x.json")))
            elif item["kind"] == "check":
                print(item["name"], shlex.join(check_command(item, work / "check", a.data or "LMDB")))
            else:
                print(item["name"], shlex.join(trainer_command(item, work / "run", a.data or "LMDB")))
        return
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(work / "inductor-cache"))
    out.mkdir(parents=True, exist_ok=True)
    start, results = time.perf_counter(), []
    # an item's length, guessed from this call's runs of its kind: a first run of a name pays the
    # compile that its repeats find in the cache, so the two are guessed apart (a repeat from the
    # kind's last repeat, else EST_S; a first run from the kind's last first run, else EST_S)
    walls, seen = {}, set()
    meta = {"argv": sys.argv[1:] if argv is None else argv, "date": time.strftime("%Y-%m-%d %H:%M %Z")}
    meta["gpu"] = tool_output(
        "nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,power.limit", "--format=csv,noheader"
    )
    meta["cpus"] = os.cpu_count()
    meta["lscpu"] = tool_output("lscpu")
    if a.photos:
        a.data, meta["photos"] = make_photos(a.photos, work, os.cpu_count())
        print(f"photos: {meta['photos']}", flush=True)
    for item in items:
        left = a.budget_s - (time.perf_counter() - start)
        again = item["name"] in seen
        est = round(walls.get((item["kind"], again), EST_S[item["kind"]]))
        if left < est:
            results.append({**item, "status": f"skipped: {left:.0f} s left of --budget-s, about {est} s needed"})
            print(f"{item['name']} #{item['repeat']}: skipped", flush=True)
            continue
        rec = run_item(item, work, out, a.data, timeout=max(60, left + 30))
        results.append(rec)
        if rec.get("status") == "ok":
            walls[item["kind"], again] = rec["wall_s"]
            seen.add(item["name"])
        rate = rec.get("images_per_s") or 0
        print(f"{item['name']} #{item['repeat']}: {rec['status']} {rate:,.0f} ({rec['wall_s']:.0f} s)", flush=True)
        (out / "results.json").write_text(json.dumps({**meta, "results": results}, indent=1))
    md = table(results)
    (out / "results.md").write_text(f"{meta}\n\n{md}\n")
    print(md)


if __name__ == "__main__":
    main()
