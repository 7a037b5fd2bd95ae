"""What a job at a sweep point (system, GPUs) asks for: the node and task geometry of its processes,
the srun and sbatch flags of its GPUs, and the resources snakemake-executor-plugin-slurm submits it
with. rules/common.smk hands these to the rules as functions of a job's wildcards."""

import shlex

from ..common import schema
from .sweep import requests_gpus


class JobShape:
    def __init__(self, config, sweep, sbatch_extra):
        """sweep: the config's plan.sweep.Sweep (its placement); sbatch_extra: {system: the words
        of its sbatch_extra}, checked when the workflow is parsed."""
        self.config, self.sweep, self.sbatch_extra = config, sweep, sbatch_extra

    def _system(self, system):
        return self.config["systems"][system]

    def gpus_of_node(self, system, per_node):
        """'4' or 'v100:4': one node's GPU request, or None for a system without GPU requests."""
        sysc = self._system(system)
        if not requests_gpus(sysc):
            return None
        return f"{sysc['gpu_type']}:{per_node}" if sysc["gpu_type"] else str(per_node)

    def gpu_flag(self, system, per_node):
        """The GPU request of one node as sbatch and srun spell it."""
        gpus = self.gpus_of_node(system, per_node)
        if gpus is None:
            return ""
        return f"--gres=gpu:{gpus}" if self._system(system)["gpu_request"] == "gres" else f"--gpus-per-node={gpus}"

    def comm_args(self):
        """What every rank of a training run and of the interconnect stage talks with: config
        nccl_env as --env NAME=VALUE words, the network interface where config names one, and the
        local launcher's CPU binding where config asks for it. The
        defaults add no word, so they rerun nothing."""
        words = [f"--env={name}={value}" for name, value in sorted(self.config["nccl_env"].items())]
        keys = ("network_interface", "bind_cpus")
        return words + schema.argv(self.config["training"], "training", keys, quiet=keys, joined=True)

    def geometry_args(self, system, gpus):
        """Where the processes of one job at a sweep point start: the node and task geometry and,
        inside a SLURM job, the srun flags (the job step's own SLURM_* settings are not inherited),
        and the ranks' communication settings. A training run and the interconnect measurement at
        its point share it. One item per argument."""
        nodes, per_node = self.sweep.placement(system, gpus)
        return [
            f"--nproc-per-node={per_node}",
            f"--nodes={nodes}",
            f"--cpus-per-task={self._system(system)['cpus_per_task']}",
            f"--srun-args={self.gpu_flag(system, per_node)}",
            *self.comm_args(),
        ]

    def exclusive_flags(self, system):
        """sbatch's --exclusive for a measuring job of `system` unless its config turns it off
        (systems.<name>.exclusive: a site that forbids whole-node jobs)."""
        return ["--exclusive"] if self._system(system)["exclusive"] else []

    def slurm_gres(self, system, gpus):
        """gpu_request: gres goes through the plugin's own gres resource (it refuses --gres in
        slurm_extra); tasks_per_gpu = 0 stops it adding --ntasks-per-gpu = all tasks, the
        multi-GPU trap of snakemake-executor-plugin-slurm issues 316 and 459."""
        _, per_node = self.sweep.placement(system, gpus)
        node = self.gpus_of_node(system, per_node)
        return f"gpu:{node}" if node and self._system(system)["gpu_request"] == "gres" else None

    def slurm_extra(self, system, gpus):
        """sbatch flags the executor plugin has no resource for: the task geometry, --gpus-per-node
        (the plugin's own gpu resource would ask for GPUs per job, not per node), extras. The plugin
        puts this string into a shell line as it is, so every word is quoted here."""
        _, per_node = self.sweep.placement(system, gpus)
        flags = [f"--ntasks-per-node={per_node}", *self.exclusive_flags(system)]
        if self._system(system)["gpu_request"] == "gpus-per-node":
            flags.append(self.gpu_flag(system, per_node))
        return shlex.join(flags + self.sbatch_extra[system])

    def resource(self, system, key, unset=None):
        """A job's resource from a system's config; `unset` where the system leaves it to the
        cluster (the plugin then passes nothing)."""
        return self._system(system)[key] or unset

    def point_resources(self, system, gpus):
        """What a job of several processes at a sweep point asks SLURM for: a training run, and the
        interconnect measurement at the same system and GPU count (same nodes, tasks, GPUs,
        partition), so that the measurement sees the links the run used."""
        return {
            "nodes": self.sweep.placement(system, gpus)[0],
            "tasks": gpus,
            # The job step then runs the rule's shell as it is, and the launcher calls srun (one
            # task per GPU); the plugin accepts mpi only for more than one task.
            "mpi": "srun" if gpus > 1 else None,
            "cpus_per_task": self.resource(system, "cpus_per_task", 1),
            "mem_mb": self.resource(system, "mem_mb", 0),
            "runtime": self.resource(system, "time_min"),
            "slurm_partition": self.resource(system, "partition"),
            "slurm_account": self.resource(system, "account"),
            "constraint": self.resource(system, "constraint"),
            "qos": self.resource(system, "qos"),
            "gres": self.slurm_gres(system, gpus),
            "tasks_per_gpu": 0,
            "slurm_extra": self.slurm_extra(system, gpus),
        }

    def long_test_resources(self, system, gpus):
        """The long test's jobs: its own time limit (training.long_test.time_min), else the system's."""
        own = self.config["training"]["long_test"]["time_min"]
        return {**self.point_resources(system, gpus), "runtime": own or self.resource(system, "time_min", None)}
