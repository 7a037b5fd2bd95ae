"""Thread counts from the CPUs a rank may run on (cluster/cpus.py), not from the node: the rule that
tells a bound rank (its own --cpus-per-task CPUs) from ranks that share the node, and the study's
per-rank counts on each. The same rules on the local SLURM cluster with task binding:
tests/test_slurm_threads.py."""

import os
import subprocess
import sys

import pytest
from helpers import REPO, snakemake, write_config

from workflow_scripts.cluster import cpus
from workflow_scripts.cluster.rank_env import Launch


@pytest.mark.unit
@pytest.mark.parametrize(
    "allowed, node, local_size, source, per_task, bound",
    [
        (40, 40, 4, "env", 0, False),  # local launcher on the whole node
        (40, 40, 4, "slurm", 10, False),  # SLURM with task/none: every task sees the node
        (10, 40, 4, "slurm", 10, True),  # task/affinity: 10 CPUs of its own
        (1, 2, 2, "slurm", 1, True),  # the test cluster's node, cpus_per_task 1
        (1, 40, 4, "slurm", 0, True),  # cpus_per_task 0: SLURM's one CPU per task
        (40, 40, 1, "single", 0, False),
        (4, 64, 1, "single", 0, True),  # one process under taskset
        (8, 64, 2, "env", 0, False),  # local launcher in a container's cpuset: its ranks share it
        (20, 40, 2, "slurm", 10, False),  # step-wide cpuset (task/cgroup, no per-task binding)
    ],
)
def test_bound_or_shared(allowed, node, local_size, source, per_task, bound):
    assert cpus.is_bound(allowed, node, local_size, source, per_task) is bound


@pytest.mark.unit
def test_the_studys_rules_per_rank():
    # The README's node: 40 cores, 4 GPUs. Bound to 10 cores each, or all four ranks on the node
    # unbound: each rank decodes with 10 - 4 threads (the node: 40 - 4 per GPU), 10 intra-op.
    for c in (
        cpus.CPUs(allowed=10, cores=10, bound=True, local_size=4),
        cpus.CPUs(allowed=40, cores=40, bound=False, local_size=4),
    ):
        assert (c.per_rank, c.cores_per_rank, c.tf_decode_threads(gpu=True), c.tf_decode_threads(gpu=False)) == (
            10,
            10,
            6,
            10,
        )
    # Hyperthreads: 20 CPUs on 10 cores per rank.
    ht = cpus.CPUs(allowed=20, cores=10, bound=True, local_size=4)
    assert (ht.per_rank, ht.tf_decode_threads(gpu=True)) == (20, 6)
    # One CPU per rank (sbatch's default): one thread of each kind, never none.
    one = cpus.CPUs(allowed=1, cores=1, bound=True, local_size=2)
    assert (one.per_rank, one.tf_decode_threads(gpu=True), one.tf_decode_threads(gpu=False)) == (1, 1, 1)
    shared_small = cpus.CPUs(allowed=2, cores=2, bound=False, local_size=4)
    assert shared_small.per_rank == shared_small.cores_per_rank == 1
    d = one.describe(intra_op=1, decode=1)
    assert d == {
        "allowed": 1,
        "cores": 1,
        "bound": True,
        "local_size": 2,
        "per_rank": 1,
        "threads": {"intra_op": 1, "decode": 1},
    }


@pytest.mark.stage
def test_read_from_the_affinity_set_and_the_cores_in_it(tmp_path):
    """of() counts the process's affinity set, and physical cores in it from the kernel's
    topology (a made-up one here: CPUs 0 and 1 hyperthreads of one core)."""
    for cpu in (0, 1):
        d = tmp_path / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "thread_siblings_list").write_text("0-1\n")
    code = (
        "import os, pathlib, sys; from workflow_scripts.cluster import cpus; from workflow_scripts.cluster.rank_env import Launch;"  # noqa: E501
        "os.sched_setaffinity(0, {0});"
        "one = cpus.of(Launch(source='single'), env={}, root=pathlib.Path(sys.argv[1]));"
        "os.sched_setaffinity(0, {0, 1});"
        "two = cpus.of(Launch(source='env', local_size=2), env={}, root=pathlib.Path(sys.argv[1]));"
        "print(one.allowed, one.cores, one.bound, two.allowed, two.cores, two.bound, two.per_rank)"
    )
    if len(os.sched_getaffinity(0)) < 2 or os.cpu_count() < 2:
        pytest.skip("needs 2 CPUs")
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "1", "True", "2", "1", "False", "1"]
    assert cpus.of(Launch()).allowed == len(os.sched_getaffinity(0))


@pytest.mark.unit
def test_no_trainer_counts_threads_from_the_node():
    """Every thread count of the trainers and the interconnect stage comes from cluster.cpus."""
    files = sorted((REPO / "workflow_scripts" / "train").glob("*.py")) + [
        REPO / "workflow_scripts" / "interconnect" / "collectives.py"
    ]
    found = [
        f"{f.relative_to(REPO)}:{n}"
        for f in files
        for n, line in enumerate(f.read_text().splitlines(), 1)
        if "cpu_count(" in line
    ]
    assert found == []


