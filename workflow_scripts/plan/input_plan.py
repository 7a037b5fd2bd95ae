"""What the input check of a pair runs (docs/preflight.md#the-input-check), from the config: the
sweep's real-data input paths of the framework on the system, per precision the trainer's command
lines of its run on synthetic data and of its run on real data through each path, the ranks a node
of the sweep's real-data runs (which the check's verdict is estimated at) and what the decode
threads a rank gets there depend on. plan/preflight_plan.py passes it to the check as one JSON word;
only the keys a framework's runs use are in its settings, so editing another framework's option
reruns no check of this one.

Outside Snakemake (a benchmark), on a config with the schema's defaults filled in:

    settings = InputPlan(config, sweep, commands).settings(system, framework, sweep.sweep())
"""

from .sweep import TRAINER_OF, requests_gpus

# preflight.input_steps auto on a system that requests GPUs: the sweep's own timed steps (training.steps)
# where it times steps, since the input's start-up (its first runs, timed from an empty queue) costs a
# short check more than the longer runs it predicts; INPUT_STEPS_GPU where the sweep times epochs.
# INPUT_STEPS_CPU without GPUs, where each step takes seconds (docs/decisions.md#input_steps).
INPUT_STEPS_GPU, INPUT_STEPS_CPU = 100, 2


class InputPlan:
    def __init__(self, config, sweep, commands):
        """sweep: the config's plan.sweep.Sweep; commands: its plan.commands.TrainerCommands."""
        self.config, self.sweep, self.commands = config, sweep, commands
        self.train, self.preflight = config["training"], config["preflight"]

    @staticmethod
    def counts(system, framework, points):
        """[{gpus, nodes, ranks_per_node}] of the pair's real-data runs in `points`."""
        found = {
            (p["gpus"], p["nodes"])
            for p in points
            if p["system"] == system and p["framework"] == framework and p["input"] != "synthetic"
        }
        return [{"gpus": g, "nodes": n, "ranks_per_node": g // n} for g, n in sorted(found)]

    def steps(self, system):
        """preflight.input_steps on `system`: as given, or for auto by whether it requests GPUs and how
        the sweep's runs are timed."""
        given = self.preflight["input_steps"]
        if given != "auto":
            return given
        if not requests_gpus(self.config["systems"][system]):
            return INPUT_STEPS_CPU
        return self.train["steps"] if self.train["mode"] == "steps" else INPUT_STEPS_GPU

    def runs(self, system, framework, inputs):
        """{precision: {synthetic: words, real: {path: words}}}: the check's trainer command lines, back
        to back on one node; none with preflight.input_steps 0."""
        steps, c = self.steps(system), self.commands
        return {
            p: {
                "synthetic": c.preflight_synthetic_run(system, framework, p, steps),
                "real": {i: c.preflight_real_run(system, framework, p, i, steps) for i in inputs},
            }
            for p in (self.train["precisions"] if steps else [])
        }

    def settings(self, system, framework, points):
        """The check's settings for (system, framework), or None where the sweep reads no dataset for
        it (synthetic input only). points: the sweep (plan.sweep.Sweep.sweep())."""
        t = self.train
        inputs = [i for i in self.sweep.run_inputs(system, framework) if i != "synthetic"]
        if not inputs:
            return None
        counts = self.counts(system, framework, points)
        pytorch = framework == "pytorch"
        return {
            "inputs": inputs,
            "precisions": t["precisions"],
            "decoder": t["pytorch"]["dali_decoder"] if pytorch else "cpu",
            "device": "gpu" if requests_gpus(self.config["systems"][system]) else "cpu",
            "decode_threads": t["decode_threads"],
            "loader_workers": t["pytorch"]["loader_workers"] if pytorch else 0,
            "ranks_per_node": sorted({c["ranks_per_node"] for c in counts}),
            "counts": counts,
            # the trainer (workflow_scripts.train.<it>) and its runs
            "trainer": TRAINER_OF[framework],
            "runs": self.runs(system, framework, inputs),
            "input_steps": self.steps(system),
        }
