"""The training job's progress watchdog (train/watchdog.py): its limit before the first step and
after it, the ranks it names, on beat files written here. A rank made to stop on the tests' SLURM
cluster: tests/test_slurm.py."""

import pytest

from workflow_scripts.cluster import rank_env
from workflow_scripts.train import watchdog

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def beat(run, rank, step, when):
    (run / f"beat.rank{rank}").write_text(f"{step:012d} {when:017.3f}\n")


def test_before_the_first_step_the_start_limit_holds(tmp_path):
    clock, hung = Clock(), []
    dog = watchdog.Watchdog(tmp_path, 2, start_s=600, idle_s=60, on_hang=hung.append, clock=clock)
    clock.now += 599
    assert dog.check() is None
    clock.now += 2
    why = dog.check()
    assert "before the first step" in why and "training.hang_start_s" in why and "silent: 0, 1" in why, why


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


def test_short_steps_get_the_idle_floor(tmp_path):
    clock = Clock()
    dog = watchdog.Watchdog(tmp_path, 1, start_s=600, idle_s=60, on_hang=None, clock=clock)
    for step in range(1, 4):
        clock.now += 0.05
        beat(tmp_path, 0, step, clock.now)
        dog.check()
    assert dog.limit() == (60, "training.hang_idle_s")


def test_horovod_stops_on_a_stall_unless_the_site_says_otherwise():
    class One:
        world_size = 1

    env = {}
    rank_env.setup_horovod(One(), env)
    assert env["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] == str(rank_env.HOROVOD_STALL_SHUTDOWN_S)
    env = {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "60"}
    rank_env.setup_horovod(One(), env)
    assert env["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] == "60"