@pytest.mark.stage
@pytest.mark.parametrize("request_kind", ["gpus-per-node", "gres"])
def test_a_gpu_system_without_cpus_per_task_is_refused_at_parse_time(tmp_path, request_kind):
    """sbatch's default of one CPU per task would leave each GPU's rank one CPU for all its
    threads: refused when the workflow is parsed, naming the key and the fix."""
    write_config(
        tmp_path,
        systems={"big": {"gpus_per_node": 4, "max_nodes": 2, "gpu_request": request_kind}},
        training__systems=["big"],
    )
    proc = snakemake(tmp_path, "-n", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "systems.big.cpus_per_task = 0" in out and "Fix: set" in out, out[-2000:]
    # A CPU system keeps SLURM's default, and so does the embedded default (system local).
    write_config(
        tmp_path,
        systems={"big": {"gpus_per_node": 4, "max_nodes": 2}, "local": {"gpus_per_node": 2}},
        training__systems=["big", "local"],
    )
    proc = snakemake(tmp_path, "-n", "--quiet", "rules", check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]


def _hyperthreaded_node(root, cores, threads=2):
    """A made-up sysfs topology: `cores` physical cores of `threads` hardware threads each, core c's
    threads CPUs c, c + cores, ... (Linux's numbering on a two-socket Xeon)."""
    for core in range(cores):
        siblings = [core + k * cores for k in range(threads)]
        for cpu in siblings:
            d = root / f"cpu{cpu}" / "topology"
            d.mkdir(parents=True)
            (d / "thread_siblings_list").write_text(",".join(map(str, siblings)) + "\n")


@pytest.mark.unit
@pytest.mark.parametrize("per_task, cores, decode, status", [(10, 5, 1, "warning"), (20, 10, 6, "ok")])
def test_hyperthreads_count_as_half_a_core_and_preflight_warns_below_the_rule(
    tmp_path, per_task, cores, decode, status
):
    """The study's node, 40 cores with ThreadsPerCore=2 (80 SLURM CPUs), 4 GPUs: --cpus-per-task=10
    binds a rank to 5 cores' 10 threads, where TensorFlow's rule (cores - 4) leaves 1 decode thread;
    preflight warns naming systems.<name>.cpus_per_task, and not for 20 CPUs (10 cores, 6 threads)."""
    from types import SimpleNamespace

    from workflow_scripts.preflight import check_rows, rank
    from workflow_scripts.preflight.owners import thread_counts

    _hyperthreaded_node(tmp_path, 40)
    half = per_task // 2
    task_set = [*range(half), *range(40, 40 + half)]  # task/affinity binds both threads of each core
    launch = Launch(source="slurm", local_size=4, world_size=4, hostname="n1")
    mine = cpus.of(launch, {"SLURM_CPUS_PER_TASK": str(per_task)}, tmp_path, allowed=task_set, node_cpus=80)
    assert (mine.allowed, mine.cores, mine.bound, mine.threads_per_core) == (per_task, cores, True, 2)
    threads = thread_counts("tensorflow", launch, True, mine)
    assert threads == {"intra_op": per_task, "decode": decode}
    a = SimpleNamespace(framework="tensorflow", require_gpu=True, cpus_per_task=per_task)
    r = rank.cpu_row(a, launch, threads, mine)
    assert r["status"] == status, r
    assert f"{per_task} CPU(s) on {cores} core(s)" in r["figure"]
    if status == "warning":
        assert "5 physical core(s)" in r["cause"] and "input-bound" in r["cause"], r
        assert "systems.<name>.cpus_per_task to 16" in r["fix"] and "hardware threads" in r["fix"], r
        # merged over the ranks, one rank's warning is not hidden by the others' ok
        other = {**rank.cpu_row(a, launch, threads, cpus.CPUs(20, 10, True, 4)), "rank": 1}
        (merged,) = check_rows.merge([{**r, "rank": 0}, other])
        assert merged["status"] == "warning" and "(on 1 of 2)" in merged["cause"], merged
    # MXNet's rule keeps no cores from decoding: 5 cores are enough; a CPU system is never warned
    assert rank.cpu_row(SimpleNamespace(**{**vars(a), "framework": "mxnet"}), launch, {}, mine)["status"] == "ok"
    assert rank.cpu_row(SimpleNamespace(**{**vars(a), "require_gpu": False}), launch, {}, mine)["status"] == "ok"


@pytest.mark.unit
def test_mxnet_decodes_on_at_most_half_its_cpus_less_one_whatever_it_asks():
    bound = cpus.CPUs(allowed=16, cores=16, bound=True, local_size=4)
    assert bound.mxnet_decode_threads(True) == 16 and bound.mxnet_threads_run(16) == 7
    shared = cpus.CPUs(allowed=64, cores=64, bound=False, local_size=4)
    assert shared.mxnet_decode_threads(True) == 16 and shared.mxnet_threads_run(16) == 16
    assert cpus.CPUs(allowed=2, cores=2, bound=True).mxnet_threads_run(2) == 1
