"""Preflight's input check of a config, run outside Snakemake for benchmarks/trainer_vs_plain.py:
the check job's own command (preflight/preflight_job.py --only-input) with the settings its rule
passes (plan/input_plan.py), and its verdict as preflight's data table words it
(preflight/input_rows.py)."""

import json
from pathlib import Path

from workflow_scripts.plan.commands import TrainerCommands
from workflow_scripts.plan.input_plan import InputPlan
from workflow_scripts.plan.sweep import Sweep


def command(config, system, framework, data, out, python, launch=("--nproc-per-node", "1")):
    """The check job's words for `config` (schema defaults filled in) reading the converted copy at
    `data` (its trainers read the config's data_dir/<format>: data's folder), writing
    `out`/result.json; launch: the launcher's words (its rule's geometry of the node)."""
    config = {**config, "data_dir": str(Path(data).parent)}
    sweep = Sweep(config, True)
    commands = TrainerCommands(config, sweep, {(system, framework): f"envs.{framework}"})
    settings = InputPlan(config, sweep, commands).settings(system, framework, sweep.sweep())
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    return [
        python,
        "-m",
        "workflow_scripts.preflight.preflight_job",
        "--out",
        str(out / "result.json"),
        "--system",
        system,
        "--framework",
        framework,
        f"--python={python}",
        "--log",
        str(out / "check.log"),
        "--only-input",
        f"--input-check={json.dumps(settings)}",
        "--precisions",
        *config["training"]["precisions"],
        "--",
        *launch,
    ]


def verdict(out, tolerance=None):
    """The check's row(s) as preflight's data table has them, and its figures."""
    from workflow_scripts.common.schema import default
    from workflow_scripts.preflight import input_rows

    res = json.loads((Path(out) / "result.json").read_text())
    tolerance = default("preflight.input_tolerance") if tolerance is None else tolerance
    rows = input_rows.rows(res, tolerance)
    rec = res.get("input_check") or {}
    ratios = {
        f"{path} {precision}": real["images_per_s"] / runs["synthetic"]["images_per_s"]
        for precision, runs in (rec.get("runs") or {}).items()
        for path, real in runs.get("real", {}).items()
        if real.get("images_per_s") and (runs.get("synthetic") or {}).get("images_per_s")
    }
    return {
        "ratios": ratios,
        "verdict": " | ".join(f"{r['status']}: {r['figure']} {r.get('cause', '')}".strip() for r in rows),
        "rows": rows,
        "record": res.get("input_check"),
    }
