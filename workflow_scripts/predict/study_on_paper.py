"""The study on paper: the all-reduce model (collective_model.py) run on the study's own hardware
and set beside the study's measured speedups, from paper_figures.yaml alone. For every
framework it says how much of the loss at the largest measured point communication explains,
and the Brookhaven paper's measured bus bandwidths are set beside the links' stated ones
(brookhaven_busbw.py).

    python -m workflow_scripts.predict.study_on_paper --out-csv OUT.csv --out-md OUT.md \\
        [--one-gpu-images-per-s tensorflow:fp32=IMAGES_PER_S ...]

The source documents draw the 1-GPU images/s of the study's Fig. 2 in a chart only. Without them
the rows give the all-reduce time and, at a measured point, the break-even: the 1-GPU images/s
above which the all-reduce alone, after the backward pass, costs all that the run lost.
--one-gpu-images-per-s supplies a figure of your own (marked as yours in the table).
"""

import argparse
import csv
import io
from pathlib import Path

import yaml

from ..common.errors import StageError, run_main
from ..interconnect.efficiency_bounds import verdict
from . import step_messages as msg
from .brookhaven_busbw import BROOKHAVEN_COLUMNS, brookhaven_rows
from .collective_model import Link, System
from .paper_entries import resolve, value, where
from .step_model import Workload, allreduce_at, bounds, hideable_at, powers_of_two

YAML = Path(__file__).with_name("paper_figures.yaml")

COLUMNS = [
    "setup",
    "system",
    "framework",
    "precision",
    "gpus",
    "nodes",
    "batch_per_gpu",
    "gradient_bytes",
    "bucket_bytes",
    "messages",
    "overlap_possible",
    "allreduce_s",
    "one_gpu_images_per_s",
    "one_gpu_from",
    "efficiency_no_overlap",
    "efficiency_full_overlap",
    "speedup_no_overlap",
    "speedup_full_overlap",
    "measured_speedup",
    "measured_efficiency",
    "measured_from",
    "measured_position",
    "communication_share",
    "breakeven_one_gpu_images_per_s",
    "note",
]


def load(path=YAML):
    try:
        return yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise StageError(f"{path}: cannot be read as YAML ({exc})")


def system_from(doc, spec):
    """A collective_model.System from a yaml system: the node's link per GPU count (a shared link
    split between the GPUs that use it at once), the network and the topology."""
    g = value(doc, spec["gpus_per_node"])
    intra = spec["intra"]
    latency = value(doc, intra["step_latency_s"])
    if "busbw_GBps_by_gpus" in intra:
        links = {int(k): Link(value(doc, v), latency) for k, v in intra["busbw_GBps_by_gpus"].items()}
    elif value(doc, intra.get("shared", False)):
        bw = value(doc, intra["busbw_GBps"])
        links = {k: Link(bw / k, latency) for k in range(2, g + 1)}
    else:
        links = Link(value(doc, intra["busbw_GBps"]), latency)
    inter = spec.get("inter")
    inter = Link(value(doc, inter["busbw_GBps"]), value(doc, inter["step_latency_s"])) if inter else None
    return System(g, links, inter, value(doc, spec["topology"]))


def _measured(doc, spec):
    """{gpus: (efficiency or None, its source, its note)} of a workload's measured points."""
    out = {}
    ips1 = value(doc, spec["one_gpu_images_per_s"])
    for p in spec.get("speedup", []):
        eff = p["value"] / p["gpus"] if p["value"] is not None else None
        out[p["gpus"]] = (eff, where(p), p.get("note", ""))
    for p in spec.get("images_per_s", []):
        eff = p["value"] / (p["gpus"] * ips1) if p["value"] is not None and ips1 else None
        out[p["gpus"]] = (eff, where(p), p.get("note", ""))
    return out


def _override(overrides, framework, precision):
    return overrides.get(f"{framework}:{precision}")


