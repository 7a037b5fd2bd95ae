"""benchmarks/quick_start.py: a finished run's measuring jobs split into start-up, warm-up, timed
steps and what follows, from the records every run keeps (summary.json's job, steps.jsonl)."""

import json

import pytest

from benchmarks import quick_start

pytestmark = pytest.mark.unit


def test_a_jobs_phases_come_from_its_own_records(tmp_path):
    run = tmp_path / "results" / "runs" / "local" / "pytorch_fp32_1gpu"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"job": {"started_at": 100.0, "ended_at": 140.0}}))
    steps = [("warmup", 1.5, 112.0), ("warmup", 0.5, 112.5), ("timed", 2.0, 114.5), ("timed", 2.0, 116.5)]
    (run / "steps.jsonl").write_text(
        "".join(json.dumps({"phase": p, "wall_s": s, "wall_end": e}) + "\n" for p, s, e in steps)
    )
    assert quick_start.phases(run) == pytest.approx((10.5, 2.0, 4.0, 23.5))
    logs = tmp_path / "logs" / "train" / "local"
    logs.mkdir(parents=True)
    (logs / "x.bench.tsv").write_text("s\th:m:s\n40.0\t0:00:40\n")
    assert quick_start.rule_seconds(tmp_path) == {"train": (1, 40.0)}
