"""What a job at a sweep point is given (rules/train.smk, and the preflight checks and interconnect
measurements launched as its runs are): its input path and data, its trainer's and launcher's
command lines, its interpreter, its threads and SLURM resources, the run it follows. Each method
that takes `w` is one the rules hand to Snakemake, which calls it with a job's wildcards (any object
with the attributes the method reads)."""

import shlex

from workflow_scripts.common import frameworks
from workflow_scripts.plan.sweep import FORMAT_OF, TRAINER_OF, repeat_of, repeat_suffix


def threads_to_run_alone(fallback, local, cores):
    """Cores a measuring job (a training or long-test run, the interconnect measurement, a preflight
    check, an INT8 timed run) asks the local scheduler for: all of them (`cores`, None in a dry run
    without --cores), so that it never runs beside another job of the workflow, whatever the system
    (docs/training.md#isolation). Two runs side by side would each measure the other, and one's
    node-wide page-cache clearing would hit the other. Through SLURM (`local` false) a job is sized
    by its resources instead and takes whole nodes (slurm_job.JobShape.exclusive_flags)."""
    return max(cores, fallback) if local and cores is not None else fallback


def per_job(resources, point):
    """resources(system, gpus) as the rules take them: each one a function of a job's wildcards.
    point: a point of the sweep, whose resources name the keys."""
    return {
        key: (lambda w, key=key: resources(w.system, int(w.gpus))[key])
        for key in resources(point["system"], point["gpus"])
    }


class PointJobs:
    def __init__(self, config, sweep, commands, shape, data, train_env, workflow):
        """sweep, commands, shape, data: the config's plan.sweep.Sweep, plan.commands.TrainerCommands,
        plan.slurm_job.JobShape and plan.data_plan.DataPlan; train_env: {(system, framework):
        (config key, interpreter words)} of the sweep's training runs; workflow: how Snakemake runs
        the jobs (its `local_exec` and `resource_settings.cores`), asked when a job is planned."""
        self.config, self.sweep, self.commands, self.shape = config, sweep, commands, shape
        self.data, self.train_env, self.workflow = data, train_env, workflow
        self.logs = config["log_dir"]

    def threads_to_run_alone(self, fallback):
        """threads_to_run_alone of the way this workflow runs its jobs."""
        return threads_to_run_alone(fallback, self.workflow.local_exec, self.workflow.resource_settings.cores)

    def point_threads(self, w):
        """A measuring job at a sweep point (training, interconnect, preflight): threads_to_run_alone; through
        SLURM one core per process (cpus_per_task sets each task's CPUs)."""
        return self.threads_to_run_alone(int(w.gpus))

    def run_input(self, w):
        """The input path of a training job, from its run directory's name."""
        return w.variant[1:] if w.variant else self.sweep.effective_input(w.system, w.framework, "auto")

    def training_data(self, w):
        """The copy a run reads (its conversion's output); none for synthetic data."""
        return [] if self.run_input(w) == "synthetic" else self.data.converted(FORMAT_OF[w.framework])

    def data_checked(self, w):
        """The whole-file check's record of the run's data; none for synthetic data."""
        return [] if self.run_input(w) == "synthetic" else self.data.check_record(FORMAT_OF[w.framework])

    def dataset_of(self, w):
        """The copy a long-test run reads: always real data."""
        return self.data.converted(FORMAT_OF[w.framework])

    def checked_of(self, w):
        return self.data.check_record(FORMAT_OF[w.framework])

    def trainer_module(self, w):
        return f"workflow_scripts.train.{TRAINER_OF[w.framework]}"

    def trainer_args(self, w):
        """The trainer's command line of a sweep (short test) run (plan/commands.py)."""
        return self.commands.sweep_run(w.system, w.framework, w.precision, self.run_input(w))

    def long_test_args(self, w):
        """The trainer's command line of a long-test run (plan/commands.py)."""
        return self.commands.long_test_run(w.system, w.framework, w.precision, w.gpus)

    def train_python(self, w):
        """The framework's interpreter of this run, as one string of words for train/training_job.py."""
        return shlex.join(self.train_env[w.system, w.framework][1])

    def geometry_args(self, w):
        """plan/slurm_job.py's geometry_args of the job's point (system, GPUs)."""
        return self.shape.geometry_args(w.system, int(w.gpus))

    def launcher_args(self, w):
        """The launcher's words: the point's geometry, and Horovod's flags for the frameworks that use it."""
        horovod = self.commands.horovod_args(w.system) if frameworks.of(w.framework).horovod else []
        return self.geometry_args(w) + horovod

    def previous_log(self, w):
        """A point's k-th run follows its (k-1)-th: through the earlier run's log, which a retry
        leaves in place (common/failed_runs.py); the rules make it ancient, so that rerunning the
        earlier run never reruns this one. Snakemake then puts the point's runs in one group, one
        SLURM job whose resources are one run's and whose time limit is the sum of theirs. Nothing
        ([]) for a point's first run."""
        if not w.get("rep"):
            return []
        before = repeat_suffix(repeat_of(w.rep) - 1)
        return f"{self.logs}/train/{w.system}/{w.framework}_{w.precision}_{w.gpus}gpu{w.variant}{before}.log"

    def job_group(self, w):
        """plan/sweep.py's job_group of a sweep run; None for the long test's (no repeats)."""
        if "rep" not in w.keys():
            return None
        return self.sweep.job_group(w.system, w.framework, w.precision, int(w.gpus), w.variant, repeat_of(w.rep))
