"""The sweep (workflow_scripts/plan/sweep.py) as plain Python: which runs a config asks for, where
each is placed and writes, and the configs it refuses, naming the key. No Snakemake runs here; the
config is the repository's, validated against the schema with its defaults filled in, as the
workflow does when it is parsed."""

import pytest
from helpers import CONFIG, validated, with_overrides

from workflow_scripts.plan.sweep import ConfigProblem, Sweep

pytestmark = pytest.mark.unit

GPU_SYSTEM = {"gpus_per_node": 4, "max_nodes": 2, "gpu_request": "gpus-per-node", "cpus_per_task": 8}


def sweep(embedded=True, **overrides):
    return Sweep(validated(with_overrides(CONFIG, **overrides)), embedded)


def test_the_embedded_default_is_every_point_once_under_its_plain_name():
    plan = sweep()
    t = CONFIG["training"]
    points = plan.sweep()
    assert len(points) == len(t["systems"]) * len(t["frameworks"]) * len(t["precisions"]) * len(t["gpus"])
    # a CPU system: one run per point (repeats auto), each framework's own input path, no suffix
    assert {p["input"] for p in points} == {"cpu"} and {p["repeat"] for p in points} == {1}
    assert "results/runs/local/pytorch_fp32_2gpu" in {p["run_dir"] for p in points}
    # the long test of the embedded default: 2 processes, beside the sweep
    assert {p["gpus"] for p in plan.long_test()} == {2}
    assert plan.long_test()[0]["run_dir"].startswith("results/runs/local/accuracy/")


def test_a_gpu_system_repeats_each_point_and_names_the_other_input_paths():
    plan = sweep(
        systems={"g": GPU_SYSTEM},
        training__systems=["g"],
        training__frameworks=["pytorch", "tensorflow"],
        training__precisions=["fp16"],
        training__gpus=[4, 8],
        training__inputs=["auto", "synthetic", "gpu"],
    )
    dirs = {p["run_dir"] for p in plan.sweep()}
    # PyTorch's default on a GPU is DALI (plain name); TensorFlow has no gpu path (left out)
    assert "results/runs/g/pytorch_fp16_8gpu" in dirs and "results/runs/g/pytorch_fp16_8gpu_gpu_rep3" in dirs
    assert "results/runs/g/tensorflow_fp16_4gpu_synthetic_rep2" in dirs
    assert not any("tensorflow" in d and d.endswith(("_gpu", "_gpu_rep2", "_gpu_rep3")) for d in dirs)
    assert len(dirs) == (3 + 2) * 2 * 3  # (pytorch's 3 paths + tensorflow's 2) x 2 GPU counts x 3 repeats
    assert {p["nodes"] for p in plan.sweep() if p["gpus"] == 8} == {2}


def test_a_real_dataset_gets_no_long_test_unless_asked():
    assert sweep(embedded=False).long_test() == []
    assert {p["gpus"] for p in sweep(embedded=False, training__long_test__gpus=[2]).long_test()} == {2}


@pytest.mark.parametrize(
    "overrides, key",
    [
        ({"training__gpus": [4]}, "config training.gpus = 4 cannot be placed on system 'local'"),
        ({"training__long_test__gpus": [3]}, "config training.long_test.gpus = 3 cannot be placed"),
        ({"training__frameworks": ["mxnet"], "training__inputs": ["gpu"]}, "config training.inputs = ['gpu']"),
    ],
)
def test_a_sweep_that_cannot_run_names_its_key(overrides, key):
    plan = sweep(**overrides)
    with pytest.raises(ConfigProblem, match=key.replace("[", r"\[").replace("]", r"\]")):
        plan.sweep()
        plan.long_test()


def test_a_long_test_schedule_that_cannot_run_names_its_key():
    with pytest.raises(ConfigProblem, match=r"training.long_test.milestones = \[2\]"):
        sweep(training__long_test__epochs=2).check_long_test()
    with pytest.raises(ConfigProblem, match="training.long_test.warmup_epochs = 3"):
        sweep(training__long_test__warmup_epochs=3).check_long_test()
