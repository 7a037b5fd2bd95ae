"""The training thread on the host: on a physical core of its own (common.affinity, --main-core),
and its CPU time and run-queue wait in each step (common.metrics.StepLog)."""
import json
import os
import subprocess
import sys
import time

import pytest
from conftest import REPO

from workflow_scripts.common import affinity, metrics
from workflow_scripts.common.errors import StageError


def _sysfs(root, siblings):
    for cpu, text in siblings.items():
        d = root / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "thread_siblings_list").write_text(text + "\n")
    return root


def test_cpu_lists_and_core_groups_follow_the_kernel(tmp_path):
    assert affinity.parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    # Two hyperthreads per core, siblings numbered half the host apart; cpu 5 shows no topology.
    root = _sysfs(tmp_path, {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3", 4: "4"})
    assert affinity.core_groups({0, 1, 2, 3, 4, 5}, root) == [[0, 2], [1, 3], [4], [5]]
    # A sibling outside the allowed set is no CPU of the group.
    assert affinity.core_groups({1, 2}, root) == [[1], [2]]


def test_one_core_per_rank_and_one_more_or_the_flag_is_named(tmp_path):
    allowed = sorted(os.sched_getaffinity(0))
    root = _sysfs(tmp_path, {cpu: ",".join(map(str, allowed)) for cpu in allowed})  # all one core
    with pytest.raises(StageError, match="--main-core on: 1 physical core"):
        affinity.plan(0, 1, root=root)


SCRIPT = """
import json, os, threading
from workflow_scripts.common import affinity, metrics
stop = threading.Event()
workers = [threading.Thread(target=stop.wait) for _ in range(3)]
for w in workers:
    w.start()
done = affinity.isolate_calling_thread(*affinity.plan(0, 1))
masks = {"main": sorted(os.sched_getaffinity(0)),
         "others": [sorted(os.sched_getaffinity(w.native_id)) for w in workers]}
late = threading.Thread(target=lambda: masks.update(late=sorted(os.sched_getaffinity(0))))
late.start(); late.join()
stop.set()
print(json.dumps({"done": done, "masks": masks}))
"""


def test_calling_thread_alone_on_its_core_and_the_others_moved_off():
    if len(affinity.core_groups(os.sched_getaffinity(0))) < 2:
        pytest.skip("this machine allows one physical core: nothing to keep for a thread alone")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    done, masks = got["done"], got["masks"]
    assert masks["main"] == [done["cpu"]] and done["cpu"] in done["kept_cpus"]
    assert done["threads_moved"] >= 3
    assert all(m == done["other_cpus"] for m in masks["others"]) and done["other_cpus"]
    assert not set(done["other_cpus"]) & set(done["kept_cpus"])
    # What the training thread starts later shares its one CPU: why the trainer isolates after warm-up.
    assert masks["late"] == [done["cpu"]]


def test_steps_record_the_threads_cpu_time_apart_from_its_waits(tmp_path):
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
        asleep["thread_cpu_s"], busy["thread_cpu_s"]]
