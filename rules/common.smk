import json
import os
import shlex
import shutil
import sys
from pathlib import Path

import yaml

from snakemake.exceptions import WorkflowError
from snakemake.settings.types import DeploymentMethod
from snakemake.utils import validate

# The stage modules, importable even from a snakemake installed outside envs/setup.sh's .venv.
sys.path.insert(0, workflow.basedir)
from workflow_scripts.common.errors import StageError  # noqa: E402
from workflow_scripts.common import interpreter  # noqa: E402
from workflow_scripts.data import convert, layout as dataset_layout, listing  # noqa: E402
from workflow_scripts.plan import cluster_checks, config_checks  # noqa: E402
from workflow_scripts.plan.sweep import (
    FORMAT_OF,
    TRAINER_OF,
    ConfigProblem,
    Sweep,
    repeat_of,
    repeat_suffix,
)  # noqa: E402
from workflow_scripts.plan.slurm_job import JobShape  # noqa: E402
from workflow_scripts.plan.commands import TrainerCommands  # noqa: E402
from workflow_scripts.preflight import gate as preflight_gate  # noqa: E402

with open(workflow.source_path("../schemas/config.schema.yaml")) as _schema:
    # A misspelt key in a few lines, not the validator's whole config and schema around it.
    try:
        config_checks.unknown_keys(config, yaml.safe_load(_schema))
    except ConfigProblem as problem:
        raise WorkflowError(str(problem)) from None
validate(config, workflow.source_path("../schemas/config.schema.yaml"))


def parse_time(fn, *args, **kwargs):
    """fn's value; a ConfigProblem becomes the WorkflowError that stops the workflow, naming the key."""
    try:
        return fn(*args, **kwargs)
    except ConfigProblem as problem:
        raise WorkflowError(str(problem)) from None


def check_path(key, value, file_pattern=False):
    """plan/config_checks.py's check_path, for the rule files."""
    parse_time(config_checks.check_path, key, value, file_pattern)


# $USER, ${SCRATCH} and ~ in the path keys, as a shell would read them (a folder named $USER otherwise).
parse_time(config_checks.expand_paths, config)
parse_time(config_checks.check_config, config)
with open(workflow.source_path("../config.yaml")) as _shipped:
    parse_time(config_checks.check_not_laptop_settings, config, yaml.safe_load(_shipped))
SBATCH_EXTRA = {name: parse_time(config_checks.sbatch_words, config, name) for name in config["systems"]}

DATA = config["data_dir"]
LOGS = config["log_dir"]
REPO = Path(workflow.basedir)
# The stage modules are found from this folder, not the working directory (snakemake --directory on
# scratch; a SLURM job starts where snakemake ran), and in an interpreter that does not have them
# installed (a module's, a container's): every job's command and what it starts get the folder first
# on PYTHONPATH. A job inherits this process's environment, sbatch passes it on (--export=ALL) and
# the job parses this file again; srun passes it to the ranks on every node (common/launcher.py);
# a container gets the folder bound and on its own PYTHONPATH (common/interpreter.py).
os.environ.update(PYTHONPATH=interpreter.search_path(REPO, os.environ))
# A conda job's environment has no PYTHONPATH (Snakemake removes it): its command sets it.
PATH_BLOCKED = (
    DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
    and not workflow.deployment_settings.conda_not_block_search_path_envvars
)
PY = {
    env: interpreter.job_words(
        parse_time(config_checks.interpreter_words, f"envs.{env}", value, REPO), REPO, PATH_BLOCKED
    )
    for env, value in config["envs"].items()
}


def framework_config(system, framework):
    """(config key, value) of the interpreter a training run of `framework` on `system` uses."""
    return config_checks.framework_config(config, system, framework)


def framework_env(system, framework):
    """(config key, interpreter words) of framework_config, checked."""
    return parse_time(config_checks.framework_env, config, system, framework, REPO)


EMBEDDED = not config["dataset"]["root"]
if not EMBEDDED:
    # A wrong path or a missing val label file stops the run now, not hours into a cluster job.
    try:
        _found, _agreeing = dataset_layout.check(config["dataset"]["root"], config["dataset"]["val_labels"])
    except StageError as exc:
        raise WorkflowError(str(exc))
