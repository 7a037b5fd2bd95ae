import json
import os
import shutil
import sys
from pathlib import Path

import yaml

from snakemake.exceptions import WorkflowError
from snakemake.settings.types import DeploymentMethod
from snakemake.utils import validate

# The stage modules, importable even from a snakemake installed outside envs/setup.sh's .venv.
sys.path.insert(0, workflow.basedir)
from workflow_scripts.cluster import interpreter  # noqa: E402
from workflow_scripts.common import frameworks, schema, workflow_lock  # noqa: E402
from workflow_scripts.plan import cluster_checks, config_checks, main_process, unbuilt_envs  # noqa: E402
from workflow_scripts.plan.commands import TrainerCommands  # noqa: E402
from workflow_scripts.plan.data_plan import FRAMEWORK_OF_FORMAT, DataPlan, conda_env, folders_of  # noqa: E402
from workflow_scripts.plan.point_jobs import PointJobs, per_job  # noqa: E402
from workflow_scripts.plan.slurm_job import JobShape  # noqa: E402
from workflow_scripts.plan.sweep import FORMAT_OF, Sweep  # noqa: E402
from workflow_scripts.plan.waiting import Waiting, interconnect_files, run_files  # noqa: E402
from workflow_scripts.preflight import gate as preflight_gate  # noqa: E402
from workflow_scripts.results import stage_outputs, training_outputs  # noqa: E402

# fn(*args)'s value; a ConfigProblem becomes the WorkflowError that stops the workflow, naming the key.
stop_on_problem = config_checks.raising(WorkflowError)

# A misspelt key in a few lines, not the validator's whole config and schema around it.
stop_on_problem(config_checks.unknown_keys, config, schema.schema())
with schema.validation_file() as _validated:  # the framework lists the registry's (common/schema.py)
    validate(config, str(_validated))


# $USER, ${SCRATCH} and ~ in the path keys, as a shell would read them (a folder named $USER otherwise).
stop_on_problem(config_checks.expand_paths, config)
stop_on_problem(config_checks.check_config, config)
with open(workflow.source_path("../config.yaml")) as _shipped:
    stop_on_problem(config_checks.check_not_laptop_settings, config, yaml.safe_load(_shipped))
SBATCH_EXTRA = {name: stop_on_problem(config_checks.sbatch_words, config, name) for name in config["systems"]}

DATA = config["data_dir"]
LOGS = config["log_dir"]
REPO = Path(workflow.basedir)
# The stage modules are found from this folder, not the working directory (snakemake --directory on
# scratch; a SLURM job starts where snakemake ran), and in an interpreter that does not have them
# installed (a module's, a container's): every job's command and what it starts get the folder first
# on PYTHONPATH. A job inherits this process's environment, sbatch passes it on (--export=ALL) and
# the job parses this file again; srun passes it to the ranks on every node (cluster/launcher.py);
# a container gets the folder bound and on its own PYTHONPATH (cluster/interpreter.py).
os.environ.update(PYTHONPATH=interpreter.search_path(REPO, os.environ))
# A conda job's environment has no PYTHONPATH (Snakemake removes it): its command sets it.
PATH_BLOCKED = (
    DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
    and not workflow.deployment_settings.conda_not_block_search_path_envvars
)
# Interpreters not built yet (the GPU environments before `setup.sh --gpu`): a dry run or the price
# plans on and names them, a run stops once the Snakefile has included every stage (plan/main_process.settle_unbuilt).
UNBUILT = unbuilt_envs.Unbuilt(unbuilt_envs.plans_only(sys.argv))
PY = {
    env: interpreter.job_words(
        stop_on_problem(
            config_checks.interpreter_words,
            f"envs.{env}",
            value,
            REPO,
            "bash envs/setup.sh",
            UNBUILT,
            config_checks.data_folders(config),
        ),
        REPO,
        PATH_BLOCKED,
    )
    for env, value in config["envs"].items()
}


