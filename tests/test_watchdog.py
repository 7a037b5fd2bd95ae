"""The training job's progress watchdog (train/watchdog.py): its limit before the first step and
after it, the ranks it names, on beat files written here; where a rank's stacks go when asked,
from a real process. A rank made to stop on the tests' SLURM cluster: tests/test_slurm.py."""

import pytest

from workflow_scripts.cluster import rank_env
from workflow_scripts.train import watchdog


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def beat(run, rank, step, when):
    (run / f"beat.rank{rank}").write_text(f"{step:012d} {when:017.3f}\n")


@pytest.mark.unit
def test_before_the_first_step_the_start_limit_holds(tmp_path):
    clock, hung = Clock(), []
    dog = watchdog.Watchdog(tmp_path, 2, start_s=600, idle_s=60, on_hang=hung.append, clock=clock)
    clock.now += 599
    assert dog.check() is None
    clock.now += 2
    why = dog.check()
    assert "before the first step" in why and "training.hang_start_s" in why and "silent: 0, 1" in why, why


@pytest.mark.unit
def test_after_steps_the_limit_follows_the_median_step_and_names_the_rank_behind(tmp_path):
    clock = Clock()
    dog = watchdog.Watchdog(tmp_path, 2, start_s=600, idle_s=60, on_hang=None, clock=clock)
    for step in range(1, 6):  # 10 s a step: 20 x 10 = 200 s, over the 60 s floor
        clock.now += 10
        beat(tmp_path, 0, step, clock.now)
        beat(tmp_path, 1, step, clock.now)
        assert dog.check() is None
    assert dog.limit() == (200, "20 x the median step of 10.00 s")
    clock.now += 5
    beat(tmp_path, 0, 6, clock.now)  # rank 1 never finishes step 6
    assert dog.check() is None
    clock.now += 199
    assert dog.check() is None
    clock.now += 2
    why = dog.check()
    assert "after step 6" in why and "over the limit of 200 s" in why and why.endswith("ranks behind or silent: 1"), why


@pytest.mark.unit
def test_short_steps_get_the_idle_floor(tmp_path):
    clock = Clock()
    dog = watchdog.Watchdog(tmp_path, 1, start_s=600, idle_s=60, on_hang=None, clock=clock)
    for step in range(1, 4):
        clock.now += 0.05
        beat(tmp_path, 0, step, clock.now)
        dog.check()
    assert dog.limit() == (60, "training.hang_idle_s")


@pytest.mark.unit
def test_horovod_stops_on_a_stall_unless_the_site_says_otherwise():
    class One:
        world_size = 1

    env = {}
    rank_env.setup_horovod(One(), env)
    assert env["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] == str(rank_env.HOROVOD_STALL_SHUTDOWN_S)
    env = {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "60"}
    rank_env.setup_horovod(One(), env)
    assert env["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] == "60"


CHILD = """
import sys, time
from workflow_scripts.cluster.rank_env import Launch
from workflow_scripts.train import watchdog
keep = watchdog.answer_stacks(sys.argv[1], Launch(rank=int(sys.argv[2]), source=sys.argv[3]))
print("ready", flush=True)
time.sleep(120)  # blocked in C, as a rank waiting on a collective: only faulthandler's own handler runs
"""


def _asked(run, rank, source, stderr):
    """A real process set up as a rank of `source` (slurm: started by srun; env: by the local
    launcher), blocked in a sleep, asked for its stacks as the watchdog asks (SIGUSR1): what it wrote
    where it writes them."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from helpers import REPO

    with open(stderr, "w") as err:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(run), str(rank), source], cwd=REPO, stdout=subprocess.PIPE, stderr=err
        )
    wrote = run / watchdog.STACKS.format(rank=rank) if source == "env" else stderr
    try:
        assert child.stdout.readline().strip() == b"ready"
        os.kill(child.pid, signal.SIGUSR1)
        for _ in range(400):  # until faulthandler's dump is there: it writes once, from the signal
            if wrote.exists() and "(most recent call first)" in wrote.read_text():
                break
            time.sleep(0.05)
    finally:
        child.kill()
        child.wait()
    return wrote.read_text()


@pytest.mark.stage
def test_a_rank_under_srun_answers_through_its_stderr_and_the_log_names_who_did(tmp_path):
    """Issue 61 item 6: a rank srun started writes its stacks to stderr, which srun --label forwards
    into the job's log from any node, so a run directory on NFS (whose other nodes' files reach the
    job's node late) loses none; a rank of the local launcher writes its file, as before. The job
    reads both: here rank 3's stderr as srun labels it, rank 1's file; ranks 0 and 2 gave none."""
    run = tmp_path / "run"
    run.mkdir()
    srun_rank = _asked(run, 3, "slurm", tmp_path / "rank3.err")
    assert "Current thread 0x" in srun_rank and 'File "<string>", line' in srun_rank, srun_rank
    assert not (run / watchdog.STACKS.format(rank=3)).exists()  # no file on the rank's node to go stale
    local_rank = _asked(run, 1, "env", tmp_path / "rank1.err")
    assert "Current thread 0x" in local_rank and (tmp_path / "rank1.err").read_text() == ""
    # what srun --label makes of rank 3's stderr in the attempt's log, beside the job's own lines
    log = "job: hung: ...\n" + "".join(f" 3: {line}" for line in srun_rank.splitlines(True))
    assert watchdog.unanswered(run, 4, log) == [0, 2]
    assert watchdog.unanswered(run, 4) == [0, 2, 3]  # without the log, rank 3 looks silent
