"""The config keys a trainer takes as flags, named once: train/harness.py makes the trainer's flags
from them (the schema's default, choices or type, and help) and plan/commands.py the words the
rules pass, so a key reaches the trainer by one path. Each tuple is in the order the rules pass
its keys: the order is part of every run's params, and a changed one would rerun them all, so a
new key goes last (or into QUIET)."""

from ..common import schema

# training.*: the short test's schedule (the long test's is training.long_test's)
SCHEDULE = ("mode", "warmup_steps", "steps", "epochs")
# training.*: both tests, after the schedule
SHARED = ("lr", "momentum", "weight_decay", "decode_threads", "seed", "telemetry_interval")
# training.*: no word at the schema's default, so that a run made before the key is not rerun
QUIET = ("fp32_math",)
# training.long_test.*: the long test's schedule, then (after the checkpoint directory) its jobs
LONG_TEST = ("epochs", "warmup_epochs", "milestones", "decay", "eval_every", "target_top1")
LONG_TEST_JOBS = ("max_jobs",)
# mode accuracy is the long test's, never a value of training.mode
MODES = {"mode": ["accuracy"]}


def add_arguments(ap):
    """The trainer's flags of these keys; returns the long test's group, for its other flags.
    --epochs is training.epochs's flag: the long test's runs are told training.long_test.epochs
    with it."""
    schema.add_arguments(ap, "training", ("image_size", *SCHEDULE, *SHARED, *QUIET), more_choices=MODES)
    g = ap.add_argument_group("mode accuracy (config training.long_test)")
    schema.add_arguments(g, "training.long_test", (*LONG_TEST[1:], *LONG_TEST_JOBS))
    return g


def schedule(train, **given):
    """The short test's schedule words from config training (`given`: values told instead)."""
    return schema.argv({**train, **given}, "training", SCHEDULE)


def shared(train):
    return schema.argv(train, "training", SHARED) + schema.argv(train, "training", QUIET, quiet=QUIET)


def long_test(accuracy, checkpoint_dir):
    """The long test's words from config training.long_test, its checkpoints in checkpoint_dir."""
    words = ["--mode", "accuracy", *schema.argv(accuracy, "training.long_test", LONG_TEST)]
    return words + ["--checkpoint-dir", checkpoint_dir, *schema.argv(accuracy, "training.long_test", LONG_TEST_JOBS)]
