"""What the input check of a pair's preflight data check measures, and against what
(docs/preflight.md#the-input-check), from the config: the sweep's real-data input paths of the
framework on the system, the batch and image size they read at, the ranks a node at each GPU count
of the sweep, the sweep's synthetic runs of the pair (read where they exist when the check runs)
and the trainer's command lines of preflight's own timing of the step rate. plan/preflight_plan.py
passes it to the data check as one JSON word; only the keys a framework's runs use are in its
settings, so editing another framework's option reruns no check of this one."""

from .sweep import TRAINER_OF


class InputPlan:
    def __init__(self, config, sweep, commands):
        """sweep: the config's plan.sweep.Sweep; commands: its plan.commands.TrainerCommands."""
        self.config, self.sweep, self.commands = config, sweep, commands
        self.train, self.preflight = config["training"], config["preflight"]

    def batch(self, framework, precision):
        factor = self.train["fp16_batch_factor"] if precision == "fp16" else 1
        return self.train["batch_per_gpu"][framework] * factor

    def settings(self, system, framework, points):
        """The check's settings for (system, framework), or None where the sweep reads no dataset for
        it (synthetic input only). points: the sweep (plan.sweep.Sweep.sweep())."""
        t = self.train
        inputs = [i for i in self.sweep.run_inputs(system, framework) if i != "synthetic"]
        if not inputs:
            return None
        counts = []
        for g in sorted(t["gpus"]):
            nodes, per_node = self.sweep.placement(system, g)
            counts.append({"gpus": g, "nodes": nodes, "ranks_per_node": per_node})
        steps = self.preflight["demand_steps"]
        pytorch = framework == "pytorch"
        return {
            "inputs": inputs,
            "precisions": t["precisions"],
            "decoder": t["pytorch"]["dali_decoder"] if pytorch else "cpu",
            # the largest batch a rank reads at (fp16's where the sweep has it): images/s of an input
            # path hardly depend on it
            "batch": max(self.batch(framework, p) for p in t["precisions"]),
            "image_size": t["image_size"],
            "seconds": self.preflight["input_seconds"],
            "device": "cpu" if self.config["systems"][system]["gpu_request"] == "none" else "gpu",
            "decode_threads": t["decode_threads"],
            "loader_workers": t["pytorch"]["loader_workers"] if pytorch else 0,
            "ranks_per_node": sorted({c["ranks_per_node"] for c in counts}),
            "counts": counts,
            "synthetic_runs": [
                {k: p[k] for k in ("precision", "gpus", "nodes", "repeat", "run_dir")}
                for p in points
                if p["system"] == system and p["framework"] == framework and p["input"] == "synthetic"
            ],
            # the trainer (workflow_scripts.train.<it>) and, per precision, its command line; none with
            # preflight.demand_steps 0
            "trainer": TRAINER_OF[framework],
            "timing": {
                p: self.commands.preflight_synthetic_run(system, framework, p, steps)
                for p in (t["precisions"] if steps else [])
            },
            "demand_steps": steps,
        }
