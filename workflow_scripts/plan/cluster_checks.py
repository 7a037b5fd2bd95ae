"""Parse-time checks that ask the cluster or the sweep's own measurements whether a point can run:
a partition that can never hold a run, a GPU type its nodes do not have, Horovod's mpi controller
without srun, a long test that cannot fit its jobs. Each raises ConfigProblem naming the key. They
ask nothing inside a SLURM job (the Snakefile is parsed again in every job) or where there is no
SLURM (a laptop): the callers pass in_job and the rules decide."""

import json
from pathlib import Path

from workflow_scripts.cluster import slurm
from workflow_scripts.common import frameworks
from workflow_scripts.plan.sweep import FORMAT_OF, ConfigProblem, requests_gpus
from workflow_scripts.train import long_test_fit


def check_partition(config, placement, system, gpus, key="training.gpus"):
    """Whether the system's partition can ever hold this run (a job it cannot place would wait in
    the queue for ever: a ConfigProblem), and whether it can now: the line that says why not (too
    few of its nodes are up, e.g. one drained), else None."""
    sysc = config["systems"][system]
    if not sysc["partition"]:
        return None
    nodes, per_node = placement(system, gpus, key)
    gpus_per_node = per_node if requests_gpus(sysc) else 0
    shape = (sysc["partition"], nodes, per_node, sysc["cpus_per_task"], gpus_per_node, sysc["mem_mb"])
    never = slurm.placement_problem(*shape, now=False)
    if never:
        raise ConfigProblem(f"config systems.{system} ({key} = {gpus}): {never}")
    return slurm.placement_problem(*shape, now=True)


def check_time_limits(config, long_test_gpus):
    """A time limit over its partition's MaxTime: SLURM would never start the job."""
    for system in config["training"]["systems"]:
        sysc = config["systems"][system]
        if not sysc["partition"]:
            continue
        problem = slurm.time_problem(sysc["partition"], sysc["time_min"], f"systems.{system}.time_min")
        own = config["training"]["long_test"]["time_min"]
        if not problem and own and long_test_gpus:
            problem = slurm.time_problem(sysc["partition"], own, "training.long_test.time_min")
        if problem:
            raise ConfigProblem(problem)


def max_minutes(config):
    """{partition: MaxTime in minutes} of the training systems' partitions that have a limit, where
    sinfo answers (Sweep.runs_per_job)."""
    parts = {config["systems"][s]["partition"] for s in config["training"]["systems"]} - {""}
    limits = {p: slurm.partition_max_minutes(p) for p in sorted(parts)}
    return {p: m for p, m in limits.items() if m}


def check_gpu_type(config, system):
    """Where sinfo answers, a gpu_type the partition's nodes do not list among their GRES types:
    sbatch would refuse every job of the system, or leave it waiting. Without sinfo nothing is asked."""
    sysc = config["systems"][system]
    if not (sysc["partition"] and sysc["gpu_type"]) or not requests_gpus(sysc):
        return
    problem = slurm.gpu_type_problem(sysc["partition"], sysc["gpu_type"])
    if problem:
        raise ConfigProblem(
            f"config systems.{system}.gpu_type = {sysc['gpu_type']!r}: {problem}. Fix: set "
            f'systems.{system}.gpu_type to one of them (as sinfo spells it), or "" for any GPU'
        )


def check_cluster(config, placement, long_test_gpus):
    """check_gpu_type for the training systems and the inference stage's (inference.system, else
    the first of them); check_time_limits; check_partition for every point of the sweep and the
    long test. -> {(system, GPUs): why it cannot start now} for the points too few of whose nodes
    are up (systems.<name>.nodes_down says what becomes of them: Sweep.short_now)."""
    training = config["training"]
    for system in dict.fromkeys([*training["systems"], config["inference"]["system"] or training["systems"][0]]):
        if system in config["systems"]:
            check_gpu_type(config, system)
    check_time_limits(config, long_test_gpus)
    short = {}
    for system in training["systems"]:
        for key, counts in (("training.gpus", training["gpus"]), ("training.long_test.gpus", long_test_gpus)):
            for gpus in counts:
                why = check_partition(config, placement, system, gpus, key)
                if why:
                    short[(system, gpus)] = why
    return short


def check_horovod_controller(config, long_test_gpus, have_srun):
    """mpi starts Horovod's ranks through srun's MPI plugin: a machine without srun (outside a SLURM
    job) would run them with the local launcher, which cannot."""
    training = config["training"]
    horovod = [f for f in training["frameworks"] if frameworks.of(f).horovod]
    several = [g for g in training["gpus"] + list(long_test_gpus) if g > 1]
    if training["horovod_controller"] != "mpi" or not horovod or not several or have_srun:
        return
    raise ConfigProblem(
        f"config training.horovod_controller = mpi: Horovod's ranks ({', '.join(horovod)}, "
        f"{max(several)} GPUs) would start through srun's MPI plugin, and this machine has no "
        f"srun: use gloo for a run without SLURM"
    )


def check_long_test_fits(config, long_test):
    """A long test whose epochs cannot fit its jobs, even at the sweep's best measured rate scaled
    perfectly (train/long_test_fit.py). Asked only once the data's manifest exists."""
    accuracy = config["training"]["long_test"]
    for point in long_test:
        s, f = point["system"], point["framework"]
        manifest = Path(config["data_dir"], FORMAT_OF[f], "manifest.json")
        try:
            train_images = json.loads(manifest.read_text())["splits"]["train"]["images"]
        except (OSError, ValueError, KeyError):
            continue
        own = accuracy["time_min"]
        said = long_test_fit.problem(
            point,
            accuracy["epochs"],
            train_images,
            long_test_fit.best_rate_per_gpu(f"{config['results_dir']}/runs", s, f, point["precision"]),
            own or config["systems"][s]["time_min"],
            accuracy["max_jobs"],
            "training.long_test.time_min" if own else f"systems.{s}.time_min",
        )
        if said:
            raise ConfigProblem(said)


def long_test_inputs(config, long_test, local):
    """Through SLURM (`local` false), a long test that cannot fit its jobs at the best measured rate
    stops the workflow before any of its jobs is submitted (check_long_test_fits). An input function
    of its runs (no file, []): asked when the jobs are planned, since the executor is not known yet
    while the Snakefile is read."""
    if not local:
        check_long_test_fits(config, long_test)
    return []
