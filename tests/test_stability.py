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


def test_a_throttled_gpu_or_an_xid_in_the_timed_window_blocks_the_verdict():
    row = {
        "step_cv": 0.01,
        "window_cv": 0.01,
        "run_dir": "results/runs/g/pytorch_fp32_4gpu",
        "system": "g",
        "isolated": "true",
    }
    assert guards.run_caveats({**row, "gpu_slowed_share": 0.05, "xid_errors": 0}) == []  # at the share: not over
    hot = {**row, "gpu_slowed_share": 0.4, "gpu_state": "n1 0: software thermal slowdown in 40% of samples"}
    (said,) = guards.run_caveats(hot)
    assert said.startswith("throttled: ") and "software thermal slowdown in 40% of samples" in said
    (said,) = guards.run_caveats({**row, "xid_errors": 2, "gpu_state": "n1 gpu0: Xid 94; n1 gpu0: Xid 94"})
    assert said.startswith("Xid: ") and "2 GPU error(s) in its timed window" in said


def test_the_share_of_samples_a_gpu_was_slowed_is_recorded_over_the_timed_window(tmp_path):
    import json

    from workflow_scripts.train import run_evidence

    (tmp_path / "telemetry.n1.json").write_text(json.dumps({"wall_origin": 1000.0, "interval": 1.0}))
    rows = ["time_s,metric,device,value"]
    for t in range(10):  # gpu 0: thermal slowdown (0x20) in 3 of its 10 samples in the window
        rows.append(f"{t + 0.5},gpu_clock_limiters,0,{0x20 if t in (2, 3, 4) else 0}")
    rows.append("30.5,gpu_clock_limiters,0,32")  # after the window: not counted
    (tmp_path / "telemetry.n1.csv").write_text("\n".join(rows) + "\n")
    state = run_evidence.gpu_state(tmp_path, 1000.0, 1010.0)
    assert state["slowed_share"] == 0.3 and "software thermal slowdown in 30% of samples" in state["note"]


def test_ranks_on_two_gpu_models_are_refused_before_the_first_step_naming_the_nodes(tmp_path):
    """A partition of V100 and A100 nodes: rank 1 on an A100 has written its GPU; rank 0 on a V100
    stops, naming both models and their nodes and the keys that give a system one model."""
    import json
    from types import SimpleNamespace

    from workflow_scripts.common.errors import PermanentError
    from workflow_scripts.train import harness

    def rank(r, node):
        return SimpleNamespace(launch=SimpleNamespace(rank=r, world_size=2), node=node, dir=tmp_path)

    (tmp_path / "gpu.rank1.json").write_text(
        json.dumps({"rank": 1, "node": "a1", "gpu": "NVIDIA A100-SXM4-80GB", "capability": [8, 0]})
    )
    with pytest.raises(PermanentError) as e:
        harness.Run.one_gpu_model(rank(0, "v1"), ("Tesla V100-SXM2-32GB", (7, 0)), wait_s=5)
    said = str(e.value)
    assert "Tesla V100-SXM2-32GB (compute capability 7.0) on v1" in said and "(compute capability 8.0) on a1" in said
    assert "systems.<name>.gpu_type" in said
    (tmp_path / "gpu.rank1.json").write_text(
        json.dumps({"rank": 1, "node": "v2", "gpu": "Tesla V100-SXM2-32GB", "capability": [7, 0]})
    )
    harness.Run.one_gpu_model(rank(0, "v1"), ("Tesla V100-SXM2-32GB", (7, 0)), wait_s=5)  # one model: goes on


