import os
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate


# The stage modules, importable even from a snakemake installed outside envs/setup.sh's .venv.
sys.path.insert(0, workflow.basedir)
from workflow_scripts.common.errors import StageError  # noqa: E402
from workflow_scripts.data import layout as dataset_layout  # noqa: E402

validate(config, workflow.source_path("../schemas/config.schema.yaml"))

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
    return f"--resize-shorter {CONV['resize_shorter']} --quality {CONV['jpeg_quality']}"

RESULTS = config["results_dir"]
TRAIN = config["training"]
FORMAT_OF = {"tensorflow": "tfrecord", "mxnet": "recordio", "pytorch": "lmdb"}
TRAINER_OF = {"tensorflow": "tensorflow_horovod", "mxnet": "mxnet_horovod", "pytorch": "pytorch_ddp"}


def placement(system, gpus):
    """(nodes, processes per node) for `gpus` on `system`; an impossible point is a parse-time
    error, not a job that waits in the queue forever."""
    if system not in config["systems"]:
        raise WorkflowError(f"config training.systems names {system!r}, which is not in config systems "
                            f"({', '.join(config['systems'])})")
    sysc = config["systems"][system]
    per_node = sysc["gpus_per_node"]
    nodes = -(-gpus // per_node)
    if nodes > sysc["max_nodes"] or gpus % nodes:
        raise WorkflowError(
            f"config training.gpus = {gpus} cannot be placed on system {system!r}: {per_node} GPUs per "
            f"node, at most {sysc['max_nodes']} node(s), and the GPUs must split evenly over the nodes")
    return nodes, gpus // nodes


def run_dir(system, framework, precision, gpus):
    return f"{RESULTS}/runs/{system}/{framework}_{precision}_{gpus}gpu"


TRAINING_RUNS = [
    f"{run_dir(s, f, p, g)}/summary.json"
    for s in TRAIN["systems"] for f in TRAIN["frameworks"] for p in TRAIN["precisions"] for g in TRAIN["gpus"]
    if placement(s, g)
]


def trainer_args(w):
    """The trainer's command line: only what this run's framework and precision use, so editing
    another framework's setting does not rerun it."""
    batch = TRAIN["batch_per_gpu"][w.framework] * (TRAIN["fp16_batch_factor"] if w.precision == "fp16" else 1)
    return (f"--data {DATA}/{FORMAT_OF[w.framework]} --data-source {TRAIN['data_source']} "
            f"--precision {w.precision} --batch-per-gpu {batch} --image-size {TRAIN['image_size']} "
            f"--mode {TRAIN['mode']} --warmup-steps {TRAIN['warmup_steps']} --steps {TRAIN['steps']} "
            f"--epochs {TRAIN['epochs']} --lr {TRAIN['lr']} --momentum {TRAIN['momentum']} "
            f"--weight-decay {TRAIN['weight_decay']} --decode-threads {TRAIN['decode_threads']} "
            f"--seed {TRAIN['seed']} --telemetry-interval {TRAIN['telemetry_interval']}")


def launcher_args(w):
    nodes, per_node = placement(w.system, int(w.gpus))
    horovod = " --horovod" if w.framework in ("tensorflow", "mxnet") else ""
    return f"--nproc-per-node {per_node} --nodes {nodes}{horovod}"


def training_data(w):
    return [] if TRAIN["data_source"] == "synthetic" else f"{DATA}/{FORMAT_OF[w.framework]}"
