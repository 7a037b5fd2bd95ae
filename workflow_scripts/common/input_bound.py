"""Whether a sweep point's input can feed its GPUs: its images/s on real data against its images/s
on synthetic data, the same step without its input (docs/preflight.md#the-input-check). Preflight's
data table judges every point of its pair with it before the sweep, the training tables every run
after it, so both say it in the same words.

Before the sweep the figures are the input check's (preflight/preflight_job.py): the trainer on
real data through the path, beside the same trainer on synthetic data, back to back on one node at
the data check's ranks a node. At another number of ranks a node of the sweep the real-data rate a
rank is estimated from that run's in proportion to the decode threads a rank gets there (where the
ranks share the node's CPUs), for the paths that decode on the CPU (the hardware JPEG engine and
nvJPEG take no more with more threads); the synthetic rate a GPU is the check's, or, after the
sweep, its synthetic run at the nearest count. A point is input-bound where its real-data rate is
below its synthetic rate times (1 - preflight.input_tolerance).
"""

import math

from . import schema

INPUT_BOUND = "input-bound"
EXPECTED_KEY = "preflight.input_bound_expected"
TOLERANCE_KEY = "preflight.input_tolerance"
# A run's input_bound column: judged and fits, input-bound, input-bound as the config asked for
FITS, BOUND, ASKED = "no", "yes", "asked for"
# A run's input_judged_by column: its own images/s against the sweep's synthetic runs of its point,
# or preflight's figures at its ranks a node
MEASURED, PREDICTED = "measured", "predicted"


def cpu_decoding(framework, path, decoder, device):
    """Whether the path decodes its JPEGs on the rank's CPU threads alone (so more threads decode
    more); DALI's split and dual are not: the GPU's decoder takes a share of their JPEGs."""
    if framework != "pytorch" or device != "gpu":
        return True
    return path == "cpu" or (path == "dali" and decoder == "cpu")


def capacity_per_rank(entry, ranks):
    """Images/s one of `ranks` ranks of a node takes from its input: the check's real-data run's
    (entry: its record, preflight_job.real_figures with input_task's threads_at), as it ran at its
    own ranks a node, else scaled by the decode threads a rank gets at `ranks` where the path
    decodes on the CPU. (images/s, estimated: whether `ranks` is not the run's)."""
    rate = entry["images_per_s"] / entry["gpus"]
    if ranks == entry["ranks_per_node"]:
        return rate, False
    threads, there = entry.get("threads"), (entry.get("threads_at") or {}).get(str(ranks))
    if entry.get("cpu_decoding", True) and threads and there:
        rate *= there / threads
    return rate, True


def per_gpu_demand(synthetic, timed, gpus):
    """(images/s per GPU, from what) of the step rate at `gpus`: synthetic = [{gpus, images_per_s,
    run}] of the sweep's synthetic runs (one per GPU count), timed = the input check's synthetic run
    ({gpus, images_per_s, steps}) or None. (None, why) where neither gives one."""
    done = [s for s in synthetic if s.get("images_per_s")]
    if done:
        best = min(done, key=lambda s: (abs(math.log(s["gpus"] / gpus)), s["gpus"]))
        where = "" if best["gpus"] == gpus else f" at {best['gpus']} GPU(s), the nearest count run"
        return best["images_per_s"] / best["gpus"], f"the synthetic run {best['run']}{where}"
    if timed and timed.get("images_per_s"):
        return timed["images_per_s"] / timed["gpus"], (
            f"the check's {timed['steps']} synthetic steps at {timed['gpus']} GPU(s) on one node"
        )
    return None, "no synthetic step rate: no synthetic run of this precision and none by the input check"


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


def judge(capacity_rank, demand_gpu, ranks, tolerance):
    """A node of `ranks` ranks: its real-data and synthetic images/s (capacity, demand), their ratio,
    whether it is input-bound (the ratio below 1 - tolerance) and the shortfall (1 - ratio)."""
    capacity, demand = capacity_rank * ranks, demand_gpu * ranks
    ratio = capacity / demand
    return {
        "capacity": capacity,
        "demand": demand,
        "ratio": ratio,
        "bound": ratio < 1 - tolerance,
        "shortfall": 1 - ratio,
    }


def share(fraction):
    """A share as the rows print it: 97.1%."""
    return f"{fraction:.1%}"


def verdict(j, tolerance):
    """'keeps up', 'keeps up (within preflight.input_tolerance 3%)' or 'input-bound, short by X%'."""
    if j["bound"]:
        return f"{INPUT_BOUND}, short by {share(j['shortfall'])}"
    if j["ratio"] < 1:
        return f"keeps up (within {TOLERANCE_KEY} {tolerance * 100:g}%)"
    return "keeps up"


def sentence(j, ranks, tolerance, estimated=False):
    """'N images/s a node on real data against M on synthetic at G GPU(s) a node, X% of synthetic:
    keeps up' (or input-bound, short by Y%)."""
    est = " (estimated from the check's real-data run by the decode threads a rank gets)" if estimated else ""
    return (
        f"{j['capacity']:,.0f} images/s a node on real data{est} against {j['demand']:,.0f} on synthetic at "
        f"{ranks} GPU(s) a node, {share(j['ratio'])} of synthetic: {verdict(j, tolerance)}"
    )


def fix_keys(system, framework, path):
    """The config keys that change how fast a point's input feeds its GPUs."""
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
JUDGE = ("input_tolerance", "input_bound_expected")


def add_judge_arguments(ap):
    """The flags of the judgement's keys, for every table that judges the input check: preflight's
    and the training tables."""
    return schema.add_arguments(ap, "preflight", JUDGE)


def judge_argv(preflight):
    """Their words (plan/preflight_plan.py's judge_args); no paths listed, no word."""
    return schema.argv(preflight, "preflight", JUDGE, quiet=("input_bound_expected",))
