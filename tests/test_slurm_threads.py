"""Thread counts under SLURM task binding: on the local cluster (benchmarks/slurm_cluster.py) with
TaskPlugin=task/affinity, a 2-task PyTorch run (synthetic data, a few steps) started as the
pipeline starts it (workflow_scripts.cluster.launcher -> srun --cpus-per-task=1) gets one CPU per
task, and each rank records that CPU and counts its threads on it, not on the node's 2."""

import json
import subprocess

import pytest
from helpers import REPO, interpreter, slurm_test_cluster, trainer_command

pytestmark = pytest.mark.pipeline


@pytest.fixture(scope="module")
def bound_cluster():
    yield from slurm_test_cluster.started(task_plugin="task/affinity")


@pytest.mark.parametrize("nodes, per_node", [(2, 1), (1, 2)])
def test_two_bound_tasks_of_one_cpu_count_their_threads_on_it(bound_cluster, tmp_path, nodes, per_node):
    """Each node has 2 CPUs. One task per node: main's rule (the node's CPUs // local ranks) gave
    each rank 2 threads on its 1 CPU; two tasks on one node: each is bound to a CPU of its own."""
    python = interpreter("pytorch")
    out = tmp_path / "run"
    trainer = trainer_command(python=python, data_source="synthetic", out=out, batch_per_gpu=2, classes=10)
    cmd = [
        "salloc",
        f"--nodes={nodes}",
        "--ntasks=2",
        f"--ntasks-per-node={per_node}",
        "--cpus-per-task=1",
        "--quiet",
        python,
        "-m",
        "workflow_scripts.cluster.launcher",
        f"--nproc-per-node={per_node}",
        f"--nodes={nodes}",
        "--cpus-per-task=1",
        f"--python={python}",
        "--",
        *trainer,
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}\n{bound_cluster.logs()}"
    assert "--cpus-per-task=1" in proc.stderr  # the launcher's srun line
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [(r["launch"]["source"], r["launch"]["local_size"]) for r in ranks] == [("slurm", per_node)] * 2
    assert len({r["node"] for r in ranks}) == nodes
    for r in ranks:
        c = r["cpus"]
        assert (c["allowed"], c["bound"], c["per_rank"]) == (1, True, 1), r
        assert c["threads"] == {"torch": 1}, r
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cpus"] == ranks[0]["cpus"] and summary["pytorch"]["input"] == "synthetic"