def sending(doc, spec, gradient_bytes, t1):
    """How a workload's gradients go out (step_messages.Sending): Horovod's Tensor Fusion of its
    era (sending: horovod; its cycles need the 1-GPU step), else one message after the backward
    pass where the yaml gives no bucket (MXNet's and Caffe2's own exchange as the model reads it),
    else messages of the bucket's size."""
    bucket = value(doc, spec["bucket_bytes"])
    if spec.get("sending") == "horovod":
        backward = value(doc, doc["backward_share"]) * t1 if t1 else None
        return msg.horovod_fusion(gradient_bytes, backward, value(doc, doc["horovod_cycle_s"]), bucket)
    if bucket is None:
        return msg.one_message(gradient_bytes, resolve(doc, spec["bucket_bytes"])["assumption"])
    return msg.fixed(gradient_bytes, bucket, True, f"messages of {bucket} B")


def workload_rows(doc, setup_name, system_name, setup, spec, overrides):
    """The rows of one framework x precision on one system: every power of two up to the setup's
    maximum and every measured count."""
    system = system_from(doc, doc["systems"][system_name])
    batch = value(doc, spec["batch_per_gpu"])
    gradient_bytes = value(doc, doc["model"]["parameters"]) * value(doc, spec["element_bytes"])
    bucket = value(doc, spec["bucket_bytes"])
    own = _override(overrides, spec["framework"], spec["precision"])
    ips1 = own or value(doc, spec["one_gpu_images_per_s"])
    ips1_from = "--one-gpu-images-per-s (yours)" if own else (where(resolve(doc, spec["one_gpu_images_per_s"])))
    if not ips1:
        ips1_from = "not in the source documents: " + ips1_from
    t1 = batch / ips1 if ips1 else None
    workload = Workload(t1, batch, sending(doc, spec, gradient_bytes, t1), value(doc, doc["backward_share"]))
    measured = _measured(doc, spec)
    counts = sorted((set(powers_of_two(setup["max_gpus"])) - {1}) | set(measured))
    rows = []
    for n in counts:
        c = allreduce_at(system, workload, n)
        row = dict.fromkeys(COLUMNS)
        row.update(
            setup=setup_name,
            system=system_name,
            framework=spec["framework"],
            precision=spec["precision"],
            gpus=n,
            nodes=system.layout(n)[1],
            batch_per_gpu=batch,
            gradient_bytes=gradient_bytes,
            bucket_bytes=bucket,
            messages=len(workload.messages),
            overlap_possible=workload.sending.overlaps,
            allreduce_s=c,
            one_gpu_images_per_s=ips1,
            one_gpu_from=ips1_from,
            note="",
        )
        if ips1:
            no, full = bounds(t1, c, hideable_at(system, workload, n, c))
            row["efficiency_no_overlap"], row["efficiency_full_overlap"] = no, full
            row["speedup_no_overlap"] = n * row["efficiency_no_overlap"]
            row["speedup_full_overlap"] = n * row["efficiency_full_overlap"]
        if n in measured:
            eff, source, note = measured[n]
            row.update(measured_from=source, note=note)
            if eff is not None:
                _set_measured(row, eff, c, batch)
        rows.append(row)
    return rows


def _set_measured(row, eff, c, batch):
    row["measured_efficiency"] = eff
    row["measured_speedup"] = eff * row["gpus"]
    if eff < 1 and c > 0:
        # t1 / (t1 + c) = eff at t1 = c eff / (1 - eff): a faster GPU (a shorter t1) leaves the
        # all-reduce a larger share of the step
        row["breakeven_one_gpu_images_per_s"] = batch * (1 - eff) / (c * eff)
    if row["efficiency_no_overlap"] is not None:
        no, full = row["efficiency_no_overlap"], row["efficiency_full_overlap"]
        row["measured_position"] = verdict(eff, no, full)[0]
        if eff < 1:
            row["communication_share"] = (1 - no) / (1 - eff)


def rows(doc, overrides=None):
    overrides = overrides or {}
    out = []
    for name, setup in doc["setups"].items():
        for spec in setup["workloads"]:
            for system_name in setup["systems"]:
                out += workload_rows(doc, name, system_name, setup, spec, overrides)
    return out


def _on(rows, fmt):
    """'50.3 (c4140_v100_pcie) to 16.7 (c4140_v100_pcie_switch)': a figure on each system; the
    figure alone where there is one system."""
    if len(rows) == 1:
        return fmt(rows[0])
    return " to ".join(f"{fmt(r)} ({r['system']})" for r in rows)