def _ranks_gpus(tmp_path, monkeypatch, mine, other, bandwidths=(None, None)):
    """Rank 0 (node v1, GPU `mine`) beside rank 1 (node v2, GPU `other`, already written), each with
    its memory bandwidth as NVML gave it (None: not known): what one_gpu_model makes of them."""
    import json
    from types import SimpleNamespace

    from workflow_scripts.cluster import gpu_identity
    from workflow_scripts.train import harness

    (tmp_path / "gpu.rank1.json").write_text(
        json.dumps({"rank": 1, "node": "v2", "gpu": other[0], "capability": other[1], "memory_GBps": bandwidths[1]})
    )
    me = SimpleNamespace(launch=SimpleNamespace(rank=0, world_size=2), node="v1", dir=tmp_path, gpu_binding=None)
    # NVML's answer for this rank's GPU, at the boundary the next test checks with a made-up reading
    monkeypatch.setattr(gpu_identity, "memory_GBps", lambda bus: bandwidths[0], raising=False)
    me.gpu_binding = {"bus_id": "0000:1b:00.0"}  # the GPU NVML is asked about
    harness.Run.one_gpu_model(me, mine, wait_s=5)


def test_gpus_that_differ_in_memory_size_alone_are_one_model_with_a_warning(tmp_path, capsys, monkeypatch):
    """Issue 61 item 6: V100-SXM2 16 GB beside 32 GB, one chip at one memory bandwidth, is one model
    for the study: the run goes on and rank 0 says so in the log; sm_70 beside sm_80 is refused."""
    from workflow_scripts.common.errors import PermanentError

    _ranks_gpus(
        tmp_path, monkeypatch, ("Tesla V100-SXM2-32GB", (7, 0)), ("Tesla V100-SXM2-16GB", [7, 0]), (898.0, 898.0)
    )
    said = capsys.readouterr().err
    assert "warning: the run's GPUs differ in memory size only" in said and "898 GB/s" in said, said
    assert "Tesla V100-SXM2-16GB (compute capability 7.0, 898 GB/s) on v2" in said
    # without NVML's bandwidth the same pair still runs, and the warning says it could not compare
    _ranks_gpus(tmp_path, monkeypatch, ("Tesla V100-SXM2-32GB", (7, 0)), ("Tesla V100-SXM2-16GB", [7, 0]))
    assert "memory bandwidth not known" in capsys.readouterr().err
    with pytest.raises(PermanentError, match=r"different GPUs: .*capability 8\.0\) on v2; .*capability 7\.0\) on v1"):
        _ranks_gpus(tmp_path, monkeypatch, ("Tesla V100-SXM2-32GB", (7, 0)), ("NVIDIA A100-SXM4-40GB", [8, 0]))
    # one chip, two memory bandwidths (A100 40 GB: HBM2, 80 GB: HBM2e): every step is paced by the slower
    with pytest.raises(PermanentError, match="different memory bandwidths: .*1555 GB/s.*2039 GB/s"):
        _ranks_gpus(
            tmp_path,
            monkeypatch,
            ("NVIDIA A100-SXM4-40GB", (8, 0)),
            ("NVIDIA A100-SXM4-80GB", [8, 0]),
            (1555.2, 2039.0),
        )
    # the study's own comparison, PCIe against SXM2, stays two models
    with pytest.raises(PermanentError, match="different GPUs"):
        _ranks_gpus(tmp_path, monkeypatch, ("Tesla V100-PCIE-16GB", (7, 0)), ("Tesla V100-SXM2-16GB", [7, 0]))


def test_the_memory_bandwidth_is_nvmls_bus_width_and_memory_clock():
    """A made-up NVML reading of a V100 (4096-bit HBM2 at 877 MHz), at the boundary gpu_identity reads."""
    from types import SimpleNamespace

    from workflow_scripts.cluster import gpu_identity

    asked = []
    nvml = SimpleNamespace(
        NVML_CLOCK_MEM=2,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByPciBusId=lambda bus: asked.append(bus) or "h",
        nvmlDeviceGetMemoryBusWidth=lambda h: 4096,
        nvmlDeviceGetMaxClockInfo=lambda h, kind: {2: 877}[kind],
    )
    assert gpu_identity.memory_GBps("0000:1b:00.0", nvml) == pytest.approx(898.048) and asked == ["0000:1b:00.0"]
    nvml.nvmlDeviceGetMemoryBusWidth = lambda h: (_ for _ in ()).throw(RuntimeError("Not Supported"))
    assert gpu_identity.memory_GBps("0000:1b:00.0", nvml) is None


