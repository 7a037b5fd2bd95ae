"""The verdict guards (docs/results.md#verdict-guards): what makes a figure one this tool cannot
vouch for. A table shows such a figure with its caveats; a figure is drawn marked; the verdict
table gives no "holds" or "does not hold" on it, but "not decided" and why, naming the runs.

  unstable      a run's images/s varies by more than the study's 2% (metrics.STABLE_CV) over windows
                of metrics.STABILITY_WINDOW steps, as the study's frameworks reported it
  not isolated  something else used a run's nodes in its timed window (cluster/neighbours.py), or
                whether it did is unknown
  impossible    a scaling efficiency above 100% by more than that same 2%: the baseline ran slow
  execution mode changed  a point whose step ran another way than its baseline's (PyTorch's
                compile mode, CUDA graphs, DDP's graph): its efficiency mixes scaling with that
  fewer repeats a point with fewer completed runs than the sweep planned
  baseline not the smallest  efficiencies against a GPU count above the sweep's smallest, whose runs
                did not complete
  throttled     a GPU held down by heat or a power brake in more than THROTTLED_SHARE of its samples
                in the timed window (train/run_evidence.py gpu_state)
  Xid           any GPU error NVML reported in the timed window
  power capped  one of a run's GPUs enforced a power limit below its default (cluster/provenance.py,
                gpu_limits): every step ran on a GPU held below the one the figure stands for
  INT8 timing   Fig. 9's ratio at a batch size whose FP32 or INT8 images/s varied beyond 2% over windows
                of runs, or whose timing job was not (or not known to be) alone on its node (int8_caveats)
  CPU stand-in  CPU processes standing in for GPUs: no performance finding rests on them (an accuracy
                finding does not depend on the device)
  wrong transport  NCCL all-reduced over TCP sockets between nodes that have InfiniBand (nccl_log)
  epoch turnover   a run on real data whose epoch lasts fewer than 4 steps (its images over its global
                batch): each epoch's end stalls the input, so the figure measures that as much as the
                path (docs/results.md#verdict-guards says what showed it)
  input-bound   a run on real data below the synthetic step rate by more than preflight.input_tolerance:
                against the sweep's synthetic runs of its point where it has them, else as
                preflight's input check predicted (results/input_marks.py): the figure is the
                input's, not the framework's; with the share of its timed steps it waited for it,
                shown, not judged (the storage, network and uncached-stability findings read such
                a run all the same)
"""

import re
from pathlib import Path

import pandas as pd

from ..common import input_bound
from ..common.metrics import STABILITY_WINDOW, STABLE_CV

IMPOSSIBLE_MARGIN = STABLE_CV
# A GPU held down by heat or a power brake in more than this share of its samples in the timed
# window: the run measured a slowed GPU (docs/results.md#verdict-guards)
THROTTLED_SHARE = 0.05
# DALI's default prefetch depth (train/pytorch_options.DALI_PREFETCH; tests/test_options.py ties
# them): an epoch shorter than the queue leaves nothing to run ahead across its end (what showed it:
# docs/benchmarks.md#what-the-dali-wait-at-4-gpus-was-d).
MIN_STEPS_PER_EPOCH = 4
SEP = "; "


def run_name(row):
    """system/run directory name, of a record (a dict or a Series) or a table row (a namedtuple)."""
    system, run_dir = (row["system"], row["run_dir"]) if hasattr(row, "keys") else (row.system, row.run_dir)
    return f"{system}/{Path(str(run_dir)).name}"


def isolation_word(summary):
    """true | false | unknown, from a summary's isolation record (unknown where none was made)."""
    iso = summary.get("isolation")
    if not iso or iso.get("isolated") is None:
        return "unknown"
    return "true" if iso["isolated"] else "false"


def stability_cv(row):
    """(the variation a run is judged stable by, its words): images/s over windows of
    metrics.STABILITY_WINDOW steps, else (an older run, or too few steps) per step."""
    window = row.get("window_cv")
    if window is not None and not pd.isna(window):
        return window, f"images/s CV over {STABILITY_WINDOW}-step windows"
    step = row.get("step_cv")
    return (None, "") if step is None or pd.isna(step) else (step, "step CV")


