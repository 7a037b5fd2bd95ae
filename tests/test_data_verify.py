"""A converted dataset checked against its manifest (workflow_scripts/data/verify.py): a clean one
passes, damage a copy suffers (a cut file, a missing record, a flipped byte) is named with the
file and the rule that remakes it, and a training job stops on it with that one line instead of
dying of SIGBUS in a DataLoader worker."""

import json
import os
import shutil
import subprocess

import pytest
from helpers import REPO, interpreter, run_script, run_stage, trainer_command, tree_hashes

from workflow_scripts.common.errors import PERMANENT_TAG, PermanentError
from workflow_scripts.data import records, verify
from workflow_scripts.train import failure

pytestmark = pytest.mark.stage

FORMATS = ("tfrecord", "recordio", "lmdb")
# The environment of the trainer that reads each format: the one a training job checks it in.
ENV = {"tfrecord": "tensorflow", "recordio": "mxnet", "lmdb": "pytorch"}


def check(data, level="quick", env=None):
    """The CLI, run as preflight or a user would: (exit status, problem lines, stderr)."""
    proc = run_stage(
        env or ENV[data.name], "workflow_scripts.data.verify", "--data", data, "--level", level, check=False
    )
    problems = [ln for ln in proc.stdout.splitlines() if not ln.startswith("ok: ")]
    return proc.returncode, problems, proc.stderr


@pytest.fixture
def copy_of(quirky_converted, tmp_path):
    """A scratch copy of one format's output, to damage."""

    def make(fmt):
        return shutil.copytree(quirky_converted / fmt, tmp_path / fmt)

    return make


