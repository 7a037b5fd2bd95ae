"""The training thread on the host: the physical cores of its CPUs (cluster.affinity), and its CPU
time and run-queue wait in each step (common.metrics.StepLog)."""

import json
import time

import pytest

from workflow_scripts.cluster import affinity
from workflow_scripts.common import metrics


def _sysfs(root, siblings):
    for cpu, text in siblings.items():
        d = root / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "thread_siblings_list").write_text(text + "\n")
    return root


@pytest.mark.unit
def test_cpu_lists_and_core_groups_follow_the_kernel(tmp_path):
    assert affinity.parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    # Two hyperthreads per core, siblings numbered half the host apart; cpu 5 shows no topology.
    root = _sysfs(tmp_path, {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3", 4: "4"})
    assert affinity.core_groups({0, 1, 2, 3, 4, 5}, root) == [[0, 2], [1, 3], [4], [5]]
    # A sibling outside the allowed set is no CPU of the group.
    assert affinity.core_groups({1, 2}, root) == [[1], [2]]


@pytest.mark.stage
def test_steps_record_the_threads_cpu_time_apart_from_its_waits(tmp_path):
    """This thread's real clocks (its CPU time, Linux's schedstat), a step asleep and a step busy."""
    log = metrics.StepLog(tmp_path / "steps.jsonl", warmup_steps=0, global_batch=1)
    log.start()
    time.sleep(0.2)  # a step that waits (for a device, say): hardly any CPU time
    asleep = log.end(0.0)
    t = time.thread_time()
    while time.thread_time() - t < 0.05:  # a step that computes on the host
        pass
    busy = log.end(0.0)
    assert asleep["thread_cpu_s"] < 0.05 <= busy["thread_cpu_s"]
    for step in (asleep, busy):
        assert 0 <= step["runqueue_wait_s"] and step["thread_cpu_s"] + step["runqueue_wait_s"] <= step["wall_s"] + 2e-3
    log.close()
    assert [json.loads(line)["thread_cpu_s"] for line in (tmp_path / "steps.jsonl").read_text().splitlines()] == [
        asleep["thread_cpu_s"],
        busy["thread_cpu_s"],
    ]
