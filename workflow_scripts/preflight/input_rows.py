"""The input check's rows of results/preflight_data.md: one per real-data input path and precision of
a pair, judged from its data check's record (preflight_job.input_check) with preflight.input_margin
(common/input_bound.py): ok where the input keeps up at every GPU count of the sweep, a warning
naming the GPU counts where it does not and the keys that would change it, not applicable where
there is no step rate to compare with. Never a failure: the sweep runs either way, and its runs at
the points named carry the caveat input-bound (results/guards.py)."""

from ..common import input_bound
from .check_rows import NA, OK, WARN, row

CHECK = "input_capacity"
NO_DEMAND_FIX = (
    "add synthetic to training.inputs (the sweep's own step rate), or set preflight.demand_steps above 0 "
    "(preflight times it)"
)


def judged(entry, demand, counts, margin):
    """([(count, judgement, estimated, demand's source)] over the sweep's GPU counts, ""), or ([], why
    not) where there is no step rate to judge against."""
    out = []
    for c in counts:
        per_gpu, source = input_bound.per_gpu_demand(demand.get("synthetic", []), demand.get("timed"), c["gpus"])
        if per_gpu is None:
            return [], source + (f" ({demand['error']})" if demand.get("error") else "")
        capacity, estimated = input_bound.capacity_per_rank(entry, c["ranks_per_node"])
        out.append((c, input_bound.judge(capacity, per_gpu, c["ranks_per_node"], margin), estimated, source))
    return out, ""


def rows(res, margin, expected=()):
    """The rows of one data check's result (res: its JSON) for results/preflight_data.csv."""
    rec = res.get("input_capacity")
    if not rec:
        return []
    st, out = rec["settings"], []
    for path in st["inputs"]:
        entry = rec["inputs"].get(path) or {"images_per_s": None, "error": "no record"}
        fix = input_bound.fix(res["system"], res["framework"], path)
        node = entry.get("host") or ""
        if not entry.get("images_per_s"):
            out.append(
                row(
                    CHECK,
                    WARN,
                    f"{path}: not measured",
                    f"the input's capacity could not be measured ({entry.get('error')}): whether it keeps up with the "
                    f"GPUs is not known before the sweep",
                    f"see {res.get('log', 'the check job log')}",
                    node,
                )
            )
            continue
        alone = (
            f"one rank alone: {entry['images_per_s']:,.0f} images/s on {entry['threads']} decode thread(s), "
            f"{entry.get('cpus', '?')} CPU(s), {st['seconds']:g} s, batch {st['batch']}"
        )
        for precision in st["precisions"]:
            found, why = judged(entry, rec["demand"].get(precision, {}), st["counts"], margin)
            if not found:
                out.append(
                    row(CHECK, NA, f"{path} {precision}: {alone}", f"demand unknown: {why}", NO_DEMAND_FIX, node)
                )
                continue
            c, j, estimated, source = max(found, key=lambda x: (x[0]["ranks_per_node"], x[0]["gpus"]))
            figure = (
                f"{path} {precision}: {input_bound.sentence(j, c['ranks_per_node'], margin, estimated)} "
                f"(demand: {source}); {alone}"
            )
            bound = [x for x in found if x[1]["bound"]]
            if not bound:
                out.append(row(CHECK, OK, figure, node=node, value=j["capacity"], unit="images/s"))
                continue
            at = ", ".join(f"{x[0]['gpus']}" for x in bound)
            asked = path in expected
            cause = f"input-bound at {at} GPU(s)"
            worst = max(bound, key=lambda x: x[1]["shortfall"])
            if worst[0] is not c:  # the figure is of another count: this one's too
                sentence = input_bound.sentence(worst[1], worst[0]["ranks_per_node"], margin, worst[2])
                cause += f" ({worst[0]['gpus']} GPU(s): {sentence})"
            cause += (
                f": asked for ({input_bound.EXPECTED_KEY} lists {path}); the runs there measure their input, and "
                "carry the caveat input-bound"
                if asked
                else ": the runs there will measure the input, not the framework; they still run, and carry the "
                "caveat input-bound (no scaling verdict rests on them)"
            )
            out.append(
                row(
                    CHECK,
                    OK if asked else WARN,
                    figure,
                    cause,
                    "" if asked else fix,
                    node,
                    value=j["capacity"],
                    unit="images/s",
                )
            )
    return out