def flip_byte_in_first_image(path):
    """Flip one byte inside the first JPEG stored in `path` (a record every sample includes)."""
    data = bytearray(path.read_bytes())
    at = data.index(b"\xff\xd8\xff") + 300
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("level", verify.LEVELS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_clean_dataset_passes(quirky_converted, fmt, level):
    rc, problems, err = check(quirky_converted / fmt, level)
    assert (rc, problems) == (0, []), err
    files = json.loads((quirky_converted / fmt / "manifest.json").read_text())["files"]
    listed = {
        f
        for s in json.loads((quirky_converted / fmt / "manifest.json").read_text())["splits"].values()
        for f in s["files"]
    }
    assert set(files) == listed
    assert all(f["bytes"] == (quirky_converted / fmt / name).stat().st_size for name, f in files.items())


def test_truncated_lmdb_is_named_with_its_fix(copy_of):
    data = copy_of("lmdb")
    mdb = data / "train" / "data.mdb"
    size = mdb.stat().st_size
    os.truncate(mdb, size // 2)  # a full scratch disk or an interrupted copy
    rc, problems, err = check(data)
    assert rc == 1, err
    assert problems == [
        f"{mdb}: size: expected {size} bytes, found {size // 2} bytes (its last page ends at byte "
        f"{size}: reading it would fault (SIGBUS)). Fix: snakemake --forcerun lmdb"
    ]


def test_tfrecord_shard_of_the_wrong_size_is_named_with_its_fix(copy_of):
    data = copy_of("tfrecord")
    shard = data / "train-00001-of-00003"
    size = shard.stat().st_size
    os.truncate(shard, size - 1000)
    rc, problems, err = check(data)
    assert rc == 1, err
    (line,) = problems
    assert line.startswith(f"{shard}: size: expected {size} bytes, found {size - 1000} bytes")
    assert "idx/train-00001-of-00003.idx ends at byte" in line and line.endswith("Fix: snakemake --forcerun tfrecord")


def test_rec_missing_its_last_record_is_named_with_its_fix(copy_of):
    data = copy_of("recordio")
    rec = data / "train.rec"
    size = rec.stat().st_size
    last = int((data / "train.idx").read_text().splitlines()[-1].split("\t")[1])
    os.truncate(rec, last)  # the copy stopped after the second-to-last record
    rc, problems, err = check(data)
    assert rc == 1, err
    (line,) = problems
    assert line.startswith(f"{rec}: size: expected {size} bytes, found {last} bytes (the last indexed record")
    assert f"header at byte {last} lies beyond the end of the file" in line
    assert line.endswith("Fix: snakemake --forcerun recordio")


@pytest.mark.parametrize(
    "fmt,name", [("tfrecord", "validation-00000-of-00002"), ("recordio", "val.rec"), ("lmdb", "val/data.mdb")]
)
def test_flipped_byte_in_a_sampled_record_is_found_by_sample_and_full(copy_of, fmt, name):
    data = copy_of(fmt)
    flip_byte_in_first_image(data / name)
    assert check(data, "quick")[:2] == (0, [])  # the size and count are still right
    for level, what in (("sample", "sha256 of its sampled records"), ("full", "sha256 of the whole file")):
        rc, problems, err = check(data, level)
        assert rc == 1, err
        (line,) = problems
        assert line.startswith(f"{data / name}: {what}") and line.endswith(f"Fix: snakemake --forcerun {fmt}"), line


def test_sample_reads_every_kth_record_and_full_every_byte(copy_of, monkeypatch):
    """With fewer sampled records than records, damage between two samples passes the sample
    check and fails the full one (RecordIO is read with the standard library, here in the
    driver's environment)."""
    data = copy_of("recordio")
    monkeypatch.setattr(verify, "SAMPLE_RECORDS", 8)
    manifest = json.loads((data / "manifest.json").read_text())
    manifest["files"] = verify.facts("recordio", data, [data / f for f in manifest["files"]])
    (data / "manifest.json").write_text(json.dumps(manifest))
    sample = manifest["files"]["train.rec"]["sample"]
    assert sample["every"] > 1 and sample["count"] == 4
    offsets = records.RecordIOFile.offsets(data / "train.rec")
    rec = bytearray((data / "train.rec").read_bytes())
    rec[offsets[1] + 300] ^= 0xFF  # record 1: between samples 0 and `every`
    (data / "train.rec").write_bytes(bytes(rec))
    assert verify.check(data, "sample") == []
    (problem,) = verify.check(data, "full")
    assert (problem.file, problem.rule, problem.fix) == (
        data / "train.rec",
        "recordio",
        "snakemake --forcerun recordio",
    )


def test_index_stage_output_is_checked_against_its_summary(quirky_converted, tmp_path):
    index = shutil.copytree(quirky_converted / "index", tmp_path / "index")
    assert verify.check(index) == []
    lines = (index / "val.tsv").read_text().splitlines(keepends=True)
    (index / "val.tsv").write_text("".join(lines[:-1]))
    (problem,) = verify.check(index)
    assert str(problem) == (
        f"{index / 'val.tsv'}: rows (summary.json images): expected {len(lines) - 1}, found "
        f"{len(lines) - 2}. Fix: snakemake --forcerun index_dataset"
    )


def test_lmdb_check_where_lmdb_does_not_import_says_so(quirky_converted):
    rc, problems, err = check(quirky_converted / "lmdb", env="workflow")
    assert rc == 2 and problems == []
    assert "the lmdb package does not import in" in err and "data.mdb" in err


def test_stdlib_readers_read_what_the_frameworks_read(quirky_converted):
    got = run_script("mxnet", "verify_records.py", quirky_converted)
    assert len(got) == 5 + 2
    for name, r in got.items():
        assert r["equal"] and r["ours"] == r["theirs"] > 0, (name, r)


@pytest.mark.parametrize("fmt", ("recordio", "lmdb"))
def test_facts_are_deterministic(quirky_converted, tmp_path, fmt):
    """Equal inputs, equal bytes: the manifest's file facts included."""
    module = {"recordio": "workflow_scripts.data.recordio", "lmdb": "workflow_scripts.data.lmdb_caffe2"}[fmt]
    run_stage(ENV[fmt], module, "--index", quirky_converted / "index", "--out", tmp_path / fmt, "--threads", "2")
    assert tree_hashes(tmp_path / fmt) == tree_hashes(quirky_converted / fmt)
    assert (
        "sample"
        in json.loads((tmp_path / fmt / "manifest.json").read_text())["files"][
            "train.rec" if fmt == "recordio" else "train/data.mdb"
        ]
    )


def _train(data, out, batch=2):
    cmd = trainer_command(data=data, batch_per_gpu=batch, out=out)
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)


def test_pytorch_training_on_a_truncated_lmdb_fails_naming_the_file(small_lmdb, tmp_path):
    data = shutil.copytree(small_lmdb, tmp_path / "lmdb")
    proc = _train(data, tmp_path / "clean")
    assert proc.returncode == 0, proc.stderr[-3000:]  # the check passes a good copy
    mdb = data / "train" / "data.mdb"
    os.truncate(mdb, mdb.stat().st_size // 2)
    proc = _train(data, tmp_path / "cut")
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {PERMANENT_TAG} the dataset does not match its manifest: {mdb}: size: expected "), (
        last
    )
    assert last.endswith("Fix: snakemake --forcerun lmdb")
    assert "Bus error" not in proc.stderr and "shared memory" not in proc.stderr
    # What the sweep records as the failed run's reason is that line, and it is recorded at once, as
    # permanent: another attempt would meet the same file until it is rebuilt.
    assert last in failure.reason(proc.stdout + proc.stderr)
    assert failure.permanent(proc.stdout + proc.stderr) == last


def test_a_dataset_smaller_than_one_global_batch_is_permanent(small_lmdb, tmp_path):
    """Seen on the GPU machine (ba1bbec:docs/benchmarks.md, `snakemake --profile slurm` on GPUs): a long
    test of 2 x 512 images on 480 was submitted twice. No attempt can pass: it is recorded at once,
    with the key to change."""
    images = json.loads((small_lmdb / "manifest.json").read_text())["splits"]["train"]["images"]
    proc = _train(small_lmdb, tmp_path / "big", batch=images + 1)
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert f"holds {images} training images, fewer than one global batch ({images + 1} x 1 ranks)" in last, last
    assert "Fix: lower training.batch_per_gpu" in last
    assert failure.permanent(proc.stdout + proc.stderr) == last


# --- the whole-file check after conversion (verify --record; rules/data.smk data_check) ---

TRAIN_FILE = {"tfrecord": "train-00000-of-00003", "recordio": "train.rec", "lmdb": "train/data.mdb"}
RESAMPLE = (
    "import json, sys\n"
    "from pathlib import Path\n"
    "from workflow_scripts.data import verify\n"
    "verify.SAMPLE_RECORDS = 1  # one record of each file sampled: ILSVRC2012's 1 in 1,250, or fewer\n"
    "d = Path(sys.argv[1])\n"
    "m = json.loads((d / 'manifest.json').read_text())\n"
    "m['files'] = verify.facts(m['format'], d, [d / f for f in m['files']])\n"
    "(d / 'manifest.json').write_text(json.dumps(m))\n"
    "print(json.dumps({'resampled': str(d)}))\n"
)


def resampled(copy_of, fmt, tmp_path):
    """A copy whose manifest samples one record of each file (rewritten in the format's environment)."""
    data = copy_of(fmt)
    script = tmp_path / "resample.py"
    script.write_text(RESAMPLE)
    run_script(ENV[fmt], script, data)
    return data


def flip_16_bytes_in_last_image(path):
    """16 bytes inside the last JPEG the file holds (never record 0, the one sampled)."""
    data = bytearray(path.read_bytes())
    at = data.rindex(b"\xff\xd8\xff") + 200
    data[at : at + 16] = bytes(b ^ 0xFF for b in data[at : at + 16])
    path.write_bytes(bytes(data))


def whole_check(data, out, env):
    proc = run_stage(
        env, "workflow_scripts.data.verify", "--data", data, "--record", out, "--threads", "2", check=False
    )
    return proc.returncode, [ln for ln in proc.stdout.splitlines() if ": " in ln and "Fix:" in ln], proc.stdout


@pytest.mark.parametrize("fmt", FORMATS)
def test_damage_outside_the_sample_passes_it_and_fails_the_whole_file_check(copy_of, tmp_path, fmt):
    data = resampled(copy_of, fmt, tmp_path)
    flip_16_bytes_in_last_image(data / TRAIN_FILE[fmt])
    assert check(data, "sample")[:2] == (0, [])  # what preflight reads by default: the damage is not in it
    out = tmp_path / "checked" / f"{fmt}.json"
    rc, problems, said = whole_check(data, out, ENV[fmt])
    assert rc == 1 and not out.exists(), said
    (line,) = problems
    assert line.startswith(f"{data / TRAIN_FILE[fmt]}: sha256 of the whole file"), line
    assert line.endswith(f"Fix: snakemake --forcerun {fmt}")


def test_a_file_changed_since_its_check_is_hashed_again_before_training(copy_of, tmp_path):
    """The record keeps each file's size and mtime: a file rewritten with the same bytes is hashed
    again and passes; one whose bytes changed (here 16 of them, its size the same) stops the run."""
    data = copy_of("recordio")
    rc, _, said = whole_check(data, verify.record_path(data), "mxnet")
    assert rc == 0 and "whole-file check of" in said and "MB/s" in said, said
    record = json.loads(verify.record_path(data).read_text())
    assert set(record["files"]) == set(json.loads((data / "manifest.json").read_text())["files"])
    assert verify.changed_since_check(data) == set()
    rec = data / "train.rec"
    os.utime(rec, ns=(rec.stat().st_atime_ns, rec.stat().st_mtime_ns + 10**9))
    assert verify.changed_since_check(data) == {"train.rec"}
    verify.require(data)  # the same bytes: passes
    flip_16_bytes_in_last_image(rec)
    with pytest.raises(PermanentError) as e:
        verify.require(data)
    assert f"{rec}: sha256 of the whole file" in str(e.value) and "snakemake --forcerun recordio" in str(e.value)


def test_a_damaged_tfrecord_stops_tensorflow_naming_the_data_and_the_fix(copy_of, tmp_path):
    """A shard's record damaged after the check (sizes the same, so the quick check at start passes):
    TensorFlow's DataLossError, which names no shard, becomes a permanent error naming the copy, the
    command that finds the shard and the rule that remakes it, recorded at once, never retried."""
    data = copy_of("tfrecord")
    for shard in sorted(data.glob("train-*-of-*")):
        flip_byte_in_first_image(shard)
    cmd = trainer_command("tensorflow", data=data, batch_per_gpu=2, out=tmp_path / "run")
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {PERMANENT_TAG} {data}: a TFRecord shard is damaged (TensorFlow: "), last
    assert f"--data {data} --level full` names it. Fix: snakemake --forcerun tfrecord" in last
    assert failure.permanent(proc.stdout + proc.stderr) == last


def test_a_record_that_does_not_decode_stops_pytorch_naming_the_record_and_the_fix(small_lmdb, tmp_path):
    """A record's JPEG damaged where the quick check at start cannot see it (its start marker): the
    PyTorch reader names the LMDB, the record and the rule that remakes it, as permanent."""
    data = shutil.copytree(small_lmdb, tmp_path / "lmdb")
    mdb = data / "train" / "data.mdb"
    raw = bytearray(mdb.read_bytes())
    at = raw.index(b"\xff\xd8\xff")
    while at >= 0:  # every image: whichever the shuffled first batch takes
        raw[at : at + 3] = b"BAD"
        at = raw.find(b"\xff\xd8\xff", at)
    mdb.write_bytes(bytes(raw))
    proc = _train(data, tmp_path / "run")
    assert proc.returncode != 0, proc.stderr[-3000:]
    line = failure.permanent(proc.stdout + proc.stderr)
    assert line and f"{data / 'train'}/data.mdb: record " in line and "does not decode" in line, proc.stderr[-3000:]
    assert line.endswith("Fix: snakemake --forcerun lmdb"), line


def test_a_storage_failover_is_asked_again_and_never_made_permanent(copy_of, monkeypatch):
    """ESTALE while the check reads (a stale handle: the file system failing over): asked again
    after a wait, and it passes once the storage answers; where it never does, a StageError that
    is not permanent, naming the file system, not the data."""
    import errno as errno_

    data = copy_of("recordio")
    real, calls = records.RecordIOFile.count, []

    def flaky(self, path):
        calls.append(path)
        if len(calls) <= 2:
            raise OSError(errno_.ESTALE, "Stale file handle")
        return real(self, path)

    monkeypatch.setattr(records.RecordIOFile, "count", flaky)
    slept = []
    assert verify.patient(lambda: verify.check(data, "quick"), sleep=slept.append) == []
    assert slept == [5, 20]
    calls.clear()

    def failing(self, path):
        raise OSError(errno_.EIO, "Input/output error")

    monkeypatch.setattr(records.RecordIOFile, "count", failing)
    with pytest.raises(verify.StageError) as e:
        verify.patient(lambda: verify.check(data, "quick"), sleep=slept.append)
    assert not isinstance(e.value, PermanentError) and "the file system, not the data" in str(e.value)
    assert PERMANENT_TAG not in str(e.value)


def test_preflights_check_of_a_damaged_copy_names_every_other_damaged_copy(copy_of, tmp_path):
    """The first pair's data check to fail stops the workflow at its gate, before the other pairs'
    checks run: it names every damaged copy beside its own, and one command that remakes them all,
    so they are not repaired one a run. preflight's node check, run as its job runs it."""
    data = {fmt: copy_of(fmt) for fmt in FORMATS}
    lmdb, rec = data["lmdb"] / "train" / "data.mdb", data["recordio"] / "train.rec"
    os.truncate(lmdb, lmdb.stat().st_size // 2)
    os.truncate(rec, rec.stat().st_size - 4)
    out = tmp_path / "node"
    out.mkdir()
    proc = run_stage(
        "workflow",
        "workflow_scripts.preflight.node",
        "--out",
        out,
        f"--data={data['lmdb']}",
        "--level",
        "sample",
        "--cache-clear=dataset",
        f"--python={interpreter('pytorch')}",
    )
    [rows] = [json.loads(p.read_text()) for p in out.glob("node.*.json")]
    [row] = [r for r in rows if r["check"] == "dataset"]
    assert row["status"] == "failed" and row["cause"].startswith(f"{lmdb}: size: expected"), (row, proc.stderr)
    assert f"also damaged: {data['recordio']}: {rec}: size: expected" in row["cause"], row
    assert str(data["tfrecord"]) not in row["cause"] and row["fix"] == "snakemake --forcerun lmdb recordio", row
