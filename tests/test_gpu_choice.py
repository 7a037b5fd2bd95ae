"""Each rank takes the GPU next to its CPUs, each on its own (cluster/gpu_choice.py). No GPU here:
made-up layouts (a DGX whose GPUs 0-3 hang off the second socket) and a missing CUDA driver and
NVML."""

import itertools
import json
import random
import sys
import threading

import pytest
from helpers.gpu_layout import BUS, NEAR, SOCKET0, SOCKET1, block, cyclic, launch, no_driver, report, socket_of, visible

from workflow_scripts.cluster import gpu_choice, gpu_identity

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("layout", [block, cyclic])
def test_each_rank_takes_a_gpu_on_its_own_socket_and_no_two_share_one(layout):
    decision = gpu_choice.decide({r: report(layout(r)) for r in range(8)}, 8)
    assert decision["how"] == "affinity" and decision["status"] == "ok", decision
    pairing = {int(r): g for r, g in decision["gpus"].items()}
    assert sorted(pairing.values()) == list(range(8))  # one GPU each
    for r, g in pairing.items():
        assert set(layout(r)) <= set(NEAR[g]), (r, g)  # the GPU on the rank's socket
    # local rank would have put rank 0 (socket 0) on GPU 0 (socket 1)
    assert pairing[0] != 0


def test_ties_keep_the_local_ranks_gpu():
    """Where local rank already pairs each rank with a near GPU, nothing moves."""
    near = [SOCKET0] * 4 + [SOCKET1] * 4
    decision = gpu_choice.decide({r: report(block(r), near) for r in range(8)}, 8)
    assert decision["how"] == "affinity"
    assert decision["gpus"] == {str(r): r for r in range(8)}


def test_the_matching_is_the_best_one():
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(1, 5)
        m = rng.randint(n, 6)
        w = [[rng.randint(0, 6) for _ in range(m)] for _ in range(n)]
        got = gpu_choice._max_weight_matching(w)
        assert len(set(got)) == n
        best = max(sum(w[i][p[i]] for i in range(n)) for p in itertools.permutations(range(m), n))
        assert sum(w[i][got[i]] for i in range(n)) == best