def test_int8_timings_are_judged_by_the_same_windows():
    """Issue 52 item 10: the INT8 stage's timed runs (int8/throughput.py) over windows of 10 runs,
    as training's steps: jitter alone is stable, a stretch of slow runs is not; fewer than two
    windows is judged per run."""
    from workflow_scripts.int8.throughput import summarize

    rng = random.Random(1)
    jitter = [0.01 * (1 + rng.uniform(-0.04, 0.04)) for _ in range(100)]
    steady = summarize(jitter, 8)
    assert steady["cv"] > metrics.STABLE_CV and steady["window_cv"] < metrics.STABLE_CV and steady["stable"]
    stalled = summarize(jitter[:40] + [0.03] * 10 + jitter[50:], 8)
    assert stalled["window_cv"] > metrics.STABLE_CV and not stalled["stable"] and stalled["stable_by"] == "windows"
    few = summarize(jitter[:15], 8)
    assert few["window_cv"] is None and few["stable_by"] == "runs" and few["stable"] is (few["cv"] <= metrics.STABLE_CV)


def _gpu_fact(index, bus, limit, default=300.0):
    return {
        "index": index,
        "name": "Tesla V100-SXM2-16GB",
        "bus_id": bus,
        "power_limit_W": limit,
        "default_power_limit_W": default,
        "app_clocks_MHz": {"sm": 1312, "mem": 877},
        "default_app_clocks_MHz": {"sm": 1312, "mem": 877},
    }


def test_a_run_on_a_gpu_below_its_default_power_limit_is_not_vouched_for():
    """Issue 61 item 6: a made-up run record whose node's GPU 1 enforces 250 W of its default 300 W
    (nvidia-smi -pl 250): the run's caveats say so, naming the GPU and both limits, and the training
    table shows every GPU's limits and clocks. A capped GPU the run was not bound to does not count."""
    from workflow_scripts.results import guards, runs

    node = {"gpus": [_gpu_fact(0, "0000:1a:00.0", 300.0), _gpu_fact(1, "0000:1b:00.0", 250.0)]}
    summary = {
        "provenance": {"nodes": {"n1": node}},
        "gpu_binding": {"ranks": [{"rank": r, "node": "n1", "bus_id": f"0000:1{'ab'[r]}:00.0"} for r in (0, 1)]},
        "isolation": {"isolated": True, "why": ""},
    }
    row = {"system": "v100", "run_dir": "runs/v100/pytorch_fp32_2gpu", **runs.evidence(summary)}
    assert row["power_capped"] == "gpu1 on n1 at 250 W of its default 300 W"
    assert "250 W (default 300 W)" in row["gpu_limits"] and "SM / memory 1312 / 877 MHz" in row["gpu_limits"]
    caveats = guards.run_caveats(row)
    assert caveats == [
        "power capped: v100/pytorch_fp32_2gpu: gpu1 on n1 at 250 W of its default 300 W: its "
        "steps ran on GPUs held below their default power limit (nvidia-smi -pl, or the site's "
        "power capping)"
    ], caveats
    # the run bound to GPU 0 alone: another job's capped GPU on the node is not its figure
    summary["gpu_binding"]["ranks"] = summary["gpu_binding"]["ranks"][:1]
    assert runs.evidence(summary)["power_capped"] == ""
    # at its default, or with no word from NVML: nothing to say
    node["gpus"][1]["power_limit_W"] = None
    summary["gpu_binding"] = None
    assert runs.evidence(summary)["power_capped"] == ""
