"""The local launcher's CPU binding (cluster/cpu_bind.py, config training.bind_cpus): each rank whole
cores of its own, near its GPU where known, and the rank's thread counts taken from its own slice."""

import json
import os
import subprocess
import sys

import pytest
from helpers import REPO

from workflow_scripts.cluster import cpu_bind, cpus


def _topology(root, cores):
    """A made-up kernel topology: cores, each a list of sibling CPUs."""
    for core in cores:
        for cpu in core:
            d = root / f"cpu{cpu}" / "topology"
            d.mkdir(parents=True)
            (d / "thread_siblings_list").write_text(",".join(map(str, core)) + "\n")


@pytest.mark.unit
def test_ranks_get_disjoint_whole_cores_near_their_gpu(tmp_path):
    # 2 sockets x 4 cores, hyperthreads n and n + 8; GPUs 0 and 2 on socket 1, 1 and 3 on socket 0.
    _topology(tmp_path, [[c, c + 8] for c in range(8)])
    s0, s1 = [0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]
    got = cpu_bind.slices(range(16), 4, near=[s1, s0, s1, s0], root=tmp_path)
    assert got == [[4, 5, 12, 13], [0, 1, 8, 9], [6, 7, 14, 15], [2, 3, 10, 11]]
    # GPUs' affinity unknown: the set in CPU order, whole cores each.
    assert cpu_bind.slices(range(16), 4, near=None, root=tmp_path) == [
        [0, 1, 8, 9],
        [2, 3, 10, 11],
        [4, 5, 12, 13],
        [6, 7, 14, 15],
    ]
    # Near sets outside the launcher's CPUs (a container's cpuset on one socket): CPU order.
    assert cpu_bind.slices(s0, 2, near=[s1, s1], root=tmp_path) == [[0, 1, 8, 9], [2, 3, 10, 11]]
    # Uneven: sizes differ by one core at most; fewer cores than ranks: no binding.
    assert [len(x) for x in cpu_bind.slices(range(6), 4, root=tmp_path / "none")] == [2, 2, 1, 1]
    assert cpu_bind.slices(range(3), 4, root=tmp_path / "none") is None
    assert cpu_bind.slices(range(16), 1, root=tmp_path) is None


@pytest.mark.unit
def test_a_bound_rank_counts_threads_from_its_own_slice():
    assert cpus.is_bound(16, 64, 4, "env", 0, launcher_bound=True)
    assert not cpus.is_bound(64, 64, 4, "env", 0, launcher_bound=False)
    bound, shared = cpus.CPUs(16, 16, True, 4), cpus.CPUs(64, 64, False, 4)
    assert bound.per_rank == shared.per_rank == 16  # the same share, now the rank's own cores


@pytest.mark.stage
@pytest.mark.parametrize("bind", ["auto", "none"])
def test_the_local_launcher_binds_each_rank_or_leaves_them_all_cpus(tmp_path, bind):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs")
    worker = (
        "import json, os, sys; open(os.path.join(sys.argv[1], 'rank' + os.environ['RANK'] + '.json'), 'w')"
        ".write(json.dumps([sorted(os.sched_getaffinity(0)), os.environ.get('DLSCALE_CPUS_BOUND')]))"
    )
    cmd = [sys.executable, "-m", "workflow_scripts.cluster.launcher", "--nproc-per-node", "2"]
    cmd += [f"--bind-cpus={bind}", "--", sys.executable, "-c", worker, str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    mine = sorted(os.sched_getaffinity(0))
    if bind == "none":
        assert ranks == [[mine, None], [mine, None]]
        return
    (a, flag_a), (b, flag_b) = ranks
    assert a and b and not set(a) & set(b) and set(a) | set(b) <= set(mine)
    assert flag_a == flag_b == "1" and "rank 0 bound to CPUs" in proc.stderr
