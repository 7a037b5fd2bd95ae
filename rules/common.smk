import json
import os
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate


# The stage modules, importable even from a snakemake installed outside envs/setup.sh's .venv.
sys.path.insert(0, workflow.basedir)
from workflow_scripts.common.errors import StageError  # noqa: E402
from workflow_scripts.common import slurm  # noqa: E402
from workflow_scripts.data import layout as dataset_layout  # noqa: E402

validate(config, workflow.source_path("../schemas/config.schema.yaml"))


def _check_path(key, value, file_pattern=False):
    """A path from config reaches jobs as one quoted argument; what that cannot carry, or what
    Snakemake would read as something else, is refused now, naming the key."""
    why = None
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        why = "a newline or other control character in a path is not supported"
    elif file_pattern and ("{" in value or "}" in value):
        why = "Snakemake reads braces in its file names as wildcards"
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
    _check_path(_key, config[_key], file_pattern=True)
    _check_writable(_key, config[_key])
for _key in ("root", "val_labels"):
    _check_path(f"dataset.{_key}", config["dataset"][_key])
for _key, _value in config["envs"].items():
    _check_path(f"envs.{_key}", _value)
for _system in config["training"]["systems"]:
    if _system not in config["systems"]:
        raise WorkflowError(f"config training.systems names {_system!r}, which is not defined under config "
                            f"systems (defined: {', '.join(config['systems'])})")


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


def _interpreter(env):
    """The configured interpreter for an environment, checked now rather than mid-run."""
    exe = config["envs"][env]
    if "/" in exe and not Path(exe).exists():
        raise WorkflowError(
            f"config envs.{env} = {exe!r} does not exist: run 'bash envs/setup.sh' or point "
            f"envs.{env} at an interpreter that has envs/{env}'s packages")
    return exe


# Each environment has this repository installed (editable) by envs/setup.sh, so the stage
# modules import as workflow_scripts.* whatever the working directory.
PY = {env: _interpreter(env) for env in config["envs"]}

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
FORMAT_OF = {"tensorflow": "tfrecord", "mxnet": "recordio", "pytorch": "lmdb"}
TRAINER_OF = {"tensorflow": "tensorflow_horovod", "mxnet": "mxnet_horovod", "pytorch": "pytorch_ddp"}


