"""The input check's rows of results/preflight_data.md: one per real-data input path and precision of
a pair, judged from its check's record (preflight_job.input_check) with preflight.input_tolerance
(common/input_bound.py): ok where the real-data run keeps up with the synthetic one at the check's
ranks a node and, estimated, at every other of the sweep; a warning naming the GPU counts where it
does not and the keys that would change it; not applicable where there is no synthetic rate to
compare with. Never a failure: the sweep runs either way, and its runs are judged again by their own
figures (results/input_marks.py). Outside Snakemake: rows(json.load(open(result)), tolerance)."""

from ..common import input_bound
from .check_rows import NA, OK, WARN, row

CHECK = "input_capacity"
NOT_RUN_FIX = "set preflight.input_steps above 0 (the check then runs the trainer on synthetic and on real data)"


def at(entry, synthetic, ranks, tolerance):
    """(judgement, estimated) at `ranks` GPUs a node: as the check ran there, else estimated."""
    capacity, estimated = input_bound.capacity_per_rank(entry, ranks)
    per_gpu = synthetic["images_per_s"] / synthetic["gpus"]
    return input_bound.judge(capacity, per_gpu, ranks, tolerance), estimated


def judged(entry, synthetic, counts, tolerance):
    """[(count, judgement, estimated)] over the sweep's GPU counts (the check's own where it has
    none)."""
    counts = counts or [{"gpus": entry["gpus"], "nodes": 1, "ranks_per_node": entry["ranks_per_node"]}]
    return [(c, *at(entry, synthetic, c["ranks_per_node"], tolerance)) for c in counts]


def ran(entry, synthetic):
    """What the two runs were: their timed steps, the real run's decode threads and input wait."""
    wait = entry.get("input_wait_share")
    waited = "" if wait is None else f", waited for its input {wait:.0%} of them (not itself a verdict)"
    threads = f", {entry['threads']} decode thread(s)" if entry.get("threads") else ""
    return (
        f"real: {entry['steps']} timed steps on {entry.get('device') or '?'}{threads}{waited}; "
        f"synthetic: {synthetic['steps']} timed steps"
    )


def not_measured(label, entry, rec, node, log):
    """The row of a path (and precision) with no real-data figure."""
    if not rec["settings"].get("input_steps"):
        cause = (
            "preflight.input_steps is 0: the check ran no trainer; whether the input keeps up is not known before "
            "the sweep"
        )
        return row(CHECK, NA, f"{label}: not measured", cause, NOT_RUN_FIX, node)
    cause = (
        f"the check's run on real data failed ({entry.get('error') or 'no record'}): whether the input keeps up "
        "with the GPUs is not known before the sweep"
    )
    return row(CHECK, WARN, f"{label}: not measured", cause, f"see {log}", node)


STAND_IN = (
    " (CPU processes stand in for GPUs here: the input decodes on the cores the step computes on, which says "
    "little of a GPU node)"
)


def bound_cause(found, figure, path, tolerance, expected, device):
    """The cause of a row with counts that are input-bound: which, the worst's figure where it is
    not the row's (figure: the judgement the row shows), and what happens to their runs."""
    bound = [f for f in found if f[1]["bound"]]
    cause = f"{input_bound.INPUT_BOUND} at {', '.join(str(c['gpus']) for c, *_ in bound)} GPU(s)"
    worst = max(bound, key=lambda f: f[1]["shortfall"])
    if worst[1]["shortfall"] != figure["shortfall"]:  # the figure is of another count: this one's too
        sentence = input_bound.sentence(worst[1], worst[0]["ranks_per_node"], tolerance, worst[2])
        cause += f" ({worst[0]['gpus']} GPU(s): {sentence})"
    cause += STAND_IN if device == "cpu" else ""
    if path in expected:
        return cause + (
            f": asked for ({input_bound.EXPECTED_KEY} lists {path}); the runs there measure their input, and "
            "carry the caveat input-bound"
        )
    return cause + (
        ": the runs there will measure the input, not the framework; they still run, each is judged again "
        "against the sweep's synthetic runs of its point, and those that fall short carry the caveat input-bound "
        "(no scaling verdict rests on them)"
    )


def path_row(res, path, precision, runs, tolerance, expected):
    """One path and precision's row: the figure at the check's ranks a node, as it ran."""
    rec = res["input_check"]
    node, label, log = rec.get("node", ""), f"{path} {precision}", res.get("log", "the check job's log")
    entry, synthetic = runs["real"].get(path) or {"images_per_s": None}, runs["synthetic"]
    if not entry.get("images_per_s"):
        return not_measured(label, entry, rec, node, log)
    if not synthetic.get("images_per_s"):
        why = f"demand unknown: the check's synthetic run failed ({synthetic.get('error') or 'no record'})"
        fix = f"see {log}; after the sweep its synthetic runs (training.inputs synthetic) judge its runs"
        return row(CHECK, NA, f"{label}: {entry['images_per_s']:,.0f} images/s on real data", why, fix, node)
    j, _ = at(entry, synthetic, entry["ranks_per_node"], tolerance)
    figure = f"{label}: {input_bound.sentence(j, entry['ranks_per_node'], tolerance)} ({ran(entry, synthetic)})"
    found = judged(entry, synthetic, rec["settings"]["counts"], tolerance)
    if not any(f[1]["bound"] for f in found):
        return row(CHECK, OK, figure, node=node, value=j["capacity"], unit="images/s")
    asked = path in expected
    fix = "" if asked else input_bound.fix(res["system"], res["framework"], path)
    cause = bound_cause(found, j, path, tolerance, expected, rec["settings"]["device"])
    return row(CHECK, OK if asked else WARN, figure, cause, fix, node, value=j["capacity"], unit="images/s")


def rows(res, tolerance, expected=()):
    """The rows of one input check's result (res: its JSON) for results/preflight_data.csv."""
    rec = res.get("input_check")
    if not rec:
        return []
    st = rec["settings"]
    if not rec["runs"]:  # preflight.input_steps 0: no run, one row a path
        return [not_measured(path, {}, rec, rec.get("node", ""), "") for path in st["inputs"]]
    return [
        path_row(res, path, precision, rec["runs"][precision], tolerance, expected)
        for path in st["inputs"]
        for precision in st["precisions"]
        if precision in rec["runs"]
    ]
