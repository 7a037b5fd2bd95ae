"""`snakemake --profile slurm` on GPUs (issue 41): the user's own command under a real SLURM with
GPU gres on the lent GPU machine, beside the same points without SLURM and a plain reference.

Parts (each runs in its own work directory under --work; --parts picks them, in this order):
  one        SLURM, one node with every GPU: preflight, then PyTorch at 1 and N GPUs (synthetic and
             real data), the scaling table and the interconnect stage at N GPUs, through the
             repository's own profile (profiles/slurm)
  long       the same cluster: the long test at N GPUs, short, then the verdict table
  faults     the same cluster: one point scancelled mid-run, one past its time limit, one that
             finishes; each must end as docs/faults.md says, and the sweep finish
  two        SLURM, two "nodes" on this host (a slurmd each in its own network namespace, one GPU
             each): preflight, the N-GPU point across both (synthetic data), the interconnect stage
  local      part one's training points and interconnect without SLURM (snakemake's local executor)
  reference  torchvision ResNet-50 (compiled, bf16, channels-last, DDP via torchrun) at 1 and N
             GPUs, and a plain torch.distributed all-reduce of the interconnect's largest size

    python3 -m benchmarks.slurm_gpu --out OUT --debs .carry/debs [--parts one,local,reference]
                                    [--real gpu] [--budget-s 560] [--dry-run]

SLURM is Debian 12's (carried as .debs, unpacked under --work, benchmarks/slurm_cluster.py). Every
interpreter is this one (python3 with torch); snakemake and its SLURM plugins come from wheels
carried beside it (docs/benchmarks.md says how). Writes OUT/slurm_gpu.json (every part's figures and
exit codes), OUT/tables.md (every part's Markdown tables, the verdict table among them) and
OUT/slurm_gpu.tgz (each part's tables, run summaries, logs, the sbatch scripts and job logs SLURM
kept, and snakemake's own output with every command it ran; no models, weights or data).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import yaml

from benchmarks import slurm_cluster

REPO = Path(__file__).resolve().parent.parent
PARTS = ("one", "long", "faults", "two", "local", "reference")
PROFILE_CHANGES = {  # a cluster without slurmdbd (sacct fails) and short jobs: poll squeue often
    "slurm-status-command": "squeue",
    "seconds-between-status-checks": 2,
    "slurm-init-seconds-before-status-checks": 2,
}
CANCEL = ["rule_train_wildcards_slurm1_", "_fp16_1"]  # the SLURM comment (rule, wildcards) of the point to scancel
BATCH = 256  # training.batch_per_gpu.pytorch; fp16 runs take it x training.fp16_batch_factor
FAULT_STEPS = 700  # past the 1-minute limit (the job stops itself at 45 s) at 1 and 2 GPUs on an H100/H200


def gpus():
    """(how many GPUs, their gres type: the model's short name, e.g. h100)."""
    names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
    lines = names.stdout.split("\n")[:-1] if names.returncode == 0 else []
    kind = re.search(r"\b([A-Z]\d{2,3})\b", lines[0]) if lines else None
    return len(lines), kind.group(1).lower() if kind else "gpu"


def system(n_gpus, nodes, gpu_type, cpus, time_min=20, slurm=True):
    s = {
        "gpus_per_node": n_gpus // nodes,
        "max_nodes": nodes,
        "gpu_request": "gpus-per-node",
        "cpus_per_task": cpus // n_gpus,
    }
    if slurm:
        s.update(gpu_type=gpu_type, partition=slurm_cluster.PARTITION, mem_mb=32000, time_min=time_min)
    return s


def overlay(name, n_gpus, gpu_type, cpus, real, steps, slurm=True, nodes=1, counts=None, **training):
    """The config overlay of a part: one system of this machine, PyTorch fp16 at 224 px, at the GPU
    counts asked (1 and every GPU unless counts says)."""
    py = sys.executable
    return {
        "envs": {k: py for k in ("workflow", "tensorflow", "mxnet", "pytorch")},
        "envs_gpu": {k: py for k in ("tensorflow", "mxnet", "pytorch")},
        "systems": {name: system(n_gpus, nodes, gpu_type, cpus, slurm=slurm)},
        "training": {
            "systems": [name],
            "frameworks": ["pytorch"],
            "gpus": sorted(counts or {1, n_gpus}) if nodes == 1 else [n_gpus],
            "inputs": ["synthetic"] if real == "none" else ["synthetic", real],
            "precisions": ["fp16"],
            "image_size": 224,
            "batch_per_gpu": {"pytorch": BATCH},
            "warmup_steps": 10,
            "steps": steps,
            "repeats": 1,
            "long_test": {"gpus": []},
            **training,
        },
        "inference": {"system": name if slurm else ""},
        # the embedded default's 480 training images are fewer than one fp16 global batch (2 x 512)
        "dataset": {"embedded": {"train_per_class": per_class(n_gpus)}},
    }


def per_class(n_gpus):
    """Training images per class of the embedded set: at least one fp16 global batch at n_gpus."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    batch = BATCH * config["training"]["fp16_batch_factor"] * n_gpus
    return max(160, -(-batch // config["dataset"]["embedded"]["classes"]))


def plan(n_gpus, gpu_type, cpus, real, steps, counts=None):
    """Each part: its cluster ("one", "two" or None), config overlay and snakemake targets, in order.
    counts: the GPU counts of parts one and local (default 1 and n_gpus)."""
    if counts and not set(counts) <= set(range(1, n_gpus + 1)):
        raise ValueError(f"--gpus {','.join(map(str, counts))}: this machine has {n_gpus} GPU(s)")
    one = overlay("slurm1", n_gpus, gpu_type, cpus, real, steps, counts=counts)
    long = overlay("slurm1", n_gpus, gpu_type, cpus, real, steps, inputs=["synthetic"], gpus=[n_gpus])
    long["training"]["long_test"] = {"gpus": [n_gpus], "epochs": 2, "milestones": [1], "target_top1": None}
    faults = overlay("slurm1", n_gpus, gpu_type, cpus, real, FAULT_STEPS, inputs=["synthetic"])
    faults["systems"]["limit1"] = dict(faults["systems"]["slurm1"], time_min=1)
    faults["training"]["systems"] = ["limit1", "slurm1"]
    faults["training"]["gpus"] = sorted({1, n_gpus})
    faults["training"]["retries"] = 0  # the cancelled point ends with its record (1: it would run again)
    return {
        "one": {"cluster": "one", "config": one, "targets": [["preflight"], ["results/scaling.md", "interconnect"]]},
        "long": {"cluster": "one", "config": long, "targets": [["long_test"], ["results/conclusions.md"]]},
        # limit1's points run past their 1-minute limit; slurm1's 1-GPU point is cancelled once it
        # trains (CANCEL); its N-GPU point finishes. A cancelled job counts as failed, so the first
        # invocation ends without the table; the second runs that point again, as a user's next
        # invocation would (docs/faults.md), and then writes the table.
        "faults": {"cluster": "one", "config": faults, "targets": [["results/training_throughput.md"]] * 2},
        "two": {
            "cluster": "two",
            # synthetic data only: what two "nodes" add is the launch, the rendezvous and NCCL between them
            "config": overlay("slurm2", n_gpus, gpu_type, cpus, real, steps, nodes=n_gpus, inputs=["synthetic"]),
            "targets": [["preflight"], ["results/scaling.md", "interconnect"]],
        },
        "local": {
            "cluster": None,
            "config": overlay("local1", n_gpus, gpu_type, cpus, real, steps, slurm=False, counts=counts),
            "targets": [["results/scaling.md", "interconnect"]],
        },
        "reference": {"cluster": None, "config": None, "targets": []},
    }


def profile(work, slurm):
    """The repository's SLURM profile with this cluster's partition and squeue polling; else none."""
    if not slurm:
        return ["--cores", "all"]
    # --verbose: the plugin's debug lines hold each sbatch call
    p = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    p["default-resources"]["slurm_partition"] = slurm_cluster.PARTITION
    p.update(PROFILE_CHANGES)
    (work / "profile").mkdir(parents=True, exist_ok=True)
    (work / "profile" / "config.yaml").write_text(yaml.safe_dump(p))
    return ["--profile", str(work / "profile"), "--verbose"]


def snakemake(work, targets, slurm, timeout):
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(work)]
    cmd += ["--configfile", str(REPO / "config.yaml"), str(work / "overlay.yaml"), *profile(work, slurm), *targets]
    if any((work / ".snakemake" / "locks").glob("*")):
        # a stage cut off by the budget (here or in an earlier call) leaves its lock behind
        subprocess.run([*cmd, "--unlock"], capture_output=True)
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        rc, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out = "timeout", (exc.stdout or b"").decode(errors="replace") + (exc.stderr or b"").decode(errors="replace")
    with (work / "snakemake.log").open("a") as log:
        log.write(f"$ {' '.join(cmd)}\n{out}\n")
    return rc, time.perf_counter() - start, out


def canceller(words, stop, seen):
    """scancel the first running job whose comment (rule and wildcards) has every word, once it has
    run 20 s (past its start-up, into training)."""
    while not stop.is_set():
        out = subprocess.run(["squeue", "-h", "-o", "%i|%T|%k|%M"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            job, state, comment, ran = line.split("|")
            if state == "RUNNING" and all(w in comment for w in words) and ran >= "0:20":
                subprocess.run(["scancel", job])
                seen.append({"job": job, "comment": comment, "ran": ran})
                return
        time.sleep(2)


def _scalars(d):
    return {k: v for k, v in (d or {}).items() if not isinstance(v, (dict, list))} if isinstance(d, dict) else d


def summaries(work):
    """Every run's figures and end, from its own summary or failed record; the interconnect's
    largest all-reduce."""
    out = {}
    for path in sorted((work / "results" / "runs").glob("**/summary.json")):
        s = json.loads(path.read_text())
        keys = ("status", "images_per_s", "step_images_per_s_cv", "reason", "permanent", "stopped", "attempts")
        out[str(path.parent.relative_to(work / "results" / "runs"))] = {k: s.get(k) for k in keys} | {
            "isolation": _scalars(s.get("isolation")),
            "nccl": (s.get("nccl") or {}).get("described"),
            "gpu_binding": (s.get("gpu_binding") or {}).get("how"),
            "num_nodes": s.get("num_nodes"),
        }
    for path in sorted((work / "results" / "interconnect").glob("*/*/torch.json")):
        r = json.loads(path.read_text())
        reduce = [x for x in r.get("results", []) if x.get("collective") == "all_reduce"]
        if reduce:
            top = max(reduce, key=lambda x: x["bytes"])
            out[f"interconnect/{path.parent.parent.name}/{path.parent.name}"] = {
                "bytes": top["bytes"],
                "busbw_GBps": top["busbw_GBps"],
                "median_s": top["median_s"],
                "nccl": (r.get("nccl") or {}).get("described") if isinstance(r.get("nccl"), dict) else r.get("nccl"),
                "gpu_binding": (r.get("gpu_binding") or {}).get("how"),
            }
    return out


def run_part(name, part, work, budget_end, debs, n_gpus, gpu_type):
    work.mkdir(parents=True, exist_ok=True)
    (work / "overlay.yaml").write_text(yaml.safe_dump(part["config"]))
    record, cluster = {"stages": []}, None
    if part["cluster"]:
        nodes = ("n1",) if part["cluster"] == "one" else tuple(f"n{i + 1}" for i in range(n_gpus))
        devices = [f"/dev/nvidia{i}" for i in range(n_gpus)]
        gres = {"n1": (gpu_type, devices)} if len(nodes) == 1 else {n: (gpu_type, [d]) for n, d in zip(nodes, devices)}
        cpus = os.cpu_count() // len(nodes)
        cluster = slurm_cluster.Cluster(
            nodes, cpus=cpus, memory_mb=64000, task_plugin="task/affinity", prefix=str(debs.prefix), gres=gres
        )
        t = time.perf_counter()
        cluster.start()
        record["cluster_up_s"] = round(time.perf_counter() - t, 1)
        record["sinfo"] = subprocess.run(["sinfo", "-N", "-o", "%N %c %m %G %T"], capture_output=True, text=True).stdout
    stop, seen = threading.Event(), []
    if name == "faults":
        threading.Thread(target=canceller, args=(CANCEL, stop, seen), daemon=True).start()
    try:
        for targets in part["targets"]:
            left = budget_end - time.time()
            if left < 60:
                record["stages"].append({"targets": targets, "exit": "skipped (budget)"})
                continue
            rc, seconds, out = snakemake(work, targets, cluster is not None, timeout=left - 20)
            record["stages"].append({"targets": targets, "exit": rc, "seconds": round(seconds, 1)})
            print(f"[{name}] snakemake {' '.join(targets)}: exit {rc} in {seconds:.0f} s", flush=True)
            if rc:
                print(out[-2500:], flush=True)
    finally:
        stop.set()
        if cluster:
            record["slurm_logs"] = cluster.logs(tail=15)
            cluster.stop()
    record["cancelled"] = seen
    record["runs"] = summaries(work)
    return record


def reference(out, n_gpus, steps, budget_end):
    """The plain reference at 1 and N GPUs, and the raw all-reduce, each through torchrun, at the
    images per GPU of the pipeline's fp16 runs (batch_per_gpu x training.fp16_batch_factor)."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())["training"]
    batch = BATCH * config["fp16_batch_factor"]
    record = {"batch_per_gpu": batch}
    for g in sorted({1, n_gpus}):
        if budget_end - time.time() < 90:
            record[f"{g}gpu"] = "skipped (budget)"
            continue
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={g}"]
        cmd += ["-m", "benchmarks.reference_ddp", "--steps", str(steps), "--batch", str(batch)]
        cmd += ["--out", str(out / f"reference_{g}gpu.json")]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=max(60, budget_end - time.time()))
        print(f"[reference] {g} GPU(s): exit {proc.returncode}", flush=True)
        if proc.returncode:
            print(proc.stderr[-2000:])
        path = out / f"reference_{g}gpu.json"
        record[f"{g}gpu"] = json.loads(path.read_text()) if path.exists() else f"exit {proc.returncode}"
    return record


