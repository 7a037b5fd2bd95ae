"""The suite's fixtures and hooks. What tests share otherwise (paths, configs, running a stage or
Snakemake, the trainer's command line) is in tests/helpers/.

Every test is of one kind, a marker (pyproject.toml registers them): unit (starts no process: no
subprocess, no Snakemake, no cluster), stage (runs a stage's module, a script, a Snakemake dry run
or another process, but none of the pipeline's jobs), pipeline (runs the pipeline's jobs through
Snakemake, end to end or some targets, or the SLURM cluster). Collection stops at a test without
exactly one, and a unit test that starts a process fails."""

import contextlib
import os
import subprocess

import pytest
from helpers import QUIRKY, as_a_user, embedded_lmdb, pipeline_config, run_stage, snakemake

# The suite runs more processes than there are cores (its workers; the SLURM test's two nodes share
# this machine's), so an OpenMP thread (PyTorch's, MXNet's) that spins while it waits for work takes
# a core another process needs. Passive waiting changes no result, only who gets the cores.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Likewise Horovod's background thread, which wakes every HOROVOD_CYCLE_TIME ms (its default: 1) to
# look for tensors to all-reduce: beside the ranks' compute on shared cores, waking less often leaves
# the cores to the compute. Each all-reduce then waits at most the longer cycle: the same results.
os.environ.setdefault("HOROVOD_CYCLE_TIME", "10")


@pytest.fixture(scope="session")
def quirky_tree(tmp_path_factory):
    """A small raw-layout tree with CMYK, PNG-as-JPEG, grayscale, truncated, empty and
    non-image files (flat val/ with TF's synset label list)."""
    from workflow_scripts.data import embedded

    root = tmp_path_factory.mktemp("quirky") / "ILSVRC2012"
    embedded.make(root, seed=7, broken=True, **QUIRKY)
    return root


@pytest.fixture(scope="session")
def small_lmdb(tmp_path_factory):
    """A 5-class embedded tree (6 train, 2 val images a class) in the Caffe2 LMDB: what the PyTorch
    input paths read."""
    return embedded_lmdb(tmp_path_factory.mktemp("small_lmdb"), classes=5, train_per_class=6, val_per_class=2, seed=11)


@pytest.fixture(scope="session")
def quirky_converted(quirky_tree, tmp_path_factory):
    """The quirky tree through the index stage and all three converters."""
    out = tmp_path_factory.mktemp("converted")
    run_stage(
        "workflow",
        "workflow_scripts.data.index",
        "--root",
        quirky_tree,
        "--out",
        out / "index",
        "--max-reject-fraction",
        "0.2",
        "--threads",
        "2",
    )
    run_stage(
        "tensorflow",
        "workflow_scripts.data.tfrecord",
        "--index",
        out / "index",
        "--out",
        out / "tfrecord",
        "--train-shards",
        "3",
        "--val-shards",
        "2",
        "--threads",
        "2",
    )
    run_stage("mxnet", "workflow_scripts.data.recordio", "--index", out / "index", "--out", out / "recordio")
    run_stage("pytorch", "workflow_scripts.data.lmdb_caffe2", "--index", out / "index", "--out", out / "lmdb")
    return out


@pytest.fixture(scope="session")
def pipeline_run(tmp_path_factory):
    """The quick start's `snakemake all` (at helpers.PIPELINE's sizes) in a scratch working directory,
    with interpreters that do not have this project installed and no PYTHONPATH of the tests'."""
    work = tmp_path_factory.mktemp("pipeline")
    pipeline_config(work)
    snakemake(work, env=as_a_user())
    return work


