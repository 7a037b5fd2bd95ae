"""The trainer's command line of each run the sweep plans (a short-test run, a long-test run) and
the launcher's Horovod flags, from the config. One list item per argument, and only what a run's
framework and precision use, so editing another framework's setting does not rerun it."""

from ..common import schema as config_schema
from ..train import trainer_flags
from .sweep import FORMAT_OF, requests_gpus

ADDED_LATER = (
    "loss_lag",
    "dali_hw_share",
    "dali_gpu_threads",
    "dali_dual_parts",
)  # training.pytorch keys newer than runs already on disk


def per_rank_batch(training, framework, precision):
    """Images a rank steps through at once: training.batch_per_gpu's, times training.fp16_batch_factor
    for fp16 (the one place it is applied: the trainer's --batch-per-gpu and the price's estimate)."""
    return training["batch_per_gpu"][framework] * (training["fp16_batch_factor"] if precision == "fp16" else 1)


class TrainerCommands:
    def __init__(self, config, sweep, env_keys):
        """sweep: the config's plan.sweep.Sweep; env_keys: {(system, framework): the config key of
        the run's interpreter} (rules/common.smk resolves the interpreters)."""
        self.config, self.train, self.sweep, self.env_keys = config, config["training"], sweep, env_keys

    def pytorch_args(self):
        """training.pytorch as pytorch_ddp's flags: every key of the schema's section,
        --<key-with-dashes> <value> (YAML true/false: on/off), in the schema's order."""
        # keys added after sweeps were run: silent at their default, so those runs keep their words
        return config_schema.argv(self.train["pytorch"], "training.pytorch", quiet=ADDED_LATER)

    def _args(self, system, framework, precision, path, mode_args):
        t = self.train
        batch = per_rank_batch(t, framework, precision)
        args = [
            "--data",
            f"{self.config['data_dir']}/{FORMAT_OF[framework]}",
            "--data-source",
            "synthetic" if path == "synthetic" else "real",
            "--precision",
            precision,
            "--batch-per-gpu",
            batch,
            *config_schema.argv(t, "training", ("image_size",)),
            *mode_args,
            *trainer_flags.shared(t),
        ]
        if requests_gpus(self.config["systems"][system]):
            # No silent CPU fallback: the trainer stops before training without a GPU per task.
            args += ["--require-gpu", "--env-key", self.env_keys[system, framework]]
        if framework == "pytorch":
            args += ["--input", "auto" if path == "synthetic" else path] + self.pytorch_args()
        return [str(a) for a in args]

    def sweep_run(self, system, framework, precision, path):
        """The trainer's command line of a sweep (short test) run on input `path`."""
        return self._args(system, framework, precision, path, trainer_flags.schedule(self.train))

    def preflight_synthetic_run(self, system, framework, precision, steps):
        """The trainer's command line of preflight's timing of the step rate (its input
        check): the sweep's run of this precision on synthetic data, `steps` timed steps after the
        sweep's warm-up (config preflight.input_steps)."""
        mode = trainer_flags.schedule(self.train, mode="steps", steps=steps)
        return self._args(system, framework, precision, "synthetic", mode)

    def preflight_real_run(self, system, framework, precision, path, steps):
        """The input check's run beside that one: the sweep's run of this precision on real data
        through input `path`, in mode steps whatever the sweep's mode, `steps` timed steps after the
        sweep's warm-up."""
        mode = trainer_flags.schedule(self.train, mode="steps", steps=steps)
        return self._args(system, framework, precision, path, mode)

    def checkpoint_dir(self, system, framework, precision, gpus):
        """The long test's checkpoints (train/checkpoint.py): beside the runs, never inside the run
        directory, which every attempt empties."""
        return f"{self.config['results_dir']}/checkpoints/{system}/accuracy/{framework}_{precision}_{gpus}gpu"

    def long_test_run(self, system, framework, precision, gpus):
        """The trainer's command line of a long-test run: training.long_test, and never the sweep's
        mode, steps or inputs (the long test reads the dataset through the framework's default
        input path), so editing either test's keys reruns only that test's runs."""
        mode = trainer_flags.long_test(self.train["long_test"], self.checkpoint_dir(system, framework, precision, gpus))
        path = self.sweep.effective_input(system, framework, "auto")
        return self._args(system, framework, precision, path, mode)

    def horovod_args(self, system):
        """training.horovod_controller's launcher flags for a TensorFlow or MXNet run."""
        mpi = self.train["horovod_controller"] == "mpi"
        words = config_schema.argv(
            self.train, "training", ("horovod_controller" if mpi else "gloo_timeout_s",), joined=True
        )
        srun = [f"--srun-mpi={self.config['systems'][system]['srun_mpi']}"] if mpi else []
        return [*words, *srun, "--horovod"]