class Debs:
    """The carried .debs, unpacked once per call."""

    def __init__(self, folder, prefix):
        self.folder, self.prefix, self.env = folder, prefix, None

    def ready(self):
        if self.env is None:
            self.env = slurm_cluster.unpack(self.folder, self.prefix)
            os.environ.update(self.env)
        return self


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--debs", default=".carry/debs", help="Debian 12's SLURM and munge .debs")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    ap.add_argument("--real", default="dali", help="the real-data input (training.inputs): dali, gpu, cpu or none")
    ap.add_argument("--gpus", help="comma-separated GPU counts of parts one and local (default: 1 and every GPU)")
    ap.add_argument("--steps", type=int, default=100, help="timed steps per run (after 10 warm-up steps)")
    ap.add_argument("--work", default="/tmp/dlscale-slurm-gpu")
    ap.add_argument("--budget-s", type=float, default=560, help="parts and stages not started by then are skipped")
    ap.add_argument("--dry-run", action="store_true", help="print each part's config and targets, and stop")
    a = ap.parse_args(argv)
    parts = a.parts.split(",")
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        ap.error(f"--parts: no part {', '.join(unknown)} (parts: {', '.join(PARTS)})")
    budget_end = time.time() + a.budget_s
    try:
        counts = sorted({int(g) for g in a.gpus.split(",")}) if a.gpus else None
    except ValueError:
        ap.error(f"--gpus {a.gpus}: GPU counts, comma-separated, e.g. 1,2,4")
    n_gpus, gpu_type = (max(counts or [2]), "h100") if a.dry_run else gpus()
    cpus = 32 if a.dry_run else os.cpu_count()
    try:
        the_plan = plan(n_gpus, gpu_type, cpus, a.real, a.steps, counts)
    except ValueError as exc:
        ap.error(str(exc))
    if a.dry_run:
        for name in parts:
            p = the_plan[name]
            print(f"{name}: cluster {p['cluster']}; targets {p['targets']}")
            print(yaml.safe_dump(p["config"], default_flow_style=True, width=200).strip())
        return
    if n_gpus < 1:
        sys.exit("slurm_gpu: nvidia-smi lists no GPU here")
    out, work = Path(a.out), Path(a.work)
    out.mkdir(parents=True, exist_ok=True)
    debs = Debs(a.debs, work / "slurm-root")
    record = {"gpus": n_gpus, "gpu_type": gpu_type, "cpus": cpus, "real": a.real, "steps": a.steps, "parts": {}}
    for name in parts:
        if budget_end - time.time() < 90:
            record["parts"][name] = "skipped (budget)"
            continue
        start = time.perf_counter()
        if name == "reference":
            record["parts"][name] = reference(out, n_gpus, a.steps, budget_end)
        else:
            part = the_plan[name]
            if part["cluster"]:
                debs.ready()
            record["parts"][name] = run_part(name, part, work / name, budget_end, debs, n_gpus, gpu_type)
        record["parts"][name]["seconds"] = round(time.perf_counter() - start, 1)
        (out / "slurm_gpu.json").write_text(json.dumps(record, indent=1, default=str))
    tables(out / "tables.md", work, parts)
    keep = ("results", "logs", ".snakemake/slurm_logs", "snakemake.log", "overlay.yaml")
    with tarfile.open(out / "slurm_gpu.tgz", "w:gz") as tar:
        for name in parts:
            for rel in keep:
                if (work / name / rel).exists():
                    tar.add(work / name / rel, arcname=f"{name}/{rel}", filter=_small)
    print(json.dumps(record["parts"], indent=1, default=str)[-6000:])


def tables(path, work, parts):
    """Every part's Markdown tables in one small file: it comes back even when the archive is too
    large to (the limits on a call's files)."""
    with path.open("w") as f:
        for name in parts:
            for table in sorted((work / name / "results").glob("*.md")):
                f.write(f"# {name}/results/{table.name}\n\n{table.read_text()}\n")


BULKY = (".pt", ".mdb", ".h5", ".params", ".tfrecord", ".onnx", ".engine", ".plan", ".npz")


def _small(info):
    """Leave out weights, checkpoints, models, engines, calibration data and datasets."""
    return None if info.name.endswith(BULKY) or "/data/" in info.name else info


if __name__ == "__main__":
    main()
