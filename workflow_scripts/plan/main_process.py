"""What only the workflow's main process does, as the rules call it: the Snakefile's onstart (the
one-workflow-a-directory lock, TERM through SLURM) and, once every stage is parsed, the
interpreters not built yet. Each takes what Snakemake hands the rules (its workflow object, its
error), so tests call them without Snakemake."""

import sys

from ..cluster import workflow_stop
from ..common import workflow_lock


def say(line):
    print(line, file=sys.stderr, flush=True)


def take_workflow_lock(workflow, error, workdir="."):
    """The directory's lock (common/workflow_lock.py), held until the process exits; another run
    holding it stops this one as `error` naming it. Cluster jobs, which parse the rules again, take
    none."""
    if not workflow.is_main_process:
        return
    try:
        line = workflow_lock.take(workdir)
    except workflow_lock.Busy as exc:
        raise error(str(exc)) from None
    if line:
        say(line)


def stop_on_term(workflow):
    """Through SLURM, a TERM stops the workflow and cancels its jobs (cluster/workflow_stop.py), where
    Snakemake's own would wait for every job queued or still being submitted."""
    if workflow.is_main_process and workflow.non_local_exec:
        workflow_stop.install(say)


def settle_unbuilt(unbuilt, stop_on_problem):
    """The interpreters every stage noted as not built yet: named in one line where the invocation
    only plans, else the stop of the workflow (plan/unbuilt_envs.py)."""
    line = stop_on_problem(unbuilt.settle)
    if line:
        say(line)
