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