DATA_PLAN = DataPlan(config)
EMBEDDED = DATA_PLAN.embedded
DATASET_ROOT = DATA_PLAN.root
# A param of the index (data_plan.py); a wrong path or a missing val label file stops the run now.
DATASET_CONTENTS = stop_on_problem(DATA_PLAN.contents)
CONV = config["conversion"]
# The CPU stages' SLURM partition and time limit (config cpu_jobs), where set.
CPU_JOB_RESOURCES = DATA_PLAN.cpu_job_resources()
converted = DATA_PLAN.converted
check_record = DATA_PLAN.check_record

RESULTS = config["results_dir"]
TRAIN = config["training"]


PLAN = Sweep(config, EMBEDDED)
placement = PLAN.placement


IN_SLURM_JOB = "SLURM_JOB_ID" in os.environ  # the Snakefile is parsed again inside every cluster job
if not IN_SLURM_JOB:
    # a copy converted before a conversion's output was its done.json: named, with the command
    # that marks it, so that it is not converted again (nothing is written while parsing)
    stop_on_problem(DATA_PLAN.check_earlier_copies)


LONG_TEST_CONFIG = TRAIN["long_test"]
LONG_TEST_GPUS = PLAN.long_test_gpus()
stop_on_problem(PLAN.check_long_test)
if not IN_SLURM_JOB:
    # Where sinfo answers: partitions that can hold every point, GPU types their nodes have.
    PLAN.short_now = stop_on_problem(cluster_checks.check_cluster, config, placement, LONG_TEST_GPUS)
    PLAN.max_minutes = cluster_checks.max_minutes(config)
    for line in PLAN.short_lines():
        print(line, file=sys.stderr)


SWEEP = stop_on_problem(PLAN.sweep)
LONG_TEST = stop_on_problem(PLAN.long_test)

# Every training interpreter the sweep uses exists (or names its container), checked now.
TRAIN_ENV = {
    (s, f): stop_on_problem(config_checks.framework_env, config, s, f, REPO, UNBUILT)
    for s in TRAIN["systems"]
    for f in TRAIN["frameworks"]
}
TRAINING_RUNS = [f"{point['run_dir']}/summary.json" for point in SWEEP]
LONG_TEST_RUNS = [f"{point['run_dir']}/summary.json" for point in LONG_TEST]
# What the tables, figures and the verdict read (plan/waiting.py): not the points whose nodes are
# down (nodes_down: wait) and whose runs have not finished; they run when their nodes return, and the
# next workflow writes the tables again with them.
WAITING = Waiting(PLAN)
TABLE_SWEEP = WAITING.ready(SWEEP, run_files)
TABLE_LONG_TEST = WAITING.ready(LONG_TEST, run_files)
TABLE_RUNS = [f for point in TABLE_SWEEP for f in run_files(point)]
TABLE_LONG_TEST_RUNS = [f for point in TABLE_LONG_TEST for f in run_files(point)]


COMMANDS = TrainerCommands(config, PLAN, {pair: env[0] for pair, env in TRAIN_ENV.items()})
SHAPE = JobShape(config, PLAN, SBATCH_EXTRA)
# What a job at a sweep point is given (plan/point_jobs.py): the rules' functions of its wildcards.
POINTS = PointJobs(config, PLAN, COMMANDS, SHAPE, DATA_PLAN, TRAIN_ENV, workflow)
# What a job of several processes at a sweep point asks SLURM for (plan/slurm_job.py).
POINT_RESOURCES = per_job(SHAPE.point_resources, SWEEP[0])
LONG_TEST_RESOURCES = per_job(SHAPE.long_test_resources, SWEEP[0])


if not IN_SLURM_JOB:
    stop_on_problem(cluster_checks.check_horovod_controller, config, LONG_TEST_GPUS, shutil.which("srun") is not None)


# One workflow at a time in this directory (workflow_scripts/common/workflow_lock.py): taken by the
# main process as it starts its jobs (the Snakefile's onstart: never in a dry run, nor by --unlock,
# nor in a cluster job, which parses this file again on its node), held until it exits.
if workflow.is_main_process and (_holder := workflow_lock.running_here()):
    print(f"dlscale: this workflow is already running in this directory: {_holder}", file=sys.stderr)