def explanation(rows):
    """One sentence: how much of the loss measured at one point communication explains, on each of
    the systems the point is predicted on."""
    first = rows[0]
    who = f"{first['framework']} {first['precision']}, {first['gpus']} GPUs ({first['setup']})"
    eff = first["measured_efficiency"]
    loss = 1 - eff
    allreduce = _on(rows, lambda r: f"{r['allreduce_s'] * 1e3:.1f} ms")
    if loss <= 0:
        return f"{who}: measured {eff:.1%}, no loss to explain."
    hides = first["overlap_possible"]
    if first["efficiency_no_overlap"] is None:
        breakeven = _on(rows, lambda r: f"{r['breakeven_one_gpu_images_per_s']:.0f}")
        faster = (
            "on a faster GPU part of it must hide behind the backward pass"
            if hides
            else "on a faster GPU the model, whose one message after the backward pass cannot hide, predicts more loss "
            "than was measured: it would miss"
        )
        return (
            f"{who}: measured {eff:.1%}, {loss:.1%} lost; no 1-GPU images/s in the source documents. The all-reduce "
            f"takes {allreduce}. Sent after the backward pass, it costs the whole loss only if one GPU ran at "
            f"{breakeven} images/s or more; on a slower GPU, part of the loss is input, stragglers or framework "
            f"overhead; {faster}."
        )
    said = (
        f"{who}: measured {eff:.1%}; the model gives {_on(rows, lambda r: format(r['efficiency_no_overlap'], '.1%'))} "
        f"with no overlap, {_on(rows, lambda r: format(r['efficiency_full_overlap'], '.1%'))} with all it can hide "
        f"behind the backward pass (all-reduce {allreduce})"
    )
    share = max(r["communication_share"] for r in rows)
    if any(r["measured_position"] == "above full overlap" for r in rows):
        return f"{said}. Measured above all the model can hide: a miss."
    if share >= 1:
        return (
            f"{said}. Communication can explain all of the {loss:.1%} lost, part of it hidden behind the backward pass."
        )
    return (
        f"{said}. Communication explains at most {share:.0%} of the {loss:.1%} lost; the other "
        f"{1 - share:.0%} is something else: input, stragglers, framework overhead."
    )


def explanations(table):
    """A sentence for the largest measured point of every framework x precision."""
    points = {}
    for r in table:
        if r["measured_efficiency"] is not None:
            points.setdefault((r["setup"], r["framework"], r["precision"], r["gpus"]), []).append(r)
    last = {}
    for (setup, framework, precision, _), rows in points.items():
        last[(setup, framework, precision)] = rows
    return [explanation(rows) for rows in last.values()]


def known_one_gpu(doc):
    """'626 images/s (tensorflow, ...; where)' for every 1-GPU figure the yaml holds."""
    out = []
    for setup in doc["setups"].values():
        for spec in setup["workloads"]:
            entry = resolve(doc, spec["one_gpu_images_per_s"])
            if entry["value"]:
                out.append(
                    f"{entry['value']:g} images/s ({spec['framework']}, precision {spec['precision']}; {where(entry)})"
                )
    return out or ["none"]


def assumptions(doc):
    """(path, assumption, source) of every figure the study on paper takes from outside the source
    documents."""
    found = []

    def walk(node, path):
        if isinstance(node, dict):
            if "assumption" in node:
                found.append((path, node["assumption"], node.get("source", "")))
            for k, v in node.items():
                walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]")

    walk(doc, "")
    return found


# ---------------------------------------------------------------------------------------------
# Writing


def _pct(v):
    return "" if v is None else f"{v:.1%}"


def _num(v, fmt):
    return "" if v is None else format(v, fmt)


def _table(header, lines):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in line) + " |" for line in lines]
    return "\n".join(out)