DATASET_ROOT = f"{DATA}/embedded/ILSVRC2012" if EMBEDDED else config["dataset"]["root"]
# The names under dataset.root and its label files, digested: a param of the index, which reruns
# when an image is added, removed or renamed there (workflow_scripts/data/listing.py).
DATASET_CONTENTS = (
    ""
    if EMBEDDED
    else listing.fingerprint(DATASET_ROOT, [f for f in (_found, *_agreeing) if f], f"{DATA}/.dataset-listing.json")
)

CONV = config["conversion"]


def tfrecord_shards(split):
    """'auto' is the study's 1024/128 for a real dataset, a handful for the embedded one."""
    value = CONV["tfrecord"][f"{split}_shards"]
    if value != "auto":
        return value
    return {"train": 4, "val": 2}[split] if EMBEDDED else {"train": 1024, "val": 128}[split]


def encoding_args():
    return convert.encoding_argv(CONV)


# The CPU stages' SLURM partition and time limit (config cpu_jobs), where set.
CPU_JOB_RESOURCES = {
    k: v
    for k, v in (("slurm_partition", config["cpu_jobs"]["partition"]), ("runtime", config["cpu_jobs"]["time_min"]))
    if v
}

RESULTS = config["results_dir"]
TRAIN = config["training"]


PLAN = Sweep(config, EMBEDDED)
placement = PLAN.placement


IN_SLURM_JOB = "SLURM_JOB_ID" in os.environ  # the Snakefile is parsed again inside every cluster job
if not IN_SLURM_JOB:
    # copies converted before a conversion's output was its done.json keep their place
    convert.mark_earlier_copies(DATA, FORMAT_OF.values())


effective_input = PLAN.effective_input
run_inputs = PLAN.run_inputs
input_suffix = PLAN.input_suffix
repeats = PLAN.repeats
run_dir = PLAN.run_dir
accuracy_run_dir = PLAN.accuracy_run_dir


def run_input(w):
    """The input path of a training job, from its run directory's name."""
    return w.variant[1:] if w.variant else effective_input(w.system, w.framework, "auto")


ACCURACY = TRAIN["accuracy"]
LONG_TEST_GPUS = PLAN.accuracy_gpus()
parse_time(PLAN.check_long_test)
if not IN_SLURM_JOB:
    # Where sinfo answers: partitions that can hold every point, GPU types their nodes have.
    PLAN.short_now = parse_time(cluster_checks.check_cluster, config, placement, LONG_TEST_GPUS)
    PLAN.max_minutes = cluster_checks.max_minutes(config)
    for line in PLAN.short_lines():
        print(line, file=sys.stderr)


SWEEP = parse_time(PLAN.sweep)
LONG_TEST = parse_time(PLAN.long_test)


def long_test_fits(w):
    """Through SLURM, a long test that cannot fit its jobs at the best measured rate stops the
    workflow before any of its jobs is submitted. An input function of its runs (no file): asked
    when the jobs are planned, since the executor is not known yet while the Snakefile is read."""
    if not workflow.local_exec:
        parse_time(cluster_checks.check_long_test_fits, config, LONG_TEST)
    return []


# Every training interpreter the sweep uses exists (or names its container), checked now.
TRAIN_ENV = {(s, f): framework_env(s, f) for s in TRAIN["systems"] for f in TRAIN["frameworks"]}
TRAINING_RUNS = [f"{point['run_dir']}/summary.json" for point in SWEEP]
LONG_TEST_RUNS = [f"{point['run_dir']}/summary.json" for point in LONG_TEST]


COMMANDS = TrainerCommands(config, PLAN, {pair: env[0] for pair, env in TRAIN_ENV.items()})


def trainer_args(w):
    """The trainer's command line of a sweep (short test) run (plan/commands.py)."""
    return COMMANDS.sweep_run(w.system, w.framework, w.precision, run_input(w))


def accuracy_args(w):
    """The trainer's command line of a long-test run (plan/commands.py)."""
    return COMMANDS.long_test_run(w.system, w.framework, w.precision, w.gpus)


