"""The GPU benchmark's plans, as data: plan name -> what it measures and its items, in priority
order (a call runs them in this order until its time budget is spent; `--only` picks some).

An item is a part ("part": ceilings, loaders or check; gpu_parts.py) or a run of the trainer:
  name      the run's name in results.json, results.md and `--only` ({n}: the --gpus value)
  data      synthetic (random tensors, no input) or real (the benchmark's LMDB)
  words     the trainer's own flags beyond the common ones (pytorch_gpu.trainer_command): none
            means the trainer's defaults
  gpus      1 or "n" (--gpus, one process per GPU through workflow_scripts.cluster.launcher)
  side_by_side  "n": the one-GPU run on each of --gpus GPUs at once, no DDP (what the GPUs do
            beside each other on the host, exchanging nothing)
  steps     timed steps, if not --steps; epochs: a long test (--mode accuracy) of that many epochs
  launch    the launcher's flags beyond --nproc-per-node (runs of several GPUs)
  est       seconds it is expected to take (compilation included): it is skipped when less is left

The history's plans (named after the runs that used them) are in benchmarks/pytorch_gpu.py as of
commit 69b8f5f: docs/history/ says which run used which.
"""

import os

# The defaults before docs/decisions.md's compile, prefetch and dali_pools entries changed them.
FORMER = "--compile default --prefetch 2 --dali-pinned-mb 0 --dali-device-mb 0"
DALI = "--input dali"
WHOLE = "--ddp-graph whole --broadcast-buffers off"  # one graph per step, no buffer broadcast
DDP_OWN = "--ddp-graph split --broadcast-buffers on"  # DDP's own defaults
COMPILE = "--compile default"
GRAPHS = "--compile reduce-overhead"
BOUND = "--bind-cpus auto"  # each local rank on whole cores of its own (config training.bind_cpus)


def run(name, data="synthetic", words="", est=45, gpus=1, steps=None, epochs=None, side_by_side=None, launch=""):
    return {
        "launch": launch.split(),
        "kind": "long_test" if epochs else "variant",
        "name": name,
        "data": data,
        "words": words.split(),
        "gpus": gpus,
        "steps": steps,
        "epochs": epochs,
        "est_s": est,
        "side_by_side": side_by_side,
    }


def part(name, est):
    return {"kind": "part", "name": name, "est_s": est}


def alternated(repeats, first_est=60):
    """Synthetic data and the dali path with the defaults, one after the other, `repeats` times."""
    out = []
    for k in range(1, repeats + 1):
        suffix = f"_{k}" if k > 1 else ""
        out += [run(f"synthetic{suffix}", est=first_est if k == 1 else 35), run(f"dali{suffix}", "real", DALI, est=40)]
    return out


