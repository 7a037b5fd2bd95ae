import json
import os
import shlex
import shutil
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

# The stage modules, importable even from a snakemake installed outside envs/setup.sh's .venv.
sys.path.insert(0, workflow.basedir)
from workflow_scripts.common.errors import StageError  # noqa: E402
from workflow_scripts.common import interpreter, slurm  # noqa: E402
from workflow_scripts.data import layout as dataset_layout  # noqa: E402
from workflow_scripts.train import long_test_fit  # noqa: E402
from workflow_scripts.plan.sweep import FORMAT_OF, TRAINER_OF, ConfigProblem, Sweep  # noqa: E402
from workflow_scripts.plan.slurm_job import JobShape  # noqa: E402
from workflow_scripts.plan.commands import TrainerCommands  # noqa: E402

validate(config, workflow.source_path("../schemas/config.schema.yaml"))


def check_path(key, value, file_pattern=False):
    """A path from config reaches jobs as one quoted argument; what that cannot carry, or what
    Snakemake would read as something else, is refused now, naming the key."""
    why = None
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        why = "a newline or other control character in a path is not supported"
    elif file_pattern and ("{" in value or "}" in value):
        why = "Snakemake reads braces in its file names as wildcards"
    elif file_pattern and any(c in value for c in "'\"\\"):
        # Snakemake writes the files a cluster job waits for into the job's command with Python's
        # repr(), which a shell would read (in double quotes, $(...) runs).
        why = "quotes and backslashes in a file name Snakemake tracks are not supported (its cluster jobs would not quote them safely)"
    elif value.startswith("-"):
        why = f"a path starting with '-' would read as an option; write ./{value}"
    if why:
        raise WorkflowError(f"config {key} = {value!r}: {why}")


