"""Whether a sweep point's input can feed its GPUs: preflight's input capacity against the step rate
the point asks for (docs/preflight.md#the-input-check). Preflight's data table judges every point of
its pair with it before the sweep, the training tables every run after it, so both say the same.

The capacity comes from preflight's data check (preflight/input_task.py): one rank's input path
alone, on the decode threads one rank gets when its node runs the sweep's largest GPU count; a
node's capacity is that rank's times the ranks on the node. At another number of ranks a node the
rank's threads differ (where the ranks share the node's CPUs): its capacity is then estimated in
proportion to its decode threads, for the paths that decode on the CPU (the hardware JPEG engine
and nvJPEG take no more with more threads). The ranks of a node decoding together may do less than
one alone times their number (memory bandwidth, storage): the check errs towards fitting.

The demand is the synthetic step rate (random tensors on the device: the step without its input),
per GPU: a synthetic run of the sweep at the point's GPU count, else at its nearest count, else
preflight's own timing of synthetic steps; with none, nothing is judged. A point is input-bound
where its node's capacity is below its node's demand times (1 + preflight.input_margin).
"""

import math

from . import schema

INPUT_BOUND = "input-bound"
EXPECTED_KEY = "preflight.input_bound_expected"
# A run's input_bound column: judged and fits, input-bound, input-bound as the config asked for
FITS, BOUND, ASKED = "no", "yes", "asked for"


def cpu_decoding(framework, path, decoder, device):
    """Whether the path decodes its JPEGs on the rank's CPU threads (so more threads decode more)."""
    if framework != "pytorch" or device != "gpu":
        return True
    return path == "cpu" or (path == "dali" and decoder != "mixed")


def capacity_per_rank(entry, ranks):
    """Images/s one of `ranks` ranks of a node can take from its input: the measurement (entry: one
    input's record of the data check), scaled by its decode threads at that many ranks where the
    path decodes on the CPU. (images/s, estimated: whether it was scaled)."""
    measured = entry["images_per_s"]
    threads = (entry.get("threads_at") or {}).get(str(ranks))
    if not entry.get("cpu_decoding", True) or not threads or threads == entry["threads"] or not entry["threads"]:
        return measured, False
    return measured * threads / entry["threads"], True


def per_gpu_demand(synthetic, timed, gpus):
    """(images/s per GPU, from what) of the step rate at `gpus`: synthetic = [{gpus, images_per_s,
    run}] of the sweep's synthetic runs (one per GPU count), timed = preflight's timing ({gpus,
    images_per_s, steps}) or None. (None, why) where neither gives one."""
    done = [s for s in synthetic if s.get("images_per_s")]
    if done:
        best = min(done, key=lambda s: (abs(math.log(s["gpus"] / gpus)), s["gpus"]))
        where = "" if best["gpus"] == gpus else f" at {best['gpus']} GPU(s), the nearest count run"
        return best["images_per_s"] / best["gpus"], f"the synthetic run {best['run']}{where}"
    if timed and timed.get("images_per_s"):
        return timed["images_per_s"] / timed["gpus"], (
            f"preflight's {timed['steps']} synthetic steps at {timed['gpus']} GPU(s) on one node"
        )
    return None, "no synthetic step rate: no synthetic run of this precision and no preflight timing"


def by_count(runs):
    """[{gpus, images_per_s, run}] of completed synthetic runs of one precision -> one per GPU count:
    the mean over its repeats, named by its first run."""
    out = {}
    for r in runs:
        out.setdefault(r["gpus"], []).append(r)
    return [
        {
            "gpus": g,
            "images_per_s": sum(r["images_per_s"] for r in rs) / len(rs),
            "run": rs[0]["run"] + (f" (mean of {len(rs)} runs)" if len(rs) > 1 else ""),
        }
        for g, rs in sorted(out.items())
    ]


def judge(capacity_rank, demand_gpu, ranks, margin):
    """A node of `ranks` ranks: its capacity and demand (images/s), whether it is input-bound, and
    the shortfall (1 - capacity / demand; <= 0 where the capacity covers the demand)."""
    capacity, demand = capacity_rank * ranks, demand_gpu * ranks
    return {
        "capacity": capacity,
        "demand": demand,
        "bound": capacity < demand * (1 + margin),
        "shortfall": 1 - capacity / demand,
    }


def sentence(j, ranks, margin, estimated=False):
    """'N images/s a node of M needed at G GPU(s) a node: short by X%' (or within the margin)."""
    est = " (estimated from the check's ranks by their decode threads)" if estimated else ""
    head = f"{j['capacity']:,.0f} images/s a node{est} of {j['demand']:,.0f} needed at {ranks} GPU(s) a node"
    if j["shortfall"] > 0:
        return f"{head}: short by {j['shortfall']:.0%}"
    spare = -j["shortfall"]
    if j["bound"]:
        return f"{head}: {spare:.0%} to spare, less than preflight.input_margin ({margin:.0%})"
    if spare >= 1:
        return f"{head}: {j['capacity'] / j['demand']:.1f}x what it needs"
    return f"{head}: {spare:.0%} to spare"


def fix_keys(system, framework, path):
    """The config keys that change a point's input capacity."""
    cpus = f"systems.{system}.cpus_per_task (the CPUs a rank decodes on)"
    smaller = "conversion.shorter_cap (the largest photos shrunk at conversion)"
    if framework != "pytorch":
        keys = [cpus, "training.decode_threads", smaller]
    elif path == "dali":
        keys = [
            cpus,
            "training.pytorch.loader_workers (DALI's threads)",
            "training.pytorch.dali_decoder (mixed)",
            smaller,
        ]
    elif path == "gpu":
        keys = ["training.pytorch.input_lanes", "training.pytorch.jpeg_decoder", smaller]
    else:
        keys = [cpus, "training.pytorch.loader_workers", "training.inputs (dali: decoding on the GPU)", smaller]
    return keys


def fix(system, framework, path):
    """What preflight's row says to do: the keys, or say the input is meant to be measured."""
    keys = ", ".join(fix_keys(system, framework, path))
    return f"a faster input: {keys}; or, to measure the input as it is, list {path} in {EXPECTED_KEY}"


def wait_share(summary):
    """The share of a run's timed steps it spent waiting for its input (rank 0), or None."""
    wait, seconds = summary.get("input_wait_s_timed"), summary.get("seconds_timed")
    if wait is None or not seconds:
        return None
    return wait / seconds


# config preflight.*: how every table that judges the input check judges it
JUDGE = ("input_margin", "input_bound_expected")


def add_judge_arguments(ap):
    """The flags of the judgement's keys, for every table that judges the input check: preflight's
    and the training tables."""
    return schema.add_arguments(ap, "preflight", JUDGE)


def judge_argv(preflight):
    """Their words (plan/preflight_plan.py's judge_args); no paths listed, no word."""
    return schema.argv(preflight, "preflight", JUDGE, quiet=("input_bound_expected",))