def fewer_repeats(point, done, planned, runs):
    """[the caveat] of a point with fewer completed runs than planned: an interval over the runs that
    finished leaves out the ones that did not (a timed-out repeat on a slow node), naming them."""
    if done >= planned:
        return []
    rows = runs[(runs[list(point)] == pd.Series(point)).all(axis=1) & (runs.status != "ok")]
    why = "; ".join(f"{Path(str(r.run_dir)).name} {r.status}" for r in rows.itertuples())
    name = f"{point['system']}/{point['framework']}_{point['precision']}_{point['gpus']}gpu"
    return [f"fewer repeats: {name} {done} of {planned} runs completed ({why})"]


def device_changed(base_device, device, name, base_gpus):
    """The caveat of a point whose GPU model is not its baseline's (a partition of two models): its
    efficiency would compare two GPUs, not one GPU's scaling. device: results/runs.py's "<n>x <model>"."""

    def model(d):
        return re.sub(r"^\d+x ", "", str(d or ""))

    if not base_device or not device or model(base_device) == model(device):
        return None
    return f"device changed: {name} ran on {model(device)}, its {base_gpus}-GPU baseline on {model(base_device)}"


def baseline_moved(key, base_gpus, smallest):
    """[the caveat] of efficiencies against a baseline that is not the sweep's smallest GPU count
    (its runs there did not complete): they are not the study's, which are against 1 GPU."""
    if base_gpus <= smallest:
        return []
    return [
        f"baseline not the smallest: {key['system']}/{key['framework']}_{key['precision']} against "
        f"{base_gpus} GPUs, its {smallest}-GPU runs did not complete"
    ]


def run_caveats(row):
    """Why one completed run's figure cannot be vouched for ([] when it can): row is a record of
    results/runs.py (step_cv, isolated, isolation_why, run_dir, system)."""
    name, out = run_name(row), []
    cv, words = stability_cv(row)
    if cv is not None and cv > STABLE_CV:
        out.append(f"unstable: {name} {words} {cv:.1%} > {STABLE_CV:.0%}")
    slowed = row.get("gpu_slowed_share")
    if slowed is not None and not pd.isna(slowed) and slowed > THROTTLED_SHARE:
        out.append(f"throttled: {name}: {row.get('gpu_state') or f'{slowed:.0%} of samples slowed'}")
    xids = row.get("xid_errors")
    if xids is not None and not pd.isna(xids) and xids > 0:
        out.append(f"Xid: {name}: {int(xids)} GPU error(s) in its timed window ({row.get('gpu_state') or 'NVML'})")
    if isinstance(row.get("power_capped"), str) and row["power_capped"]:
        out.append(
            f"power capped: {name}: {row['power_capped']}: its steps ran on GPUs held below their default "
            "power limit (nvidia-smi -pl, or the site's power capping)"
        )
    if isinstance(row.get("transport_problem"), str) and row["transport_problem"]:
        # sockets where the nodes have InfiniBand: a figure of the wrong network
        out.append(f"wrong transport: {name}: {row['transport_problem']}")
    steps = row.get("steps_per_epoch")
    if steps is not None and not pd.isna(steps) and steps < MIN_STEPS_PER_EPOCH:
        out.append(
            f"epoch turnover: {name} ends an epoch every {steps:.3g} steps ({int(row['train_images'])} images / "
            f"global batch {int(row['global_batch'])}), fewer than {MIN_STEPS_PER_EPOCH}: its input stalls at each "
            f"epoch's end (more training images: dataset.embedded.train_per_class, or a real dataset)"
        )
    if row.get("input_bound") in (input_bound.BOUND, input_bound.ASKED):
        out.append(input_caveat(row, name))
    why = row.get("isolation_why") or "no isolation record"
    if row.get("isolated") == "false":
        out.append(f"not isolated: {name}: {why}")
    elif row.get("isolated") != "true":
        out.append(f"isolation unknown: {name}: {why}{lost_steps(row, why)}")
    return out


def lost_steps(row, why):
    """What it means where a run that timed its steps has none in its steps.jsonl: the file was
    removed or rewritten while it ran, as a second run in the same directory does (docs/faults.md)."""
    steps = row.get("timed_steps")
    if not why.startswith("no timed window") or steps is None or pd.isna(steps) or steps <= 0:
        return ""
    return (
        f", though it timed {int(steps)} steps: its steps.jsonl was removed or rewritten while it ran, "
        "as another run writing into its directory does (two workflows in one directory)"
    )