def test_the_ranks_of_a_node_agree_through_their_folder(tmp_path):
    """Eight ranks started at once, each knowing only its own CPUs, end on eight GPUs, each near."""
    env = {"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "1"}
    records = {}

    def rank(r):
        records[r] = gpu_choice.choose(launch(r), tmp_path, seen=8, cpus=cyclic(r), visible=visible(), env=env)

    threads = [threading.Thread(target=rank, args=(r,)) for r in reversed(range(8))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(records) == list(range(8))
    assert sorted(rec["cuda_index"] for rec in records.values()) == list(range(8))
    for r, rec in records.items():
        assert rec["how"] == "affinity" and rec["status"] == "ok"
        assert rec["shared_cpus"] == 12 and rec["bus_id"] == BUS[rec["cuda_index"]]
        assert socket_of(cyclic(r)) == rec["numa_node"]
    # one published decision for the node and step
    (folder,) = (tmp_path / gpu_choice.FOLDER).iterdir()
    assert folder.name == "n1-42.1.0" and (folder / "decision.json").is_file()


def test_a_rank_that_does_not_report_makes_the_node_fall_back_to_local_rank(tmp_path):
    env = {"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "2"}
    first = gpu_choice.choose(launch(0, 2), tmp_path, cpus=block(0), visible=visible(), env=env, timeout_s=0.2)
    assert first["how"] == "local_rank" and first["cuda_index"] == 0 and first["status"] == "warning"
    assert "local rank(s) 1 did not report their CPUs within 0.2 s" in first["why"]
    # the late rank reads the published fallback, so the two cannot meet on one GPU
    late = gpu_choice.choose(launch(1, 2), tmp_path, cpus=block(4), visible=visible(), env=env, timeout_s=0.2)
    assert late["how"] == "local_rank" and late["cuda_index"] == 1 and late["why"] == first["why"]


def test_no_nvml_and_no_cuda_driver_fall_back_to_local_rank_and_say_why(monkeypatch, tmp_path):
    def no_driver():
        raise OSError("no CUDA driver library (libcuda.so.1: cannot open shared object file)")

    monkeypatch.setattr(gpu_identity, "cuda_devices", no_driver)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError, as in .venv
    rec = gpu_choice.choose(launch(3, 4), tmp_path, seen=4, cpus=block(3), env={})
    assert rec["cuda_index"] == 3 and rec["how"] == "local_rank" and rec["status"] == "warning"
    assert "NVML unavailable (ModuleNotFoundError" in rec["why"] and "no CUDA driver library" in rec["why"]


@pytest.mark.parametrize(
    "tasks, near, why, status",
    [
        (
            {r: list(range(224)) for r in range(8)},
            NEAR,
            "the ranks share one CPU set (0-223): no task binding",
            "warning",
        ),
        ({r: block(r) for r in range(8)}, [SOCKET0 + SOCKET1] * 8, "every GPU is as near as any other", "ok"),
    ],
)
def test_affinity_that_cannot_tell_gpus_apart_keeps_local_rank(tasks, near, why, status):
    decision = gpu_choice.decide({r: report(c, near) for r, c in tasks.items()}, 8)
    assert decision["how"] == "local_rank" and decision["gpus"] is None and decision["status"] == status
    assert why in decision["why"]


def test_ranks_that_see_different_gpus_keep_local_rank():
    entries = {r: report(block(r)) for r in range(2)}
    entries[1]["gpus"] = entries[1]["gpus"][::-1]
    assert "see different GPUs" in gpu_choice.decide(entries, 2)["why"]


def test_a_framework_that_counts_other_gpus_than_the_driver_keeps_local_rank(tmp_path):
    rec = gpu_choice.choose(launch(0, 1), tmp_path, seen=7, cpus=block(0), visible=visible(), env={})
    assert rec["how"] == "local_rank" and "the framework sees 7 GPU(s)" in rec["why"]


# ---- where the run and preflight say it ----------------------------------------------------------------


def test_the_summary_lists_every_ranks_gpu_and_how_it_was_chosen(tmp_path):
    from workflow_scripts.train import harness

    run = harness.Run.__new__(harness.Run)
    run.dir = tmp_path
    for r in (1, 0):
        rec = gpu_choice.choose(launch(0, 1), tmp_path, cpus=cyclic(r), visible=visible(), env={})
        (tmp_path / f"rank{r}.json").write_text(json.dumps({"rank": r, "node": "n1", "gpu": rec}))
    run.gpu_binding = rec
    got = run.gpu_bindings()
    assert got["how"] == "affinity" and [r["rank"] for r in got["ranks"]] == [0, 1]
    assert got["ranks"][1]["numa_node"] == 1 and got["ranks"][1]["cpus"] == "56-67"


def test_preflight_shows_the_pairing_and_warns_on_a_fallback(tmp_path, monkeypatch):
    from workflow_scripts.preflight import rank

    good = gpu_choice.choose(launch(0, 1), tmp_path, cpus=block(0), visible=visible(), env={})
    row = rank.binding_row(good)
    assert row["check"] == "gpu_binding" and row["status"] == "ok"
    assert row["figure"].startswith(f"local rank 0 -> GPU 4 ({BUS[4]}, NUMA node 0) by CPU affinity")
    monkeypatch.setattr(gpu_identity, "cuda_devices", no_driver)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    row = rank.binding_row(gpu_choice.choose(launch(1, 2), tmp_path, seen=2, cpus=block(1), env={}))
    assert row["status"] == "warning" and "by local rank" in row["figure"] and "NVML unavailable" in row["cause"]
