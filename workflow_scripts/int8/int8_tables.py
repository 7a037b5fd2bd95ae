"""The stage's two tables, as CSV and as markdown:

  accuracy    Table III: FP32 and INT8 top-1/top-5 per network and their difference (FP32 - INT8,
              so a positive difference is accuracy INT8 lost, as the study reports it), with the
              image counts, engine, calibration method and weights behind them
  throughput  Fig. 9's data: FP32 and INT8 images/s per batch size (median, fastest, slowest run)
              and the INT8/FP32 ratio, with how the runs were timed and the device and node both
              precisions ran on; a pair timed on two devices or nodes is refused, not tabled

Reads the per-job JSON files under the stage's directory (results/int8/<network>/...); needs
nothing beyond the standard library.
"""

import argparse
import csv
import json
from pathlib import Path

from ..common.atomic import atomic_file
from ..common.chance_level import describe, no_better_than_guessing
from ..common.errors import StageError, run_main
from .networks import NETWORKS

ACCURACY = (
    "network",
    "model",
    "engine",
    "calibration_method",
    "calibration_images",
    "scored_images",
    "classes",
    "fp32_top1",
    "fp32_top5",
    "int8_top1",
    "int8_top5",
    "diff_top1",
    "diff_top5",
    "fp32_top1_correct",
    "fp32_top5_correct",
    "int8_top1_correct",
    "int8_top5_correct",
    "activations",
    "weights",
    "fp32_device",
    "fp32_host",
    "int8_device",
    "int8_host",
)
THROUGHPUT = (
    "network",
    "model",
    "engine",
    "device",
    "host",
    "image_size",
    "batch_size",
    "fp32_images_per_s",
    "fp32_best",
    "fp32_worst",
    "int8_images_per_s",
    "int8_best",
    "int8_worst",
    "int8_over_fp32",
    "repeats",
    "warmup",
    "threads",
    "timing",
    "order",
    # what the verdict guards read (results/guards.py int8_caveats)
    "fp32_cv",
    "fp32_cv_over",
    "int8_cv",
    "int8_cv_over",
    "isolated",
    "isolation_why",
)


def _json(path):
    return json.loads(Path(path).read_text())


def _pct(count, n):
    return round(100.0 * count / n, 4)


def accuracy_rows(root, engine, models):
    rows = []
    for m in models:
        info, cache = _json(root / m / "model.json"), _json(root / m / "calibration_cache.json")
        ev = {p: _json(root / m / engine / f"{p}.eval.json") for p in ("fp32", "int8")}
        n = ev["fp32"]["images"]
        if ev["int8"]["images"] != n:
            raise ValueError(f"{m}: FP32 scored {n} images, INT8 {ev['int8']['images']}")
        w = info["weights"]
        row = {
            "network": NETWORKS[m],
            "model": m,
            "engine": engine,
            "calibration_method": cache["method"],
            "calibration_images": cache["calibration_images"],
            "scored_images": n,
            # the model's outputs: what guessing is measured against (common/chance_level.py)
            "classes": ev["fp32"].get("classes", ""),
            "activations": cache["activations"],
            "weights": w["source"] + (f" {w['file']}" if "file" in w else ""),
            # Records written before evaluate.py kept them say nothing: left empty, not guessed.
            **{f"{p}_{k}": ev[p].get(k, "") for p in ("fp32", "int8") for k in ("device", "host")},
        }
        for p in ("fp32", "int8"):
            for k in ("top1", "top5"):
                row[f"{p}_{k}_correct"] = ev[p][f"{k}_correct"]
                row[f"{p}_{k}"] = _pct(ev[p][f"{k}_correct"], n)
        for k in ("top1", "top5"):  # from the counts, so it is exact, not a difference of rounded figures
            row[f"diff_{k}"] = _pct(ev["fp32"][f"{k}_correct"] - ev["int8"][f"{k}_correct"], n)
        rows.append(row)
    return rows