def placement(system, gpus):
    """(nodes, processes per node) for `gpus` on `system`; an impossible point is a parse-time
    error, not a job that waits in the queue forever."""
    sysc = config["systems"][system]
    per_node = sysc["gpus_per_node"]
    nodes = -(-gpus // per_node)
    if nodes > sysc["max_nodes"] or gpus % nodes:
        raise WorkflowError(
            f"config training.gpus = {gpus} cannot be placed on system {system!r}: {per_node} GPUs per "
            f"node, at most {sysc['max_nodes']} node(s), and the GPUs must split evenly over the nodes")
    return nodes, gpus // nodes


IN_SLURM_JOB = "SLURM_JOB_ID" in os.environ  # the Snakefile is parsed again inside every cluster job


def _check_partition(system, gpus):
    """Ask SLURM, when the workflow is parsed on a cluster, whether the partition can ever hold
    this run: a job it cannot place would otherwise wait in the queue for ever."""
    sysc = config["systems"][system]
    if not sysc["partition"] or IN_SLURM_JOB:
        return
    nodes, per_node = placement(system, gpus)
    gpus_per_node = per_node if sysc["gpu_request"] != "none" else 0
    problem = slurm.placement_problem(sysc["partition"], nodes, per_node, sysc["cpus_per_task"], gpus_per_node,
                                      sysc["mem_mb"])
    if problem:
        raise WorkflowError(f"config systems.{system} (training.gpus = {gpus}): {problem}")


def run_dir(system, framework, precision, gpus):
    return f"{RESULTS}/runs/{system}/{framework}_{precision}_{gpus}gpu"


for _system in TRAIN["systems"]:
    for _gpus in TRAIN["gpus"]:
        _check_partition(_system, _gpus)

# The sweep: one training run per point.
SWEEP = [{"system": s, "framework": f, "precision": p, "gpus": g, "nodes": placement(s, g)[0],
          "run_dir": run_dir(s, f, p, g)}
         for s in TRAIN["systems"] for f in TRAIN["frameworks"] for p in TRAIN["precisions"] for g in TRAIN["gpus"]]
TRAINING_RUNS = [f"{point['run_dir']}/summary.json" for point in SWEEP]


def trainer_args(w):
    """The trainer's command line, one list item per argument: only what this run's framework
    and precision use, so editing another framework's setting does not rerun it."""
    batch = TRAIN["batch_per_gpu"][w.framework] * (TRAIN["fp16_batch_factor"] if w.precision == "fp16" else 1)
    args = ["--data", f"{DATA}/{FORMAT_OF[w.framework]}", "--data-source", TRAIN["data_source"],
            "--precision", w.precision, "--batch-per-gpu", batch, "--image-size", TRAIN["image_size"],
            "--mode", TRAIN["mode"], "--warmup-steps", TRAIN["warmup_steps"], "--steps", TRAIN["steps"],
            "--epochs", TRAIN["epochs"], "--lr", TRAIN["lr"], "--momentum", TRAIN["momentum"],
            "--weight-decay", TRAIN["weight_decay"], "--decode-threads", TRAIN["decode_threads"],
            "--seed", TRAIN["seed"], "--telemetry-interval", TRAIN["telemetry_interval"]]
    return [str(a) for a in args + (pytorch_args() if w.framework == "pytorch" else [])]


def pytorch_args():
    """training.pytorch as pytorch_ddp's flags (YAML true/false -> on/off)."""
    p = TRAIN["pytorch"]

    def onoff(v):
        return v if v == "auto" else ("on" if v else "off")

    return ["--amp-dtype", p["amp_dtype"], "--channels-last", onoff(p["channels_last"]),
            "--compile", p["compile"] if p["compile"] else "off", "--gpu-decode", onoff(p["gpu_decode"]),
            "--loader-workers", p["loader_workers"], "--tf32", onoff(p["tf32"]), "--bucket-cap-mb", p["bucket_cap_mb"],
            "--input-lanes", p["input_lanes"], "--jpeg-decoder", p["jpeg_decoder"], "--ddp-graph", p["ddp_graph"],
            "--broadcast-buffers", onoff(p["broadcast_buffers"]), "--grad-compression", p["grad_compression"]]


def _gpus_of_node(system, per_node):
    """'4' or 'v100:4': one node's GPU request, or None for a system without GPU requests."""
    sysc = config["systems"][system]
    if sysc["gpu_request"] == "none":
        return None
    return f"{sysc['gpu_type']}:{per_node}" if sysc["gpu_type"] else str(per_node)


def _gpu_flag(system, per_node):
    """The GPU request of one node as sbatch and srun spell it."""
    gpus = _gpus_of_node(system, per_node)
    if gpus is None:
        return ""
    return f"--gres=gpu:{gpus}" if config["systems"][system]["gpu_request"] == "gres" else f"--gpus-per-node={gpus}"


def geometry_args(w):
    """Where the processes of one job at a sweep point (system, GPUs) start: the node and task
    geometry and, inside a SLURM job, the srun flags (the job step's own SLURM_* settings are not
    inherited). A training run and the interconnect measurement at its point share it. One item
    per argument."""
    nodes, per_node = placement(w.system, int(w.gpus))
    sysc = config["systems"][w.system]
    return [f"--nproc-per-node={per_node}", f"--nodes={nodes}", f"--cpus-per-task={sysc['cpus_per_task']}",
            f"--srun-args={_gpu_flag(w.system, per_node)}"]


def launcher_args(w):
    return geometry_args(w) + (["--horovod"] if w.framework in ("tensorflow", "mxnet") else [])


def slurm_gres(w):
    """gpu_request: gres goes through the plugin's own gres resource (it refuses --gres in
    slurm_extra); tasks_per_gpu = 0 stops it adding --ntasks-per-gpu = all tasks, the
    multi-GPU trap of snakemake-executor-plugin-slurm issues 316 and 459."""
    _, per_node = placement(w.system, int(w.gpus))
    gpus = _gpus_of_node(w.system, per_node)
    return f"gpu:{gpus}" if gpus and config["systems"][w.system]["gpu_request"] == "gres" else None


def slurm_extra(w):
    """sbatch flags the executor plugin has no resource for: the task geometry, --gpus-per-node
    (the plugin's own gpu resource would ask for GPUs per job, not per node), extras. The plugin
    puts this string into a shell line as it is, so every word is quoted here."""
    _, per_node = placement(w.system, int(w.gpus))
    sysc = config["systems"][w.system]
    flags = [f"--ntasks-per-node={per_node}"]
    if sysc["gpu_request"] == "gpus-per-node":
        flags.append(_gpu_flag(w.system, per_node))
    return shlex.join(flags + SBATCH_EXTRA[w.system])


def system_value(key, unset=None):
    """A training job's resource from its system's config; `unset` where the system leaves it
    to the cluster (the plugin then passes nothing)."""
    return lambda w: config["systems"][w.system][key] or unset


# What a job of several processes at a sweep point asks SLURM for: a training run, and the
# interconnect measurement at the same system and GPU count (same nodes, tasks, GPUs, partition),
# so that the measurement sees the links the run used.
POINT_RESOURCES = dict(
    nodes=lambda w: placement(w.system, int(w.gpus))[0],
    tasks=lambda w: int(w.gpus),
    # The job step then runs the rule's shell as it is, and the launcher calls srun (one task per
    # GPU); the plugin accepts mpi only for more than one task.
    mpi=lambda w: "srun" if int(w.gpus) > 1 else None,
    cpus_per_task=system_value("cpus_per_task", 1),
    mem_mb=system_value("mem_mb", 0),
    runtime=system_value("time_min"),
    slurm_partition=system_value("partition"),
    slurm_account=system_value("account"),
    constraint=system_value("constraint"),
    qos=system_value("qos"),
    gres=slurm_gres,
    tasks_per_gpu=0,
    slurm_extra=slurm_extra,
)


def training_data(w):
    return [] if TRAIN["data_source"] == "synthetic" else f"{DATA}/{FORMAT_OF[w.framework]}"
