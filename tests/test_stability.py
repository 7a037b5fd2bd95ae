"""A run's stability judged as the study judged it (common/metrics.py): images/s over windows of 10
timed steps, as its frameworks reported images/s per logging interval, with the per-step CV still
reported beside it (docs/decisions.md#stable)."""

import random

import pytest

from workflow_scripts.common import metrics
from workflow_scripts.results import guards

pytestmark = pytest.mark.unit


def steps(walls, images=256):
    return [{"phase": "timed", "images": images, "wall_s": w, "loss": 1.0} for w in walls]


def test_a_jittery_but_steady_run_is_stable():
    """Python's own jitter on short steps: each step +-4% at random, no trend (the 4 x H100's clean
    4-GPU runs read 2.3-2.7% per step): steady over each 10 steps."""
    rng = random.Random(0)
    s = metrics.summarize(steps([0.047 * (1 + rng.uniform(-0.04, 0.04)) for _ in range(100)]))
    assert s["step_images_per_s_cv"] > metrics.STABLE_CV
    assert s["window_images_per_s_cv"] < metrics.STABLE_CV and s["stable"] and s["stable_by"] == "windows"


def test_a_run_with_stalls_is_unstable():
    """The same jitter, with three stalls of 10 steps' time in one stretch: a window of it slows."""
    rng = random.Random(0)
    walls = [0.047 * (1 + rng.uniform(-0.04, 0.04)) for _ in range(100)]
    for k in (41, 44, 47):
        walls[k] = 0.47
    s = metrics.summarize(steps(walls))
    assert s["window_images_per_s_cv"] > metrics.STABLE_CV and not s["stable"]


def test_fewer_than_two_windows_are_judged_by_the_steps():
    s = metrics.summarize(steps([0.05, 0.05, 0.06, 0.05, 0.05]))
    assert s["window_images_per_s_cv"] is None and s["stable_by"] == "steps"
    assert s["stable"] is (s["step_images_per_s_cv"] <= metrics.STABLE_CV)


def test_the_guard_names_the_window_cv_and_falls_back_on_the_step_cv():
    row = {"step_cv": 0.03, "window_cv": 0.025, "run_dir": "results/runs/g/pytorch_fp32_4gpu", "system": "g"}
    (said,) = [c for c in guards.run_caveats(row) if c.startswith("unstable")]
    assert "images/s CV over 10-step windows 2.5% > 2%" in said
    steady = {**row, "window_cv": 0.01}
    assert not [c for c in guards.run_caveats(steady) if c.startswith("unstable")]
    older = {**row, "window_cv": None}  # a run from before windows: its steps are judged
    assert any("step CV 3.0%" in c for c in guards.run_caveats(older))