def _check_writable(key, value):
    """An output directory that cannot be written fails now, not after hours of work."""
    path = Path(value).absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise WorkflowError(f"config {key} = {value!r}: {existing} exists and is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise WorkflowError(f"config {key} = {value!r}: {existing} is not writable by this user")


for _key in ("data_dir", "log_dir", "results_dir"):
    check_path(_key, config[_key], file_pattern=True)
    _check_writable(_key, config[_key])
for _key in ("root", "val_labels"):
    check_path(f"dataset.{_key}", config["dataset"][_key])
if config["training"]["cuda_cache_dir"]:
    check_path("training.cuda_cache_dir", config["training"]["cuda_cache_dir"])
    _check_writable("training.cuda_cache_dir", config["training"]["cuda_cache_dir"])
for _system in config["training"]["systems"]:
    if _system not in config["systems"]:
        raise WorkflowError(
            f"config training.systems names {_system!r}, which is not defined under config "
            f"systems (defined: {', '.join(config['systems'])})"
        )
for _system, _sysc in config["systems"].items():
    # Without --cpus-per-task SLURM gives each task one CPU, and its bound ranks' decoding and
    # framework threads (common/cpus.py) all run on it: a GPU run then measures its input, not the GPU.
    if _sysc["gpu_request"] != "none" and _sysc["cpus_per_task"] == 0:
        raise WorkflowError(
            f"config systems.{_system}.cpus_per_task = 0 with gpu_request {_sysc['gpu_request']}: "
            f"SLURM would give each GPU's task one CPU for its decoding and framework threads. "
            f"Fix: set systems.{_system}.cpus_per_task to the node's CPUs divided by its GPUs, CPUs as "
            f"SLURM counts them: hardware threads where ThreadsPerCore=2 (e.g. 20, 10 cores' threads, on a "
            f"node of 40 cores with 2 threads each and 4 GPUs)"
        )


def _sbatch_words(system):
    """systems.<name>.sbatch_extra as words: split as a shell would, never run by one."""
    value = config["systems"][system]["sbatch_extra"]
    try:
        return shlex.split(value)
    except ValueError as exc:
        raise WorkflowError(f"config systems.{system}.sbatch_extra = {value!r}: {exc}")


SBATCH_EXTRA = {name: _sbatch_words(name) for name in config["systems"]}

DATA = config["data_dir"]
LOGS = config["log_dir"]
REPO = Path(workflow.basedir)


def _interpreter(key, value, setup="bash envs/setup.sh"):
    """An interpreter from config as command words (a container: its runtime's exec line),
    checked now rather than mid-run."""
    for part in (
        [value] if isinstance(value, str) else [value["container"], value.get("python", ""), *value.get("bind", [])]
    ):
        check_path(key, part)
    problem = interpreter.problem(value)
    if problem:
        raise WorkflowError(
            f"config {key}: {problem}: run '{setup}' or point {key} at an interpreter (or a "
            f"container) that has the packages of envs/"
        )
    return interpreter.words(value, REPO)


# Each environment has this repository installed (editable) by envs/setup.sh, so the stage
# modules import as workflow_scripts.* whatever the working directory (in a container: bound
# and on PYTHONPATH).
PY = {env: _interpreter(f"envs.{env}", value) for env, value in config["envs"].items()}


def framework_config(system, framework):
    """(config key, its value): the interpreter a training run of `framework` on `system` uses:
    the system's own, else envs_gpu for a system that requests GPUs, else envs."""
    sysc = config["systems"][system]
    if framework in sysc.get("envs", {}):
        return f"systems.{system}.envs.{framework}", sysc["envs"][framework]
    if sysc["gpu_request"] != "none":
        return f"envs_gpu.{framework}", config["envs_gpu"][framework]
    return f"envs.{framework}", config["envs"][framework]


def framework_env(system, framework):
    """(config key, interpreter words) of framework_config, checked."""
    sysc = config["systems"][system]
    key, value = framework_config(system, framework)
    gpu = sysc["gpu_request"] != "none"
    return key, _interpreter(key, value, "bash envs/setup.sh --gpu" if gpu else "bash envs/setup.sh")


EMBEDDED = not config["dataset"]["root"]
if not EMBEDDED:
    # A wrong path or a missing val label file stops the run now, not hours into a cluster job.
    try:
        dataset_layout.check(config["dataset"]["root"], config["dataset"]["val_labels"])
    except StageError as exc:
        raise WorkflowError(str(exc))
DATASET_ROOT = f"{DATA}/embedded/ILSVRC2012" if EMBEDDED else config["dataset"]["root"]

CONV = config["conversion"]


def tfrecord_shards(split):
    """'auto' is the study's 1024/128 for a real dataset, a handful for the embedded one."""
    value = CONV["tfrecord"][f"{split}_shards"]
    if value != "auto":
        return value
    return {"train": 4, "val": 2}[split] if EMBEDDED else {"train": 1024, "val": 128}[split]


def encoding_args():
    return ["--resize-shorter", str(CONV["resize_shorter"]), "--quality", str(CONV["jpeg_quality"])]


RESULTS = config["results_dir"]
TRAIN = config["training"]


def parse_time(fn, *args, **kwargs):
    """fn's value; a ConfigProblem becomes the WorkflowError that stops the workflow, naming the key."""
    try:
        return fn(*args, **kwargs)
    except ConfigProblem as problem:
        raise WorkflowError(str(problem)) from None


PLAN = Sweep(config, EMBEDDED)
placement = PLAN.placement


IN_SLURM_JOB = "SLURM_JOB_ID" in os.environ  # the Snakefile is parsed again inside every cluster job


def _check_partition(system, gpus, key="training.gpus"):
    """Ask SLURM, when the workflow is parsed on a cluster, whether the partition can ever hold
    this run: a job it cannot place would otherwise wait in the queue for ever."""
    sysc = config["systems"][system]
    if not sysc["partition"] or IN_SLURM_JOB:
        return
    nodes, per_node = parse_time(placement, system, gpus, key)
    gpus_per_node = per_node if sysc["gpu_request"] != "none" else 0
    problem = slurm.placement_problem(
        sysc["partition"], nodes, per_node, sysc["cpus_per_task"], gpus_per_node, sysc["mem_mb"]
    )
    if problem:
        raise WorkflowError(f"config systems.{system} ({key} = {gpus}): {problem}")


def _check_gpu_type(system):
    """Where sinfo answers, a gpu_type the partition's nodes do not list among their GRES types is an
    error now: sbatch would refuse every job of the system, or leave it waiting. Without sinfo (a
    laptop) or inside a job nothing is asked."""
    sysc = config["systems"][system]
    if not (sysc["partition"] and sysc["gpu_type"]) or sysc["gpu_request"] == "none" or IN_SLURM_JOB:
        return
    problem = slurm.gpu_type_problem(sysc["partition"], sysc["gpu_type"])
    if problem:
        raise WorkflowError(
            f"config systems.{system}.gpu_type = {sysc['gpu_type']!r}: {problem}. Fix: set "
            f'systems.{system}.gpu_type to one of them (as sinfo spells it), or "" for any GPU'
        )


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
# The training systems and the inference stage's (inference.system, else the first of them).
for _system in dict.fromkeys([*TRAIN["systems"], config["inference"]["system"] or TRAIN["systems"][0]]):
    if _system in config["systems"]:
        _check_gpu_type(_system)
for _system in TRAIN["systems"]:
    for _gpus in TRAIN["gpus"]:
        _check_partition(_system, _gpus)
    for _gpus in LONG_TEST_GPUS:
        _check_partition(_system, _gpus, "training.accuracy.gpus")


SWEEP = parse_time(PLAN.sweep)
LONG_TEST = parse_time(PLAN.long_test)


def _check_long_test_fits():
    """Through SLURM: a long test whose epochs cannot fit its jobs, even at the sweep's best measured
    rate scaled perfectly, stops the workflow now, naming the key (train/long_test_fit.py)."""
    if workflow.local_exec:
        return
    for point in LONG_TEST:
        s, f = point["system"], point["framework"]
        manifest = Path(DATA, FORMAT_OF[f], "manifest.json")
        try:
            train_images = json.loads(manifest.read_text())["splits"]["train"]["images"]
        except (OSError, ValueError, KeyError):
            continue
        own = ACCURACY["time_min"]
        said = long_test_fit.problem(
            point,
            ACCURACY["epochs"],
            train_images,
            long_test_fit.best_rate_per_gpu(f"{RESULTS}/runs", s, f, point["precision"]),
            own or config["systems"][s]["time_min"],
            ACCURACY["max_jobs"],
            "training.accuracy.time_min" if own else f"systems.{s}.time_min",
        )
        if said:
            raise WorkflowError(said)


_check_long_test_fits()
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
    """The framework's interpreter of this run, as one string of words for train/job.py."""
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


def _check_horovod_controller():
    """mpi starts Horovod's ranks through srun's MPI plugin: a machine without srun (outside a
    SLURM job) would run them with the local launcher, which cannot. Refused now, naming the key."""
    horovod = [f for f in TRAIN["frameworks"] if f in ("tensorflow", "mxnet")]
    several = [g for g in TRAIN["gpus"] + LONG_TEST_GPUS if g > 1]
    if TRAIN["horovod_controller"] != "mpi" or not horovod or not several or IN_SLURM_JOB:
        return
    if shutil.which("srun") is None:
        raise WorkflowError(
            f"config training.horovod_controller = mpi: Horovod's ranks ({', '.join(horovod)}, "
            f"{max(several)} GPUs) would start through srun's MPI plugin, and this machine has no "
            f"srun: use gloo for a run without SLURM"
        )


_check_horovod_controller()


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


def training_data(w):
    return [] if run_input(w) == "synthetic" else f"{DATA}/{FORMAT_OF[w.framework]}"


def dataset_of(w):
    return f"{DATA}/{FORMAT_OF[w.framework]}"
