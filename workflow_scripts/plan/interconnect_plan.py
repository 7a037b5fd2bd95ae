"""The interconnect stage's plan (rules/interconnect.smk): what config.yaml's interconnect section
means for each sweep point, checked when the workflow is parsed. Methods that take `w` are called
by Snakemake with a job's wildcards."""

import shlex

from workflow_scripts.cluster import interpreter
from workflow_scripts.common.errors import StageError
from workflow_scripts.interconnect import nccl_tests
from workflow_scripts.plan import config_checks
from workflow_scripts.plan.sweep import ConfigProblem, requests_gpus


class InterconnectPlan:
    def __init__(self, config, sweep, repo, unbuilt=None):
        """sweep: the config's plan.sweep.Sweep; repo: the repository's folder (interpreters);
        unbuilt: the plan.unbuilt_envs.Unbuilt the other interpreters are noted in."""
        self.config, self.sweep, self.repo, self.unbuilt = config, sweep, repo, unbuilt
        self.ic, self.train = config["interconnect"], config["training"]
        self.results = config["results_dir"]
        self.nccl_tests = self.ic["nccl_tests"]

    def max_bytes(self, system):
        """auto: 1 GiB where the system requests GPUs (the Brookhaven paper's range); on a CPU, 128 MiB:
        the smallest power of 2 above ResNet-50's 102 MB of fp32 gradients, at a cost the CPU default
        can carry (docs/decisions.md#interconnect_max_bytes)."""
        if self.ic["max_bytes"] != "auto":
            return self.ic["max_bytes"]
        return 2**30 if requests_gpus(self.config["systems"][system]) else 2**27

    def check(self):
        """A message range that is empty, or an nccl-tests build without a collective's binary, is a
        ConfigProblem now."""
        for system in self.train["systems"]:
            if self.max_bytes(system) < self.ic["min_bytes"]:
                raise ConfigProblem(
                    f"config interconnect.max_bytes = {self.max_bytes(system)} is below interconnect.min_bytes "
                    f"= {self.ic['min_bytes']} (system {system!r})"
                )
        if not self.nccl_tests:
            return
        config_checks.check_path("interconnect.nccl_tests", self.nccl_tests)
        for collective in self.ic["collectives"]:
            try:
                nccl_tests.binary(self.nccl_tests, collective)
            except StageError as exc:
                raise ConfigProblem(str(exc)) from None

    def dir(self, system, gpus):
        return f"{self.results}/interconnect/{system}/{gpus}gpu"

    def points(self):
        """Every system and GPU count > 1 of the sweep (but the points skipped now), with its outputs."""
        return [
            {
                "system": s,
                "gpus": g,
                "nodes": self.sweep.placement(s, g)[0],
                "torch": f"{self.dir(s, g)}/torch.json",
                "nccl_tests": f"{self.dir(s, g)}/nccl_tests.json" if self.nccl_tests else "",
            }
            for s in self.train["systems"]
            for g in self.train["gpus"]
            if g > 1 and not self.sweep.skipped(s, g)
        ]

    def allreduce(self):
        """The measurements scaling.csv's predictions read: the all-reduces at each point."""
        if "all_reduce" not in self.ic["collectives"]:
            return []
        return [{"system": p["system"], "gpus": p["gpus"], "raw": p["torch"]} for p in self.points()]

    def python(self, w):
        """The ranks run in the interpreter (or container) the system's PyTorch training runs use, so
        the stage measures the torch and NCCL that training uses (one not built yet: only where the
        invocation plans; note_envs named it)."""
        unbuilt = self.unbuilt if self.unbuilt is not None and self.unbuilt.planning else None
        return config_checks.framework_env(self.config, w.system, "pytorch", self.repo, unbuilt)[1]

    def note_envs(self):
        """The PyTorch interpreter of each system the stage measures, checked when the workflow is
        parsed: one not built yet is named with the training runs' (a sweep without PyTorch runs
        checks none of its own)."""
        for system in sorted({p["system"] for p in self.points()}):
            config_checks.framework_env(self.config, system, "pytorch", self.repo, self.unbuilt)

    def nccl_exec(self, w):
        """nccl-tests' binaries run in that environment too: a container's exec line (with the build
        bound inside) before the binary; nothing for an interpreter on the host."""
        value = config_checks.framework_config(self.config, w.system, "pytorch")[1]
        return shlex.join(interpreter.exec_words(value, self.repo, [self.nccl_tests]))

    def srun_mpi(self, w):
        return self.config["systems"][w.system]["srun_mpi"]

    def args(self, w):
        """The measurement's settings, one list item per argument: only interconnect keys and the
        system's GPU request, so no other config edit reruns it."""
        ic = self.ic
        return [
            "--collectives",
            *ic["collectives"],
            "--min-bytes",
            str(ic["min_bytes"]),
            "--max-bytes",
            str(self.max_bytes(w.system)),
            "--warmup",
            str(ic["warmup"]),
            "--iterations",
            str(ic["iterations"]),
        ]

    def device(self, w):
        """A system that requests GPUs must measure them: no silent fall-back to the CPU."""
        return "cuda" if requests_gpus(self.config["systems"][w.system]) else "auto"

    def nccl_logs(self, w, tool):
        """Where NCCL's debug files of a measurement go (tool: torch or nccl_tests)."""
        return f"{self.dir(w.system, w.gpus)}/nccl_logs/{tool}"