def accuracy_markdown(rows):
    lines = [
        "| Network | FP32 Top-1 | FP32 Top-5 | INT8 Top-1 | INT8 Top-5 | Difference Top-1 | Difference Top-5 |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['network']} | "
            + " | ".join(
                f"{r[k]:.2f}%" for k in ("fp32_top1", "fp32_top5", "int8_top1", "int8_top5", "diff_top1", "diff_top5")
            )
            + " |"
        )
    notes = [""]
    for r in rows:
        ran = {
            p: f"{r[f'{p}_device'] or 'unrecorded device'} ({r[f'{p}_host'] or 'unrecorded node'})"
            for p in ("fp32", "int8")
        }
        notes.append(
            f"- {r['network']}: {r['engine']} "
            + (f"on {ran['fp32']}" if ran["fp32"] == ran["int8"] else f"(FP32 on {ran['fp32']}, INT8 on {ran['int8']})")
            + f", weights {r['weights']}; INT8 calibrated ({r['calibration_method']}, "
            f"{r['activations']} activations) on the first {r['calibration_images']} val images, scored on the "
            f"other {r['scored_images']}; top-1 {r['fp32_top1_correct']} vs {r['int8_top1_correct']}, top-5 "
            f"{r['fp32_top5_correct']} vs {r['int8_top5_correct']} images right (FP32 vs INT8)."
        )
        if r["classes"] and no_better_than_guessing(r["fp32_top1_correct"], r["scored_images"], r["classes"]):
            notes.append(f"- {r['network']}: **{describe(r['fp32_top1_correct'], r['scored_images'], r['classes'])}.**")
    notes.append("- Difference = FP32 - INT8 in percentage points (positive: accuracy INT8 lost), as in Table III.")
    return "\n".join(lines + notes) + "\n"


PRECISIONS = ("fp32", "int8")


def _pair(root, engine, model, bs):
    """({precision: that precision's run record}, the file(s) they came from). A record of the one
    job that times both (throughput.py) is read first; else the two files of the per-precision jobs
    of before, which a results directory may still hold."""
    folder = root / model / engine / "throughput"
    both = folder / f"bs{bs}.json"
    if both.exists():
        rec = _json(both)
        order = " ".join(p for p, _ in rec["blocks"])
        shared = {k: rec[k] for k in ("image_size", "warmup", "threads")} | {"order": order}
        shared["isolation"] = rec.get("isolation") or {}
        return {p: {**shared, **rec["precisions"][p]} for p in PRECISIONS}, str(both)
    old = {p: folder / f"{p}_bs{bs}.json" for p in PRECISIONS}
    missing = [str(f) for f in old.values() if not f.exists()]
    if missing:
        raise StageError(
            f"no throughput record {both} for {model} on {engine} at batch {bs} (nor {' and '.join(missing)} of the "
            f"per-precision jobs of before): run `snakemake int8`"
        )
    return {p: _json(f) for p, f in old.items()}, " and ".join(str(f) for f in old.values())


def _same_place(runs, source):
    """(device, node) both precisions ran on, or a StageError naming both and the file: a ratio of two
    devices' (or two nodes') images/s measures the devices as much as INT8. A node the old
    per-precision records did not keep is ''."""
    fp32, int8 = runs["fp32"], runs["int8"]
    for key, what in (("device", "device"), ("host", "node")):
        if key == "host" and not (fp32.get(key) and int8.get(key)):
            continue  # the old per-precision records kept no node
        if fp32.get(key) != int8.get(key):
            raise StageError(
                f"{source}: FP32 was timed on {what} {fp32.get(key)!r} and INT8 on {what} {int8.get(key)!r}; "
                f"an INT8/FP32 ratio across two {what}s is not INT8's. Delete the file(s) and run `snakemake int8`: "
                f"one job (rule int8_throughput_run) times both on one {what}"
            )
    return fp32["device"], fp32.get("host") or int8.get("host") or ""


def throughput_rows(root, engine, models, batch_sizes):
    rows = []
    for m in models:
        for bs in batch_sizes:
            t, source = _pair(root, engine, m, bs)
            device, host = _same_place(t, source)
            rows.append(
                {
                    "network": NETWORKS[m],
                    "model": m,
                    "engine": engine,
                    "device": device,
                    "host": host,
                    "image_size": t["fp32"]["image_size"],
                    "batch_size": bs,
                    **{
                        f"{p}_{k}": round(t[p][src], 2)
                        for p in PRECISIONS
                        for k, src in (
                            ("images_per_s", "images_per_s"),
                            ("best", "images_per_s_best"),
                            ("worst", "images_per_s_worst"),
                        )
                    },
                    "int8_over_fp32": round(t["int8"]["images_per_s"] / t["fp32"]["images_per_s"], 3),
                    "repeats": t["fp32"]["runs"],
                    "warmup": t["fp32"]["warmup"],
                    "threads": t["fp32"]["threads"],
                    "timing": _timing(t),
                    # the blocks' order in the one job; empty for the per-precision jobs of before
                    "order": t["fp32"].get("order", ""),
                    **_trust(t),
                }
            )
    return rows


