"""What the benchmark derives from its runs: GPU clocks over the timed steps, each run against
synthetic data of the same call, scaling efficiency and side-by-side runs."""

import csv
import statistics
from pathlib import Path

# NVML's clock limiters (nvmlClocksEventReasons) that lower the SM clock under load
LIMITERS = {
    0x4: "power cap",
    0x8: "hardware slowdown",
    0x20: "thermal (software)",
    0x40: "thermal (hardware)",
    0x80: "power brake",
}


def gpu_clocks(run_dir, seconds_timed):
    """GPU 0's mean power and SM clock over the telemetry samples of the timed steps (the last
    seconds_timed seconds of the run: the telemetry stops right after them), and the share of
    those samples with each clock limiter active."""
    csvs = sorted(Path(run_dir).glob("telemetry.*.csv"))
    if not csvs:
        return None
    with open(csvs[0]) as f:
        rows = [r for r in csv.DictReader(f) if r["device"] == "gpu0" or r["metric"] == "cpu_steal_percent"]
    end = max((float(r["time_s"]) for r in rows), default=0)
    by = {}
    for r in rows:
        if float(r["time_s"]) > end - seconds_timed:
            by.setdefault(r["metric"], []).append(float(r["value"]))
    if "gpu_sm_clock_MHz" not in by:
        return None
    limits = [int(x) for x in by.get("gpu_clock_limiters", [])]
    mean = lambda m: statistics.fmean(by[m]) if m in by else None  # noqa: E731
    return {
        "samples": len(by["gpu_sm_clock_MHz"]),
        "sm_clock_MHz": mean("gpu_sm_clock_MHz"),
        "sm_clock_min_MHz": min(by["gpu_sm_clock_MHz"]),
        "power_W": mean("gpu_power_W"),
        "util_percent": mean("gpu_util_percent"),
        "cpu_steal_percent": mean("cpu_steal_percent"),
        **{
            f"{m}_max": max(by[m])
            for m in ("gpu_temp_C", "gpu_mem_temp_C", "gpu_power_limited_percent", "gpu_thermal_limited_percent")
            if m in by
        },
        "mem_clock_min_MHz": min(by.get("gpu_mem_clock_MHz", [float("nan")])),
        "cpu_steal_max_percent": max(by.get("cpu_steal_percent", [float("nan")])),
        "limited": {name: sum(1 for x in limits if x & bit) / len(limits) for bit, name in LIMITERS.items() if limits},
    }


# a run's flags that choose its input path, or how DDP exchanges: the rest must match for two
# runs to be compared
INPUT_FLAGS = {
    "--input",
    "--jpeg-decoder",
    "--input-lanes",
    "--hw-decoder-load",
    "--prefetch",
    "--fetch-ahead",
    "--dali-decoder",
    "--dali-pinned-mb",
    "--dali-device-mb",
    "--loader-workers",
}
DDP_FLAGS = {"--ddp-graph", "--broadcast-buffers", "--bucket-cap-mb", "--grad-compression"}


def without(words, flags):
    """A run's trainer words (flag-value pairs) less those of `flags`."""
    return [x for flag, value in zip(words[::2], words[1::2]) if flag not in flags for x in (flag, value)]


def ok_runs(results):
    return [v for v in results["variants"] if v.get("status") == "ok"]


def synthetic_of(v, runs):
    """images/s of the synthetic runs of the call that match v but for its input path."""
    return [
        w["images_per_s"]
        for w in runs
        if w["data"] == "synthetic"
        and w["gpus"] == v["gpus"]
        and not w.get("side_by_side")
        and without(w["words"], INPUT_FLAGS) == without(v["words"], INPUT_FLAGS)
    ]


def one_gpu_of(v, runs):
    """images/s of the call's one-GPU runs of v's data and flags, DDP's aside."""
    return [
        w["images_per_s"]
        for w in runs
        if w["gpus"] == 1
        and w["data"] == v["data"]
        and not w.get("side_by_side")
        and without(w["words"], DDP_FLAGS) == without(v["words"], DDP_FLAGS)
    ]


def derive(results):
    """One line per derived figure, keyed by what it is."""
    runs, d = ok_runs(results), {}
    for v in runs:
        name = v["name"]
        if v.get("side_by_side"):
            alone = one_gpu_of({**v, "gpus": 1}, runs)
            if alone:
                d[f"{name}: each GPU side by side vs one GPU alone"] = (
                    f"{v['per_gpu'] / statistics.fmean(alone):.1%} ({', '.join(f'{x:.0f}' for x in v['each'])}; "
                    f"timed windows overlapping {v['timed_overlap']:.0%})"
                )
            continue
        if v["data"] == "real":
            d[f"{name}: loss falls"] = v["loss_falls"]
            syn = synthetic_of(v, runs)
            if syn:
                d[f"{name}: of synthetic"] = (
                    f"{v['images_per_s'] / statistics.fmean(syn):.1%} (of {', '.join(f'{x:.0f}' for x in syn)})"
                )
        if v["gpus"] > 1:
            one = one_gpu_of(v, runs)
            if one:
                d[f"{name}: scaling efficiency"] = (
                    f"{v['images_per_s'] / (v['gpus'] * statistics.fmean(one)):.1%} "
                    f"(1 GPU: {', '.join(f'{x:.0f}' for x in one)})"
                )
    return d