def markdown(table, brookhaven, doc, command):
    header = [
        "setup",
        "system",
        "framework",
        "precision",
        "GPUs",
        "nodes",
        "all-reduce ms",
        "1-GPU images/s",
        "no overlap",
        "full overlap",
        "measured",
        "where",
        "communication's share",
        "break-even 1-GPU images/s",
    ]
    lines = [
        [
            r["setup"],
            r["system"],
            r["framework"],
            r["precision"],
            r["gpus"],
            r["nodes"],
            _num(r["allreduce_s"] * 1e3 if r["allreduce_s"] is not None else None, ".2f"),
            _num(r["one_gpu_images_per_s"], ".0f"),
            _pct(r["efficiency_no_overlap"]),
            _pct(r["efficiency_full_overlap"]),
            _pct(r["measured_efficiency"]),
            r["measured_position"] or "",
            _pct(r["communication_share"]),
            _num(r["breakeven_one_gpu_images_per_s"], ".0f"),
        ]
        for r in table
    ]
    b_header = ["system", "GPUs", "nodes", "stated GB/s", "measured busbw", "measured / stated"]
    b_header += ["model, one ring", "model, NCCL tree", "model, Horovod hierarchical"]
    b_lines = [
        [
            r["system"],
            r["gpus"],
            r["nodes"],
            _num(r["nominal_GBps"], ".4g"),
            _num(r["measured_busbw_GBps"], ".4g"),
            _pct(r["measured_over_nominal"]),
            *(_num(r[f"model_busbw_{t}_GBps"], ".3g") for t in ("ring", "tree", "hierarchical")),
        ]
        for r in brookhaven
    ]
    parts = [
        "# The study on paper",
        f"Made by `{command}` from `workflow_scripts/predict/paper_figures.yaml` alone. Efficiency is "
        "speedup / GPUs; the model's interval runs from no overlap to all the all-reduce can hide behind "
        "the backward pass (never its last message; nothing where the gradients go out as one message). "
        "Communication's share: the loss the all-reduce would cause with no overlap, over the measured loss "
        "(100% or more: it can explain all of it).",
        "## At the measured points",
        _table(header + ["note"], [[*line, r["note"]] for line, r in zip(lines, table) if r["measured_from"]]),
        "## Every point",
        _table(header, lines),
        "## What communication explains",
        "\n".join(f"- {s}" for s in explanations(table)),
        "For scale, the 1-GPU figures the source documents do give: " + "; ".join(known_one_gpu(doc)) + ".",
        "## The Brookhaven paper's bus bandwidths against the links' stated ones",
        _table(b_header, b_lines),
        "## Figures not from the source documents",
        "\n".join(f"- `{p}`: {a} ({s})" for p, a, s in assumptions(doc)),
    ]
    return "\n\n".join(parts) + "\n"


def write_csv(path, table, columns=COLUMNS):
    buf = io.StringIO()
    w = csv.DictWriter(buf, columns, lineterminator="\n")
    w.writeheader()
    for r in table:
        w.writerow({k: "" if r[k] is None else r[k] for k in columns})
    Path(path).write_text(buf.getvalue())


def parse_overrides(items):
    """{'framework:precision': images/s} from FRAMEWORK:PRECISION=IMAGES_PER_S arguments."""
    out = {}
    for item in items or []:
        key, sep, number = item.partition("=")
        try:
            out[key] = float(number)
        except ValueError:
            sep = ""
        if not sep or ":" not in key or out[key] <= 0:
            raise StageError(
                f"--one-gpu-images-per-s {item!r}: FRAMEWORK:PRECISION=IMAGES_PER_S, e.g. tensorflow:fp32=360"
            )
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--yaml", default=str(YAML), help="default: paper_figures.yaml beside this module")
    ap.add_argument("--out-csv", required=True)
    ap.add_argument("--out-md", required=True)
    ap.add_argument("--brookhaven-csv", help="also write the Brookhaven comparison as CSV")
    ap.add_argument(
        "--one-gpu-images-per-s",
        action="append",
        metavar="FRAMEWORK:PRECISION=IMAGES_PER_S",
        help="a 1-GPU figure the source documents do not give (repeatable)",
    )
    a = ap.parse_args()
    doc = load(a.yaml)
    table = rows(doc, parse_overrides(a.one_gpu_images_per_s))
    brookhaven = brookhaven_rows(doc)
    command = "python -m workflow_scripts.predict.study_on_paper"
    if a.one_gpu_images_per_s:
        command += "".join(f" --one-gpu-images-per-s {x}" for x in a.one_gpu_images_per_s)
    write_csv(a.out_csv, table)
    if a.brookhaven_csv:
        write_csv(a.brookhaven_csv, brookhaven, BROOKHAVEN_COLUMNS)
    Path(a.out_md).write_text(markdown(table, brookhaven, doc, command))


if __name__ == "__main__":
    run_main(main)