PLANS = {
    "inputs": {
        "measures": "every input path with the trainer's defaults against synthetic data (the step without "
        "input), one GPU: synthetic and dali alternated and repeated, gpu and cpu once, then 400 "
        "timed steps of synthetic and dali",
        "items": alternated(1)
        + [run("gpu", "real", "--input gpu"), run("cpu", "real", "--input cpu", est=50)]
        + alternated(2)[2:]
        + [run("synthetic_400", est=45, steps=400), run("dali_400", "real", DALI, est=50, steps=400)]
        + alternated(4)[4:],
    },
    "former-defaults": {
        "measures": "the defaults before run 40 (torch.compile mode default, DALI two batches ahead, its "
        "memory pools grown as needed) against today's, synthetic and dali, one GPU, alternated",
        "items": alternated(1)
        + [run("synthetic_former", words=FORMER, est=60), run("dali_former", "real", f"{DALI} {FORMER}", est=40)],
    },
    "long-test": {
        "measures": "the long test (--mode accuracy: epochs, the learning-rate schedule, top-1/top-5 after each) "
        "through dali on one GPU, with the defaults (CUDA graphs) and with torch.compile mode "
        "default: same seed, same data, each epoch side by side",
        "items": [
            run("defaults", "real", DALI, est=90, epochs=6),
            run("compile_default", "real", f"{DALI} {COMPILE}", est=90, epochs=6),
        ],
    },
    "scaling": {
        "measures": "1 GPU and --gpus GPUs of one host with the defaults, synthetic and dali, alternated and "
        "repeated: scaling efficiency and each path's share of synthetic",
        "items": [
            run("synthetic_1gpu", est=100),
            run("synthetic_{n}gpu", gpus="n", est=80),
            run("dali_1gpu", "real", DALI, est=60),
            run("dali_{n}gpu", "real", DALI, gpus="n", est=60),
            run("synthetic_{n}gpu_2", gpus="n", est=40),
            run("dali_{n}gpu_2", "real", DALI, gpus="n"),
            run("synthetic_1gpu_2", est=35),
            run("dali_1gpu_2", "real", DALI, est=40),
        ],
    },
    "decoders": {
        "measures": "where DALI decodes at --gpus GPUs of one host: its CPU threads (the default, decided at 1 "
        "GPU: docs/decisions.md#dali_decoder) against the hardware JPEG engine + nvJPEG (mixed), beside "
        "synthetic data at the same count and the default at 1 GPU",
        "items": [
            run("synthetic_{n}gpu", gpus="n", est=90),
            run("dali_{n}gpu", "real", DALI, gpus="n", est=60),
            run("dali_{n}gpu_mixed", "real", f"{DALI} --dali-decoder mixed", gpus="n", est=60),
            run("dali_1gpu", "real", DALI, est=50),
        ],
    },
    "photos": {
        "measures": "the ImageNet-like photographs (--dataset photos) at --gpus GPUs: synthetic data against "
        "DALI with the defaults, both again with each rank bound to cores of its own (--bind-cpus auto), "
        "with decode threads on every CPU of the rank's share but one, with the hardware JPEG engine + "
        "nvJPEG (mixed) at the default share and at 1.0 (the engine alone), and from a copy whose "
        "shorter sides are capped (--shorter-cap) with the cpu and the mixed decoder; then 1 GPU",
        "items": [
            part("capacity", 120),
            run("synthetic_{n}gpu", gpus="n", est=90),
            run("dali_{n}gpu", "real", DALI, gpus="n", est=60),
            run("synthetic_{n}gpu_bound", gpus="n", launch=BOUND, est=50),
            run("dali_{n}gpu_bound", "real", DALI, gpus="n", launch=BOUND, est=50),
            run("dali_{n}gpu_spare1", "real", f"{DALI} --decode-threads {{spare1}}", gpus="n", est=50),
            run("dali_{n}gpu_mixed", "real", f"{DALI} --dali-decoder mixed", gpus="n", est=50),
            run(
                "dali_{n}gpu_mixed_hw1", "real", f"{DALI} --dali-decoder mixed --hw-decoder-load 1.0", gpus="n", est=50
            ),
            run(
                "dali_{n}gpu_mixed_hint",
                "real",
                f"{DALI} --dali-decoder mixed --dali-size-hint largest",
                gpus="n",
                est=50,
            ),
            run("dali_{n}gpu_capped", "capped", DALI, gpus="n", est=50),
            run("dali_{n}gpu_capped_spare1", "capped", f"{DALI} --decode-threads {{spare1}}", gpus="n", est=50),
            run("dali_{n}gpu_capped_mixed", "capped", f"{DALI} --dali-decoder mixed", gpus="n", est=50),
            run("synthetic_1gpu", est=60),
            run("dali_1gpu", "real", DALI, est=45),
        ],
    },
    "photos-repeats": {
        "measures": "the photographs at --gpus GPUs and at 1, synthetic and DALI with the defaults, alternated, "
        "3 repeats each (the figures the input is judged by); with --pick, also the best of an earlier "
        "photos call's DALI variants at --gpus GPUs",
        "items": [
            run(f"{kind}_{{n}}gpu{suffix}", data, DALI if data == "real" else "", gpus="n", est=40)
            for suffix in ("", "_2", "_3")
            for kind, data in (("synthetic", "synthetic"), ("dali", "real"), ("picked", "picked"))
        ]
        + [
            run(f"{kind}_1gpu{suffix}", data, DALI if data == "real" else "", est=35)
            for suffix in ("", "_2", "_3")
            for kind, data in (("synthetic", "synthetic"), ("dali", "real"))
        ],
    },
    "scaling-modes": {
        "measures": "DDP's modes on synthetic data, 1 GPU against --gpus GPUs: torch.compile mode default and "
        "CUDA graphs with one graph per step and no buffer broadcast, the one-GPU run side by side "
        "on every GPU, and DDP's own defaults (graph cut at the buckets, buffers broadcast)",
        "items": [
            run("compile_1gpu", words=COMPILE, est=70),
            run("compile_{n}gpu", words=f"{COMPILE} {WHOLE}", gpus="n", est=60),
            run("graphs_1gpu", words=GRAPHS, est=60),
            run("graphs_{n}gpu", words=f"{GRAPHS} {WHOLE}", gpus="n", est=60),
            run("graphs_1gpu_x{n}", words=GRAPHS, side_by_side="n", steps=400, est=60),
            run("compile_{n}gpu_ddp_defaults", words=f"{COMPILE} {DDP_OWN}", gpus="n", est=90),
        ],
    },
    "sampler": {
        "measures": "the telemetry sampler's cost (each node's local rank 0 samples every second in a thread of its "
        "own: --telemetry-interval 1 against 0) on synthetic data at --gpus GPUs, alternated, 3 repeats each; "
        "every run's images/s CV per step and over 10-step windows (the study's way of judging stability)",
        "items": [
            run(f"synthetic_{{n}}gpu{tel}{suffix}", words="--telemetry-interval 0" if tel else "", gpus="n", est=45)
            for suffix in ("", "_2", "_3")
            for tel in ("", "_tel0")
        ],
    },
    "ceilings": {
        "measures": "what the machine can do: a device-to-device copy and bf16/TF32 matrix products, each input "
        "path alone (no step), and the step alone (synthetic data, the defaults)",
        "items": [
            part("ceilings", 20),
            part("loaders", 80),
            run("synthetic", est=60),
            run("synthetic_400", est=45, steps=400),
        ],
    },
    "check": {
        "measures": "the training step on one real batch from the same weights: the CPU path (fp32, Pillow) "
        "against the GPU paths (GPU preprocessing; fp32, TF32, bf16), each step's loss within a "
        "tolerance fixed beforehand",
        "items": [part("check", 60)],
    },
}