def _trust(t):
    """What the verdict guards read of a pair (results/guards.py int8_caveats): each precision's
    variation of images/s (over windows of runs, else over runs) and the job's isolation (unknown for
    a record made before the job kept either)."""
    out = {}
    for p in PRECISIONS:
        window = t[p].get("window_cv")
        out[f"{p}_cv"] = round(window if window is not None else t[p].get("cv", float("nan")), 4)
        out[f"{p}_cv_over"] = "windows" if window is not None else "runs"
    iso = t["fp32"].get("isolation") or {}
    word = {True: "true", False: "false"}.get(iso.get("isolated"), "unknown")
    return {**out, "isolated": word, "isolation_why": iso.get("why") or "the timing job kept no isolation record"}


def _timing(runs):
    """How the runs were timed (throughput.py's record); one written before the record said so
    was timed on the host clock."""
    return " / ".join(sorted({t.get("timing", "host perf_counter") for t in runs.values()}))


def throughput_markdown(rows):
    out = []
    for m in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == m]
        r0 = mine[0]
        blocks = (
            f"FP32 and INT8 of a batch size timed in one job, in blocks {r0['order'].upper()}; " if r0["order"] else ""
        )
        out += [
            f"{r0['network']}, {r0['engine']} on {_where(mine)}, {r0['image_size']}x{r0['image_size']} input; "
            f"{blocks}images/s = batch / median of {r0['repeats']} timed runs after {r0['warmup']} warm-up runs "
            f"{'a block ' if blocks else ''}(slowest..fastest run in brackets), timed with {r0['timing']}.",
            "",
            "| Batch size | FP32 images/s | INT8 images/s | INT8/FP32 |",
            "|---|---|---|---|",
        ]
        for r in mine:
            out.append(
                f"| {r['batch_size']} | {r['fp32_images_per_s']:.1f} ({r['fp32_worst']:.1f}..{r['fp32_best']:.1f}) | "
                f"{r['int8_images_per_s']:.1f} ({r['int8_worst']:.1f}..{r['int8_best']:.1f}) | "
                f"{r['int8_over_fp32']:.2f}x |"
            )
        out.append("")
    return "\n".join(out)


def _where(rows):
    """The device and node of a network's rows: one, or each with its batch sizes (each batch size is
    its own job, which a cluster may place on another node)."""
    places = {}
    for r in rows:
        place = f"{r['device']} ({r['host']})" if r["host"] else r["device"]
        places.setdefault(place, []).append(str(r["batch_size"]))
    if len(places) == 1:
        return next(iter(places))
    return "; ".join(f"{place} (batch {', '.join(sizes)})" for place, sizes in places.items())


def _write(csv_path, md_path, columns, rows, markdown):
    with atomic_file(csv_path) as tmp, open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    with atomic_file(md_path) as tmp:
        tmp.write_text(markdown)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table", choices=("accuracy", "throughput"))
    ap.add_argument("--root", required=True, help="the stage's directory (results/int8)")
    ap.add_argument("--engine", required=True)
    ap.add_argument("--models", nargs="*", default=[], help="none: the stage has no model (tables with no row)")
    ap.add_argument("--batch-sizes", nargs="*", type=int, default=[])
    ap.add_argument("--csv", required=True)
    ap.add_argument("--md", required=True)
    a = ap.parse_args()
    a.models = [m for m in a.models if m]  # an empty list reaches the shell as one '' word
    root = Path(a.root)
    if a.table == "accuracy":
        rows = accuracy_rows(root, a.engine, a.models)
        _write(a.csv, a.md, ACCURACY, rows, accuracy_markdown(rows))
    else:
        rows = throughput_rows(root, a.engine, a.models, a.batch_sizes)
        _write(a.csv, a.md, THROUGHPUT, rows, throughput_markdown(rows))
    print(Path(a.md).read_text())


if __name__ == "__main__":
    run_main(main)
