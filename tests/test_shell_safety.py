"""No config string is run by a shell unless it is meant to be a command: paths with spaces,
quotes, $, ;, and backticks work end to end, a system's strings reach SLURM as words, and what
cannot be carried is refused when the workflow is parsed, naming the key."""

import json
import subprocess

import pytest
from helpers import REPO, TRAINERS, interpreter, snakemake, write_config
from helpers.hostile import HOSTILE, MARK, markers

from workflow_scripts.common.errors import StageError
from workflow_scripts.train import training_job

SYSTEM = {
    "gpus_per_node": 1,
    "max_nodes": 1,
    "account": f"acct'$(touch {MARK}-acct)",
    "constraint": f"a&b|$(touch {MARK}-constraint)",
    "qos": f"q`touch {MARK}-qos`",
    "sbatch_extra": f"--mail-type=NONE --mail-user='x $(touch {MARK}-sbatch)'",
}


def snapshot(work, skip):
    """Every file under `work` outside the `skip` directories, with its size and mtime."""
    out = {}
    for p in sorted(work.rglob("*")):
        rel = p.relative_to(work)
        if rel.parts[0] in skip or not p.is_file():
            continue
        st = p.stat()
        out[str(rel)] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.mark.pipeline
def test_hostile_paths_and_system_strings_work_and_touch_nothing_else(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "victim").mkdir()
    (work / "victim" / "keep.txt").write_text("must survive")
    # MXNet's readers split file names at ';' (dmlc-core): its run reads through an alias.
    # Small images and batches: what is tested is where the strings go, not what the runs measure.
    write_config(
        work,
        **HOSTILE,
        systems={"local": SYSTEM},
        training__frameworks=["pytorch", "mxnet"],
        training__gpus=[1],
        training__warmup_steps=1,
        training__steps=3,
        training__long_test__gpus=[],
        training__image_size=32,
        training__batch_per_gpu={"tensorflow": 4, "mxnet": 4, "pytorch": 4},
    )
    before = snapshot(work, {*HOSTILE.values(), ".snakemake"})
    snakemake(work, "data", "training")
    run = work / HOSTILE["results_dir"] / "runs" / "local" / "pytorch_fp32_1gpu"
    for fw in ("pytorch", "mxnet"):
        summary = json.loads((run.with_name(f"{fw}_fp32_1gpu") / "summary.json").read_text())
        assert summary.get("timed_steps") == 3, summary
    for fmt in ("tfrecord", "recordio", "lmdb"):
        assert (work / HOSTILE["data_dir"] / fmt / "manifest.json").is_file()
    assert (work / HOSTILE["log_dir"] / "train" / "local" / "pytorch_fp32_1gpu.log").read_text().startswith("attempt 1")
    # Again over the existing run directory: it is emptied, and nothing beside it.
    snakemake(work, "training", "--forcerun", "train")
    assert json.loads((run / "summary.json").read_text())["timed_steps"] == 3
    assert markers(tmp_path) == []
    assert (work / "victim" / "keep.txt").read_text() == "must survive"
    assert snapshot(work, {*HOSTILE.values(), ".snakemake"}) == before


@pytest.mark.stage
@pytest.mark.parametrize(
    "key, value, why",
    [
        ("data_dir", "data\nx", "control character"),
        ("results_dir", "res{system}", "braces"),
        ("log_dir", "-logs", "starting with '-'"),
        ("data_dir", f"da'ta $(touch {MARK})", "quotes and backslashes"),
        ("results_dir", f'res"$(touch {MARK})"', "quotes and backslashes"),
        ("systems", {f"gpu$(touch {MARK})": {"gpus_per_node": 1}}, "does not match"),
        (
            "systems",
            {"local": {"gpus_per_node": 1, "gpu_request": "gres", "gpu_type": f"v100'$(touch {MARK})"}},
            "gpu_type",
        ),
        (
            "systems",
            {"local": {"gpus_per_node": 1, "sbatch_extra": f"--x='$(touch {MARK})"}},
            "systems.local.sbatch_extra",
        ),
    ],
)
def test_what_cannot_be_carried_is_refused_at_parse_time_naming_the_key(tmp_path, key, value, why):
    write_config(tmp_path, **{key: value})
    proc = snakemake(tmp_path, "-n", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and why in out and key in out, out[-2000:]
    assert markers(tmp_path) == []


@pytest.mark.stage
def test_a_run_directory_outside_results_is_never_deleted(tmp_path):
    results, outside = tmp_path / "results", tmp_path / "precious"
    outside.mkdir()
    (outside / "file").write_text("x")
    for bad in (outside, results, results / ".." / "precious"):
        with pytest.raises(StageError, match="does not lie inside results_dir"):
            training_job.checked_run_dir(bad, results)
    proc = subprocess.run(
        [
            interpreter("pytorch"),
            "-m",
            "workflow_scripts.train.training_job",
            "--run-dir",
            str(outside),
            "--results-dir",
            str(results),
            "--log",
            str(tmp_path / "log"),
            "--",
            TRAINERS["pytorch"],
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "not deleting it" in proc.stderr
    assert (outside / "file").read_text() == "x"