def pick(results, gpus):
    """The DALI variant at `gpus` GPUs of an earlier call's results (benchmarks/pytorch_gpu.py's
    results.json) with the most images/s among those whose steps were steady (CV <= 2%), or
    among all if none was: (its item, why). None when the defaults' own run is that variant."""
    ran = [
        v
        for v in results["variants"]
        if v.get("status") == "ok" and v["gpus"] == gpus and v["data"] in ("real", "capped")
    ]
    steady = [v for v in ran if v["step_cv"] <= 0.02]
    if not ran:
        return None, "no DALI run at this GPU count in the earlier call"
    best = max(steady or ran, key=lambda v: v["images_per_s"])
    why = (
        f"{best['name']}: {best['images_per_s']:.0f} images/s, step CV {best['step_cv']:.1%}, the most among "
        f"{len(steady)} steady of {len(ran)} DALI runs at {gpus} GPUs"
        if steady
        else f"{best['name']}: {best['images_per_s']:.0f} images/s, the most of {len(ran)} (none steady)"
    )
    if best["name"] == f"dali_{gpus}gpu":
        return None, why + " (the defaults)"
    return {"data": best["data"], "words": best["words"], "launch": best.get("launch", [])}, why


def items(plan, gpus, cpus=None, picked=None):
    """The plan's items for a host of `gpus` GPUs and `cpus` CPUs ({n} and "n" filled in; {spare1}
    in words: every CPU of a rank's share but one)."""
    spare1 = max(1, (cpus or os.cpu_count()) // gpus - 1)
    out = []
    for item in PLANS[plan]["items"]:
        if item.get("data") == "picked":
            if not picked:
                continue
            item = {**item, **picked}
        item = {**item, "name": item["name"].format(n=gpus)}
        if "words" in item:
            item["words"] = [w.format(spare1=spare1) for w in item["words"]]
        for key in ("gpus", "side_by_side"):
            if item.get(key) == "n":
                item[key] = gpus
        out.append(item)
    return out
