"""Only the failed runs run again (common/failed_runs.py): listed with their causes, and --retry
sets their records aside (kept beside the run directories, never deleted) so that the next `snakemake all` finds
exactly their outputs missing; a permanent failure stays unless asked for."""

import json

import pytest

from workflow_scripts.common import failed_runs

pytestmark = pytest.mark.unit


def _run(results, name, **summary):
    d = results / "runs" / "gpu" / name
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps(summary))
    return d


def test_retry_sets_aside_the_failed_and_keeps_the_good_and_the_permanent(tmp_path, capsys):
    good = _run(tmp_path, "pytorch_fp16_8gpu", status="ok", images_per_s=1.0)
    slow = _run(tmp_path, "pytorch_fp16_16gpu", status="failed", reason="job: stopped (time limit)", attempts=2)
    broken = _run(tmp_path, "mxnet_fp16_8gpu", status="failed", reason="no kernel image", permanent=True, attempts=1)
    failed_runs.main(["--results", str(tmp_path)])
    listed = capsys.readouterr().out
    assert "time limit" in listed and "permanent after 1 attempt(s): no kernel image" in listed
    assert "pytorch_fp16_8gpu" not in listed
    failed_runs.main(["--results", str(tmp_path), "--retry"])
    kept = tmp_path / "runs" / "gpu" / ".failed-records"  # outside the run directory, which a rerun empties
    assert not (slow / "summary.json").exists()
    assert json.loads((kept / "pytorch_fp16_16gpu.1.json").read_text())["attempts"] == 2
    assert (broken / "summary.json").exists() and (good / "summary.json").exists()
    (slow / "summary.json").write_text(json.dumps({"status": "failed", "reason": "again"}))
    failed_runs.main(["--results", str(tmp_path), "--retry", "--include-permanent"])
    assert (kept / "pytorch_fp16_16gpu.2.json").exists() and (kept / "mxnet_fp16_8gpu.1.json").exists()
    assert "set aside 2 of 2" in capsys.readouterr().out
