"""What preflight's results say of the plan's jobs, for its price (plan/price.py): each pair's
first-kernel time and synthetic step rate per precision, each check's own minutes, and from them a
run's minutes."""

import json
from pathlib import Path

from workflow_scripts.common import input_bound
from workflow_scripts.plan.commands import per_rank_batch
from workflow_scripts.plan.sweep import FORMAT_OF


def _json(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def step_rates(rec):
    """{precision: {synthetic: [], timed: the input check's synthetic run}} of a preflight result
    (none but an input check's has them)."""
    runs = (rec.get("input_check") or {}).get("runs") or {}
    return {p: {"synthetic": [], "timed": r.get("synthetic")} for p, r in runs.items() if isinstance(r, dict)}


class Measured:
    """What preflight's results that exist say (rules/price.smk passes the files the preflight
    tables read, as the plan lists them): per (system, framework) each precision's first-kernel time
    (its environment check's kernel_<precision> rows, the slowest rank) and the synthetic step rate
    its input check recorded (the demand of docs/preflight.md#the-input-check), and each check's own
    minutes (its start and end)."""

    def __init__(self, config, paths, read=_json):
        self.config, self.kernel, self.demand, self.took, self.found = config, {}, {}, {}, 0
        for path in paths:
            rec = read(path)
            if not isinstance(rec, dict):
                continue
            self.found += 1
            pair = (rec.get("system"), rec.get("framework"))
            if rec.get("started_at") and rec.get("ended_at"):
                self.took[path] = (rec["ended_at"] - rec["started_at"]) / 60
            for row in rec.get("rows") or []:
                check, value = row.get("check") or "", row.get("value")
                if check.startswith("kernel_") and isinstance(value, (int, float)):
                    kernel, precision = self.kernel.setdefault(pair, {}), check.removeprefix("kernel_")
                    kernel[precision] = max(kernel.get(precision, 0), value)
            for precision, demand in step_rates(rec).items():
                self.demand.setdefault(pair, {})[precision] = demand

    def rate(self, point):
        """(images/s per GPU, from what) of the point's step, or (None, why)."""
        demand = self.demand.get((point["system"], point["framework"]), {}).get(point["precision"])
        if demand is None:
            return None, (
                f"no synthetic step rate of {point['system']}/{point['framework']} {point['precision']}: "
                f"preflight's input check has not timed it (it runs once the data is converted, for a "
                f"pair that reads data, with preflight.input_steps above 0)"
            )
        return input_bound.per_gpu_demand(demand.get("synthetic") or [], demand.get("timed"), point["gpus"])

    def train_images(self, framework):
        manifest = _json(Path(self.config["data_dir"], FORMAT_OF[framework], "manifest.json")) or {}
        return ((manifest.get("splits") or {}).get("train") or {}).get("images")

    def images_per_gpu(self, point, test):
        """Images a GPU of the point's run steps through (None: not known before the data is converted):
        the short test's warm-up and timed steps at its batch, or its epochs; the long test's epochs."""
        t = self.config["training"]
        if test == "short" and t["mode"] == "steps":
            return (t["warmup_steps"] + t["steps"]) * per_rank_batch(t, point["framework"], point["precision"])
        images = self.train_images(point["framework"])
        epochs = t["epochs"] if test == "short" else t["long_test"]["epochs"]
        return epochs * images / point["gpus"] if images else None

    def run_minutes(self, point, test):
        """Minutes of one run of the point (test: short, the sweep's; long, the long test's) at
        preflight's step rate per GPU, its first kernel before them; None where either is unknown."""
        per_gpu, _ = self.rate(point)
        images = self.images_per_gpu(point, test)
        if not per_gpu or images is None:
            return None
        kernel = self.kernel.get((point["system"], point["framework"]), {}).get(point["precision"], 0)
        return (kernel + images / per_gpu) / 60

    def why_not(self, point):
        """Why run_minutes is None for the point."""
        if not self.found:
            return "no preflight result yet"
        per_gpu, why = self.rate(point)
        if not per_gpu:
            return why
        return "the data's manifest (the train images) is not there yet: it is converted first"