def int8_caveats(row):
    """Why one INT8/FP32 pair's ratio (a row of int8_throughput.csv) cannot be vouched for, by the
    training runs' rules: a precision whose images/s varied beyond the study's 2%, and a timing job
    whose node was not (or not known to be) its own."""
    name, out = f"{row.network} batch {row.batch_size} ({row.engine})", []
    for p in ("fp32", "int8"):
        cv = getattr(row, f"{p}_cv", None)
        if cv is not None and not pd.isna(cv) and cv > STABLE_CV:
            over = getattr(row, f"{p}_cv_over", "runs")
            what = f"images/s CV over {STABILITY_WINDOW}-run windows" if over == "windows" else "run-time CV"
            out.append(f"unstable: {name} {p.upper()} {what} {cv:.1%} > {STABLE_CV:.0%}")
    # "true"/"false" as written, or read back by pandas as booleans
    isolated, why = str(getattr(row, "isolated", "unknown")).lower(), getattr(row, "isolation_why", "")
    why = "" if pd.isna(why) else why
    if isolated == "false":
        out.append(f"not isolated: {name}: {why}")
    elif isolated != "true":
        out.append(f"isolation unknown: {name}: {why or 'no isolation record'}")
    return out


def input_caveat(row, name):
    """An input-bound run (results/input_marks.py): the figures it was judged by and the run's own
    input wait."""
    share = row.get("input_wait_share")
    waited = (
        "its input wait is not recorded"
        if share is None or pd.isna(share)
        else f"it waited for its input {share:.0%} of its timed steps"
    )
    if row["input_bound"] == input_bound.ASKED:
        return (
            f"{input_bound.INPUT_BOUND} (asked for: {input_bound.EXPECTED_KEY}): {name}: {row['input_check']}; {waited}"
        )
    keys = ", ".join(input_bound.fix_keys(row["system"], row["framework"], row.get("input", "")))
    did = "did not keep up" if row.get("input_judged_by") == input_bound.MEASURED else "is predicted not to keep up"
    return (
        f"{input_bound.INPUT_BOUND}: {name}: its input {did} with its GPUs: {row['input_check']}; {waited} "
        f"(a faster input: {keys})"
    )


def impossible(efficiency, name):
    """The caveat of a scaling efficiency no run can reach, or None."""
    if pd.notna(efficiency) and efficiency > 1 + IMPOSSIBLE_MARGIN:
        return (
            f"impossible: {name} efficiency {efficiency:.1%} is above 100% by more than {IMPOSSIBLE_MARGIN:.0%} "
            "(its baseline ran slower than it can)"
        )
    return None


def mode_changed(base_mode, mode, name, base_gpus):
    """The caveat of a point whose step ran another way than its baseline's (PyTorch's CUDA graphs
    within a node, not across nodes): its efficiency mixes the scaling with that change, or None.
    A baseline of one process records its compiled step alone, without DDP's part (pytorch_options'
    execution_mode): DDP itself is what scaling adds, so only the compiled step is compared."""
    if base_mode and mode and base_mode != mode and not mode.startswith(base_mode + ", DDP graph "):
        return f"execution mode changed: {name} ran {mode}, its {base_gpus}-GPU baseline {base_mode}"
    return None


def cache_caveat(row):
    """The caveat of a cold-read finding (uncached stability, Fig. 7's storage reads) on a run whose
    reads may have been warm (results/runs.py, cache_not_emptied): a file system's or its servers'
    own cache that clearing does not reach, or an eviction that did not take; None where clearing
    took and reached every cache."""
    why = row.get("cache_not_emptied")
    if pd.isna(why) or not str(why):
        return None
    return f"cache not emptied: {run_name(row)}: {why}; its reads may not have been cold"


def cache_caveats(runs):
    """cache_caveat of every run that has one."""
    return [c for _, r in runs.iterrows() if (c := cache_caveat(r))]


def cpu_stand_in(device):
    return str(device).startswith("CPU")


def split(cell):
    """A table's caveats cell as a list."""
    if not isinstance(cell, str) or not cell.strip():
        return []
    return [c for c in cell.split(SEP) if c]


def join(caveats):
    return SEP.join(dict.fromkeys(caveats))


def combine_isolated(words):
    words = set(words)
    return "false" if "false" in words else "unknown" if words - {"true"} else "true"
