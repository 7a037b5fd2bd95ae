"""The trainer's command line, for the tests that run a trainer themselves rather than through
Snakemake: one definition of a small run's flags, each test naming only what it changes."""

from .processes import interpreter

TRAINERS = {
    "tensorflow": "workflow_scripts.train.tensorflow_horovod",
    "mxnet": "workflow_scripts.train.mxnet_horovod",
    "pytorch": "workflow_scripts.train.pytorch_ddp",
}
# A short test the CPU runs in seconds: 32-pixel images, one warm-up step and two timed steps,
# telemetry not sampled.
SMALL = {"image_size": 32, "warmup_steps": 1, "steps": 2, "telemetry_interval": 0}


def trainer_flags(small=True, **flags):
    """The trainer's flags: SMALL (unless `small` is False) with `flags` over it, in that order.
    batch_per_gpu=4 gives --batch-per-gpu 4, a list one word per item (--milestones 1 2), True the
    flag alone (--require-gpu); None or False leaves the flag out (steps=None: none of SMALL's)."""
    words = []
    for key, value in {**(SMALL if small else {}), **flags}.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            words.append(flag)
        elif isinstance(value, (list, tuple)):
            words += [flag, *map(str, value)]
        else:
            words += [flag, str(value)]
    return words


def trainer_command(framework="pytorch", python=None, **flags):
    """`python -m <framework's trainer> <trainer_flags(**flags)>`, by default with the framework's
    interpreter of config.yaml's envs."""
    return [python or interpreter(framework), "-m", TRAINERS[framework], *trainer_flags(**flags)]


def launched(command, ranks, *launch_flags, python=None):
    """`command` (an interpreter's argv) run by the launcher on `ranks` local processes (cluster/launcher.py
    with `launch_flags`), the launcher run by `python` (by default the workflow's interpreter)."""
    return [
        python or interpreter("workflow"),
        "-m",
        "workflow_scripts.cluster.launcher",
        "--nproc-per-node",
        str(ranks),
        *launch_flags,
        "--",
        *command,
    ]