# ---- kinds --------------------------------------------------------------------------------------
KINDS = ("unit", "stage", "pipeline")


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """A module (or class) with a test of no kind, or of more than one, fails to collect, naming the
    test: `pytest -m unit` must select every test that runs in seconds, and nothing else."""
    report = yield
    wrong = []
    for item in report.result if report.passed else []:
        if isinstance(item, pytest.Item):
            kinds = sorted({m.name for m in item.iter_markers() if m.name in KINDS})
            if len(kinds) != 1:
                wrong.append(f"  {item.name}: {', '.join(kinds) or 'no kind'}")
    if wrong:
        report.outcome, report.result = "failed", []
        report.longrepr = (
            "every test needs exactly one kind: @pytest.mark.unit, stage or pipeline (or the module's "
            "pytestmark, where all of its tests are of one kind; pyproject.toml's markers say which is "
            "which):\n" + "\n".join(wrong)
        )
    return report


class ProcessStarted(RuntimeError):
    """What starting a process raises in a unit test."""


# How Python starts a process: subprocess (and asyncio, which goes through it), os.system and
# os.popen, fork (multiprocessing, pty), posix_spawn.
SPAWNERS = [
    (subprocess.Popen, "_execute_child"),
    *((os, name) for name in ("system", "fork", "forkpty", "posix_spawn", "posix_spawnp") if hasattr(os, name)),
]


@contextlib.contextmanager
def no_processes(item):
    """While a unit test sets up, runs or tears down (its fixtures of every scope included), starting
    a process raises ProcessStarted; and the test fails even where the code under test caught that."""
    if item.get_closest_marker("unit") is None:
        yield
        return
    started = []

    def refuse(owner, name):
        def refused(*args, **kwargs):
            what = args[1] if owner is subprocess.Popen and len(args) > 1 else args[:1]
            started.append(f"{getattr(owner, '__name__', owner)}.{name}: {what!r:.200}")
            raise ProcessStarted(f"a unit test started a process ({started[-1]})")

        return refused

    with pytest.MonkeyPatch.context() as patch:
        for owner, name in SPAWNERS:
            patch.setattr(owner, name, refuse(owner, name))
        yield
    if started:
        pytest.fail(
            f"{item.nodeid} is marked unit but started a process; mark it stage (or pipeline):\n  "
            + "\n  ".join(started),
            pytrace=False,
        )


# ---- workers ------------------------------------------------------------------------------------
# pytest-xdist (pyproject.toml: -n auto --dist loadgroup) runs a group's tests on one worker, in order.
# The tests that read pipeline_run share one run; the SLURM tests share one cluster (fixed ports
# and /etc/slurm); every other test goes with its module, whose module-scoped fixtures run once.
# The two long groups are handed out first (--no-loadscope-reorder keeps this order).
GROUPS = {"pipeline_run": "pipeline", "cluster": "slurm", "bound_cluster": "slurm"}
FIRST = ("pipeline", "slurm")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks
def pytest_collection_modifyitems(items):
    group = {}
    for item in items:
        group[item] = next((g for f, g in GROUPS.items() if f in item.fixturenames), item.module.__name__)
        item.add_marker(pytest.mark.xdist_group(group[item]))
    items.sort(key=lambda item: FIRST.index(group[item]) if group[item] in FIRST else len(FIRST))


def pytest_xdist_auto_num_workers(config):
    """-n auto: two workers more than the cores. The SLURM group spends most of its time waiting for
    the scheduler, and the workers below the long groups' priority fill the cores those leave idle."""
    return (os.cpu_count() or 1) + 2


# The pipeline group is the suite's longest chain (the quick start's run, then the tests that read it)
# and the SLURM group's jobs run while it waits: a worker whose first test belongs to neither runs
# at a lower priority (os.nice, inherited by what it starts), so it takes the cores those leave
# idle instead of stretching them. Without workers (-p no:xdist) nothing changes.
YIELD = 5
_priority_set = False


def lower_priority(item):
    global _priority_set
    if _priority_set or not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    _priority_set = True
    if item.get_closest_marker("xdist_group").args[0] not in FIRST:
        os.nice(YIELD)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    lower_priority(item)
    with no_processes(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    with no_processes(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    with no_processes(item):
        return (yield)
