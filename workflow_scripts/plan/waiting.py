"""The points the tables do not wait for. With systems.<name>.nodes_down: wait, a point too few of
whose nodes are up when the workflow is parsed is planned all the same, its job waiting in SLURM's
queue for days perhaps; if the tables took its outputs as inputs, every table, figure and the
verdict would wait with it. So they take only the points that are not waiting, and are told which
are (a param, which their notes name). Once a waiting point's outputs exist, or its nodes are up
again when the workflow is parsed, it is an input like any other: the inputs and the param change,
and Snakemake writes the tables again (its rerun triggers input and params)."""

from pathlib import Path


class Waiting:
    def __init__(self, sweep):
        """sweep: the plan.sweep.Sweep whose short_now says which points lack nodes now."""
        self.sweep = sweep

    def held(self, point, outputs):
        """Whether the point waits: too few nodes up now, its system waits for them, and some of its
        outputs are not there yet (what it left before the nodes went down is read as it is)."""
        system = point["system"]
        return (
            (system, point["gpus"]) in self.sweep.short_now
            and self.sweep.config["systems"][system]["nodes_down"] == "wait"
            and not all(Path(f).exists() for f in outputs)
        )

    def ready(self, points, outputs):
        """The points a table reads now: all but those held; outputs(point) -> its files."""
        return [p for p in points if not self.held(p, outputs(p))]

    def waiting(self, *groups):
        """[{system, gpus, why}] of the held points, each system and GPU count once, in order; each
        group is (points, outputs) as ready takes them."""
        found = {}
        for points, outputs in groups:
            for p in points:
                key = (p["system"], p["gpus"])
                if key not in found and self.held(p, outputs(p)):
                    found[key] = {"system": p["system"], "gpus": p["gpus"], "why": self.sweep.short_now[key]}
        return list(found.values())

    @staticmethod
    def end_lines(waited, *groups):
        """What the workflow says as it ends about each point the outputs were written without
        (waited: waiting()'s list when it was parsed): run again now that it finished, or once it has."""
        lines = []
        for w in waited:
            files = [
                f
                for points, outputs in groups
                for p in points
                if (p["system"], p["gpus"]) == (w["system"], w["gpus"])
                for f in outputs(p)
            ]
            since = (
                "which has finished since: run the same command again to write them with it"
                if all(Path(f).exists() for f in files)
                else "still waiting for its nodes: run the same command again once it has run"
            )
            lines.append(
                f"dlscale: the tables, figures and verdict were written without {w['system']} at "
                f"{w['gpus']} GPUs, {since}"
            )
        return lines


def run_files(point):
    """A training or long-test run's output that the tables read."""
    return [f"{point['run_dir']}/summary.json"]


def interconnect_files(point):
    """An interconnect point's measurements (plan/interconnect_plan.py points(), or allreduce())."""
    return [f for f in (point.get("torch") or point.get("raw"), point.get("nccl_tests")) if f]
