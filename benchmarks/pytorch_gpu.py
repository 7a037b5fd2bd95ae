"""PyTorch ResNet-50 training throughput on GPUs: the plans of benchmarks/plans.py, each run the
project's trainer itself (pytorch_ddp, through workflow_scripts.cluster.launcher on several GPUs).

    python3 -m benchmarks.pytorch_gpu --list                             # the plans, what each measures
    python3 -m benchmarks.pytorch_gpu --plan inputs --dry-run            # its commands, flags checked, no GPU
    python3 -m benchmarks.pytorch_gpu --plan inputs --out OUT --budget-s 530
    python3 -m benchmarks.pytorch_gpu --plan scaling --gpus 2 --out OUT --budget-s 530

One call runs a plan's items in order within --budget-s; what does not fit is recorded as skipped,
never silently dropped. A run's images/s is its summary.json's: images timed / seconds timed over
the timed steps after the warm-up steps (which hold compilation and cuDNN tuning). Writes
OUT/results.json (everything, per-step times included), OUT/results.md (tables) and, per run,
OUT/run_<name>/ (its summary, steps and telemetry).
"""

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a file, not with -m from the repository
    sys.path.insert(0, str(REPO))

from benchmarks import figures, gpu_parts, plans, printing  # noqa: E402
from benchmarks.multicast import MULTICAST_OFF as SAFE_ENV  # noqa: E402
from benchmarks.runner import (  # noqa: E402
    TRAINER,
    part_command,
    run_long_test,
    run_part,
    run_variant,
    shown,
    trainer_command,
)


def _smi(*args, tool="nvidia-smi"):
    try:
        return subprocess.run([tool, *args], capture_output=True, text=True, timeout=60).stdout.strip()
    except OSError:
        return ""


def arg_parser():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", choices=sorted(plans.PLANS), help="benchmarks/plans.py; --list says what each measures")
    ap.add_argument("--list", action="store_true", help="print the plans and what each measures")
    ap.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan's commands, each trainer command checked against the trainer's own flags",
    )
    ap.add_argument("--gpus", type=int, default=2, help="GPUs of the plan's multi-GPU runs")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "pytorch_gpu"))
    ap.add_argument("--work", default=str(REPO / "benchmarks" / "out" / "gpu-work"))
    ap.add_argument("--budget-s", type=float, default=560, help="stop starting new work after this")
    ap.add_argument("--only", default="", help="comma-separated names of the plan's items")
    ap.add_argument(
        "--dataset",
        choices=("rendered", "photos"),
        default="rendered",
        help="the embedded generator's shapes, or benchmarks/imagenet_like.py's photographs",
    )
    ap.add_argument("--sources", help="--dataset photos: a folder of photos (imagenet_like --save-sources)")
    ap.add_argument("--shorter-cap", type=int, default=500, help="the 'capped' copy's conversion.shorter_cap")
    ap.add_argument(
        "--pick",
        help="an earlier photos call's results.json: photos-repeats also repeats its best DALI variant",
    )
    ap.add_argument("--classes", type=int, default=32)
    ap.add_argument("--per-class", type=int, default=128)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--batch", type=int, default=256, help="per GPU")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--precision", choices=("fp32", "fp16"), default="fp16")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=100, help="timed steps (the scale-out whitepaper's short test)")
    ap.add_argument("--part", choices=sorted(gpu_parts.PARTS), help=argparse.SUPPRESS)
    return ap


def selected(a, picked=None):
    """The plan's items that --only names; an unknown name is an error, not an empty call."""
    items = plans.items(a.plan, a.gpus, picked=picked)
    only = set(filter(None, a.only.split(",")))
    unknown = only - {i["name"] for i in items}
    if unknown:
        raise SystemExit(
            f"--only: {', '.join(sorted(unknown))} not in plan {a.plan} ({', '.join(i['name'] for i in items)})"
        )
    return [i for i in items if not only or i["name"] in only]


def dry_run(a, items, work):
    """Each item's command; every trainer command parsed by pytorch_ddp's own parser, so a plan that
    gives the trainer a flag it no longer has fails here, on any machine with torch."""
    parser = gpu_parts.trainer_parser()
    print(f"# plan {a.plan}: {plans.PLANS[a.plan]['measures']}")
    for item in items:
        if item["kind"] == "part":
            print(f"# {item['name']} (about {item['est_s']} s)\n{shown(part_command(item['name'], a, work), work)}")
            continue
        cmd, _ = trainer_command(item, work, a)
        words = cmd[cmd.index(TRAINER) + 1 :]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                parser.parse_args(words)
        except SystemExit:
            raise SystemExit(
                f"plan {a.plan}, {item['name']}: the trainer refuses its command: "
                f"{err.getvalue().strip().splitlines()[-1]}"
            ) from None
        many = f"{item['side_by_side']} x side by side, " if item.get("side_by_side") else ""
        print(f"# {item['name']} ({many}about {item['est_s']} s)\n{shown(cmd, work)}")