def train_python(w):
    """The framework's interpreter of this run, as one string of words for train/training_job.py."""
    return shlex.join(TRAIN_ENV[w.system, w.framework][1])


SHAPE = JobShape(config, PLAN, SBATCH_EXTRA)
exclusive_flags = SHAPE.exclusive_flags
system_resource = SHAPE.resource


def geometry_args(w):
    """plan/slurm_job.py's geometry_args of the job's point (system, GPUs)."""
    return SHAPE.geometry_args(w.system, int(w.gpus))


def horovod_args(w):
    return COMMANDS.horovod_args(w.system)


def launcher_args(w):
    return geometry_args(w) + (horovod_args(w) if w.framework in ("tensorflow", "mxnet") else [])


if not IN_SLURM_JOB:
    parse_time(cluster_checks.check_horovod_controller, config, LONG_TEST_GPUS, shutil.which("srun") is not None)


def alone_threads(fallback):
    """Cores a measuring job (a training or long-test run, the interconnect measurement, a preflight
    check, an INT8 timed run) asks the local scheduler for: all of them, so that it never runs beside
    another job of the workflow, whatever the system (docs/training.md#isolation). Two runs side by
    side would each measure the other, and one's node-wide page-cache clearing would hit the other.
    Through SLURM a job is sized by its resources instead and takes whole nodes (exclusive_flags)."""
    if workflow.local_exec:
        try:
            return max(workflow.cores, fallback)
        except WorkflowError:  # no --cores (a dry run)
            pass
    return fallback


def point_threads(w):
    """A measuring job at a sweep point (training, interconnect, preflight): alone_threads; through
    SLURM one core per process (cpus_per_task sets each task's CPUs)."""
    return alone_threads(int(w.gpus))


def _per_job(resources):
    """resources(system, gpus) as the rules take them: each one a function of a job's wildcards."""
    point = SWEEP[0]
    return {
        key: (lambda w, key=key: resources(w.system, int(w.gpus))[key])
        for key in resources(point["system"], point["gpus"])
    }


# What a job of several processes at a sweep point asks SLURM for (plan/slurm_job.py).
POINT_RESOURCES = _per_job(SHAPE.point_resources)
ACCURACY_RESOURCES = _per_job(SHAPE.accuracy_resources)


def previous_run(w):
    """A point's k-th run follows its (k-1)-th: through the earlier run's log, which a retry leaves
    in place (common/failed_runs.py), and ancient, so that rerunning the earlier run never reruns
    this one. Snakemake then puts the point's runs in one group, one SLURM job whose resources are
    one run's and whose time limit is the sum of theirs."""
    if not w.get("rep"):
        return []
    before = repeat_suffix(repeat_of(w.rep) - 1)
    return ancient(f"{LOGS}/train/{w.system}/{w.framework}_{w.precision}_{w.gpus}gpu{w.variant}{before}.log")


def job_group(w):
    """plan/sweep.py's job_group of a sweep run; None for the long test's (no repeats)."""
    if "rep" not in w.keys():
        return None
    return PLAN.job_group(w.system, w.framework, w.precision, int(w.gpus), w.variant, repeat_of(w.rep))


def converted(fmt):
    """A conversion's output: the file it writes last into the complete copy (data/convert.py, DONE),
    not the copy's folder, which Snakemake would delete before a reconversion."""
    return f"{DATA}/{fmt}/done.json"


def folders_of(files):
    """The copies' folders of conversion outputs (converted()), for the commands that read them."""
    return [os.path.dirname(f) for f in ([files] if isinstance(files, str) else files)]


def training_data(w):
    return [] if run_input(w) == "synthetic" else converted(FORMAT_OF[w.framework])


FRAMEWORK_OF_FORMAT = {fmt: fw for fw, fmt in FORMAT_OF.items()}


def check_record(fmt):
    """The whole-file check's record of a format's copy (rules/data.smk, data_check)."""
    return f"{DATA}/checked/{fmt}.json"


def data_checked(w):
    """check_record of the run's data; none for synthetic data."""
    return [] if run_input(w) == "synthetic" else check_record(FORMAT_OF[w.framework])


def dataset_of(w):
    return converted(FORMAT_OF[w.framework])