def main(argv=None):
    a = arg_parser().parse_args(argv)
    work = Path(a.work)
    if a.list:
        for name, plan in plans.PLANS.items():
            print(f"{name}: {plan['measures']}\n    {', '.join(i['name'] for i in plans.items(name, a.gpus))}")
        return
    if a.part and a.dry_run:
        print(f"# part {a.part}: {gpu_parts.PARTS[a.part].__name__} in {work}")
        return
    if a.part:
        work.mkdir(parents=True, exist_ok=True)
        (work / f"part_{a.part}.json").write_text(json.dumps(gpu_parts.PARTS[a.part](a, work)))
        return
    if not a.plan:
        raise SystemExit("--plan NAME (or --list)")
    picked, why = None, ""
    if a.pick and not (a.dry_run and not Path(a.pick).exists()):  # a dry run names the items it can
        picked, why = plans.pick(json.loads(Path(a.pick).read_text()), a.gpus)
    items = selected(a, picked)
    if a.dry_run:
        dry_run(a, items, work)
        return
    os.environ.update(SAFE_ENV)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(work / "inductor-cache"))
    work.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {
        "plan": a.plan,
        "measures": plans.PLANS[a.plan]["measures"],
        "argv": sys.argv[1:] if argv is None else argv,
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "budget_s": a.budget_s,
        "warmup_steps": a.warmup,
        "timed_steps": a.steps,
        "batch_per_gpu": a.batch,
        "image_size": a.image_size,
        "cpus": os.cpu_count(),
        "dataset": a.dataset,
        "picked": why,
        "variants": [],
    }
    results["nvidia_smi"] = _smi(
        "--query-gpu=name,memory.total,clocks.max.sm,power.limit,driver_version", "--format=csv,noheader"
    ).splitlines()
    results["gpu"] = results["nvidia_smi"][0].split(",")[0] if results["nvidia_smi"] else "no GPU"
    results["topology"] = _smi("topo", "-m")
    # which of the cores DALI's threads and the training thread share are one physical core's
    results["cpu_topology"] = _smi("--extended=CPU,CORE,SOCKET,NODE", tool="lscpu")

    def left():
        return a.budget_s - (time.perf_counter() - start)

    def save():
        results["elapsed_s"] = time.perf_counter() - start
        results["derived"] = figures.derive(results)
        (out / "results.json").write_text(json.dumps(results, indent=1))
        (out / "results.md").write_text(printing.results_md(results))

    if any(i.get("data") in ("real", "capped") or i["name"] in ("loaders", "check") for i in items):
        t = time.perf_counter()
        results["data"] = gpu_parts.part_data(a, work)
        print(f"data: {results['data']} ({time.perf_counter() - t:.0f} s)", flush=True)
    for item in items:
        kind, name = item["kind"], item["name"]
        try:
            if left() < item["est_s"]:
                raise TimeoutError(f"time budget: {left():.0f} s left, about {item['est_s']} s needed")
            if kind == "variant":
                r = run_variant(item, work, a, timeout=max(30, left() + 30))
                print(
                    f"{name}: {r['status']} {r.get('images_per_s', 0):.0f} images/s ({r['wall_s']:.0f} s)", flush=True
                )
            elif kind == "long_test":
                r = run_long_test(item, work, a, timeout=max(30, left() + 30))
                print(f"{name}: {r['status']} ({r['wall_s']:.0f} s)", flush=True)
            else:
                r = run_part(name, a, work, timeout=max(30, left() + 30))
                print(f"{name}: {r['status']} ({r['wall_s']:.0f} s)", flush=True)
        except TimeoutError as exc:
            r = {**item, "status": "skipped", "reason": str(exc)}
            print(f"{name}: skipped", flush=True)
        except subprocess.TimeoutExpired:
            r = {**item, "status": "timeout", "reason": "ran past the time budget"}
            print(f"{name}: timeout", flush=True)
        if kind == "variant":
            results["variants"].append(r)
        elif kind == "long_test":
            results.setdefault("long_tests", []).append(r)
        else:
            results[name] = r
        save()
    save()
    print(printing.results_md(results))


if __name__ == "__main__":
    main()
