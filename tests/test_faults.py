"""Unlucky inputs end in a clear message naming the file or key, and lose nothing that was good:
label files that disagree, unreadable images, an unwritable or full disk, partial outputs of
killed runs, a system the config does not define, overrides from a second config file."""

import csv
import os
import re
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest
from helpers import REPO, SNAKEMAKE, interpreter, planned_jobs, run_stage, snakemake, write_config

from workflow_scripts.common.errors import StageError
from workflow_scripts.data import embedded, layout

NOBODY = 65534


def _small_tree(root, classes=2, **kw):
    return embedded.make(root, classes=classes, train_per_class=2, val_per_class=2, quirks=False, seed=3, **kw)


def _kaggle_csv_from(synset_list, out, change=None):
    """Kaggle's LOC_val_solution.csv with the labels of TF's list, optionally one changed."""
    wnids = synset_list.read_text().split()
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["ImageId", "PredictionString"])
        for n, wnid in enumerate(wnids, start=1):
            w.writerow([f"ILSVRC2012_val_{n:08d}", f"{change if n == 2 and change else wnid} 1 1 9 9"])


@pytest.mark.stage
def test_two_label_files_that_disagree_stop_the_run_naming_both(tmp_path):
    root = _small_tree(tmp_path / "ds")
    tf_list = root / "imagenet_2012_validation_synset_labels.txt"
    other = next(
        w for w in embedded.class_spec(0)[:1] + embedded.class_spec(1)[:1] if w != tf_list.read_text().split()[1]
    )
    _kaggle_csv_from(tf_list, root / "LOC_val_solution.csv", change=other)
    with pytest.raises(StageError) as err:
        layout.discover(root)
    msg = str(err.value)
    assert "LOC_val_solution.csv" in msg and "imagenet_2012_validation_synset_labels.txt" in msg
    assert "ILSVRC2012_val_00000002" in msg and "dataset.val_labels" in msg
    # The same stop when the workflow is parsed, before any job runs.
    write_config(tmp_path, dataset__root=str(root))
    proc = snakemake(tmp_path, "-n", check=False)
    assert proc.returncode != 0 and "disagree" in proc.stdout + proc.stderr
    # Naming one of them is the way to choose.
    assert layout.discover(root, val_labels=str(tf_list)).val_source == f"labels from {tf_list}"


@pytest.mark.unit
def test_two_label_files_that_agree_are_used_and_both_named(tmp_path):
    root = _small_tree(tmp_path / "ds")
    tf_list = root / "imagenet_2012_validation_synset_labels.txt"
    _kaggle_csv_from(tf_list, root / "LOC_val_solution.csv")
    lay = layout.discover(root)
    assert lay.val_source.startswith(f"labels from {root / 'LOC_val_solution.csv'}")
    assert str(tf_list) in lay.val_source and "agreement" in lay.val_source


def _shared_tmp():
    """A scratch directory the unprivileged user can use (pytest's tmp_path is root's alone)."""
    d = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="dlscale-"))
    os.chmod(d, 0o777)
    return d


def _as_nobody(*cmd):
    return subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *map(str, cmd)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a stage as another user")


@pytest.mark.stage
@needs_root
def test_unreadable_image_is_a_reject_with_its_reason():
    d = _shared_tmp()
    try:
        root = _small_tree(d / "ds")
        shutil.chown(d / "ds", NOBODY, NOBODY)
        for p in (d / "ds").rglob("*"):
            shutil.chown(p, NOBODY, NOBODY)
        locked = sorted((root / "train").rglob("*.JPEG"))[0]
        locked.chmod(0)
        index = [interpreter("workflow"), "-m", "workflow_scripts.data.index", "--root", root, "--threads", "1"]
        proc = _as_nobody(*index, "--out", d / "index", "--max-reject-fraction", "0.2")
        assert proc.returncode == 0, proc.stderr
        with open(d / "index" / "rejects.tsv", newline="") as f:
            rejects = list(csv.DictReader(f, delimiter="\t"))
        assert [(r["relpath"], r["reason"]) for r in rejects] == [
            (locked.relative_to(root).as_posix(), "cannot read: Permission denied")
        ]
        # The reject threshold applies to it as to any bad file, naming it.
        proc = _as_nobody(*index, "--out", d / "index2", "--max-reject-fraction", "0")
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert f"{locked}: cannot read: Permission denied" in proc.stderr
    finally:
        shutil.rmtree(d)


@pytest.mark.stage
@needs_root
def test_unwritable_output_fails_before_any_image_is_probed():
    d = _shared_tmp()
    try:
        # The tree has more bad files than the threshold below allows: probing first would end in
        # the reject error, not the one that matters.
        root = _small_tree(d / "ds", classes=3, broken=True)
        out_parent = d / "readonly"
        out_parent.mkdir(mode=0o755)  # root's: the unprivileged user may not write in it
        proc = _as_nobody(
            interpreter("workflow"),
            "-m",
            "workflow_scripts.data.index",
            "--root",
            root,
            "--out",
            out_parent / "index",
            "--max-reject-fraction",
            "0",
            "--threads",
            "1",
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert f"cannot write the output {out_parent / 'index'}: Permission denied" in proc.stderr
        assert "max_reject_fraction" not in proc.stderr
    finally:
        shutil.rmtree(d)


@pytest.mark.stage
def test_output_directory_that_cannot_be_made_stops_the_workflow_naming_the_key(tmp_path):
    (tmp_path / "a-file").write_text("not a directory")
    write_config(tmp_path, data_dir="a-file/data")
    proc = snakemake(tmp_path, "-n", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "config data_dir = 'a-file/data'" in out and "not a directory" in out


def _dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


@pytest.mark.pipeline
def test_partial_outputs_of_killed_runs_are_removed_and_logged(pipeline_run, tmp_path):
    host = socket.gethostname()
    out = tmp_path / "lmdb"
    dead, legacy = tmp_path / f".lmdb.partial-{host}-{_dead_pid()}", tmp_path / f".lmdb.partial-{_dead_pid()}"
    live = tmp_path / f".lmdb.partial-{host}-{os.getpid()}"
    elsewhere = tmp_path / f".lmdb.partial-node-007-{_dead_pid()}"
    for d in (dead, legacy, live, elsewhere):
        d.mkdir()
        (d / "data.mdb").write_bytes(b"x" * 1000)
    proc = run_stage(
        "pytorch",
        "workflow_scripts.data.lmdb_caffe2",
        "--index",
        pipeline_run / "data" / "index",
        "--out",
        out,
        "--threads",
        "1",
    )
    assert (out / "manifest.json").is_file()
    assert not dead.exists() and not legacy.exists()
    assert f"removed {dead}" in proc.stderr and f"removed {legacy}" in proc.stderr and "which is gone" in proc.stderr
    assert live.exists() and elsewhere.exists(), "a partial of a live process or of another host was removed"


needs_mounts = pytest.mark.skipif(
    os.geteuid() != 0
    or not shutil.which("unshare")
    or subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode != 0,
    reason="needs root and unshare --mount to give a stage a small file system of its own",
)

CONVERTERS = {
    "tfrecord": ("tensorflow", "workflow_scripts.data.tfrecord"),
    "recordio": ("mxnet", "workflow_scripts.data.recordio"),
    "lmdb": ("pytorch", "workflow_scripts.data.lmdb_caffe2"),
}


@pytest.mark.stage
@needs_mounts
@pytest.mark.parametrize("fmt", CONVERTERS)
def test_full_disk_is_named_with_the_space_needed_and_keeps_the_good_output(quirky_converted, tmp_path, fmt):
    """On a 1.5 MB file system of its own: a small (resized) output fits; converting the JPEGs as
    they are is refused before writing (the space is known); resized to a size that does not fit,
    the write fails part-way. Each failure names the output and the space, and the good output stays."""
    env, module = CONVERTERS[fmt]
    mnt, out = tmp_path / "small-disk", tmp_path / "small-disk" / fmt
    mnt.mkdir()
    conv = [
        interpreter(env),
        "-m",
        module,
        "--index",
        str(quirky_converted / "index"),
        "--out",
        str(out),
        "--threads",
        "1",
    ]
    script = (
        f"mount -t tmpfs -o size=1536k tmpfs {mnt} || exit 99; cd {REPO}; "
        f"{' '.join(conv)} --resize-shorter 32 >{tmp_path}/ok.out 2>&1 || exit 98; "
        f"sha256sum {out}/* {out}/*/* 2>/dev/null >{tmp_path}/before; "
        f"{' '.join(conv)} >{tmp_path}/asis.out 2>&1; echo $? >{tmp_path}/asis.rc; "
        f"{' '.join(conv)} --resize-shorter 400 >{tmp_path}/big.out 2>&1; echo $? >{tmp_path}/big.rc; "
        f"sha256sum {out}/* {out}/*/* 2>/dev/null >{tmp_path}/after; ls -A {mnt} >{tmp_path}/left; "
        f"{' '.join(conv)} --delete-old=1 >{tmp_path}/first.out 2>&1; echo $? >{tmp_path}/first.rc; "
        f"ls -A {mnt} >{tmp_path}/left-first"
    )
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, (
        f"{proc.returncode}: {(tmp_path / 'ok.out').read_text() if (tmp_path / 'ok.out').exists() else proc.stderr}"
    )
    asis, big = (tmp_path / "asis.out").read_text(), (tmp_path / "big.out").read_text()
    assert (tmp_path / "asis.rc").read_text().strip() == "2" and "Traceback" not in asis, asis
    # A complete copy is there: refused before writing, naming the room the new one needs beside it
    assert f"{fmt} output {out}: no room for the new copy (about " in asis and "beside the complete one (" in asis
    assert "conversion.delete_old: true" in asis and "the complete earlier copy" in asis
    assert (tmp_path / "big.rc").read_text().strip() == "2" and "Traceback" not in big, big
    assert f"{fmt} output {out}: the disk filled after" in big and "MB free of 2 MB" in big
    # The good output is untouched and no scratch directory is left filling the disk.
    assert (tmp_path / "after").read_text() == (tmp_path / "before").read_text() != ""
    assert (tmp_path / "left").read_text().split() == [fmt]
    # Asked to (conversion.delete_old), the complete copy goes first; then the JPEGs as they are do
    # not fit the empty disk either, which is named as before, and nothing is left behind.
    first = (tmp_path / "first.out").read_text()
    assert (tmp_path / "first.rc").read_text().strip() == "2" and "deleting the complete earlier copy" in first
    assert f"{fmt} output {out}: not enough free space to write it; it needs about" in first
    assert "MB free of 2 MB" in first and "data_dir" in first
    assert (tmp_path / "left-first").read_text().split() == []


@pytest.mark.stage
@needs_mounts
def test_an_output_directory_on_a_read_only_mount_is_named_as_such(tmp_path):
    """data_dir on a file system mounted read-only (a bind mount, remounted ro, in a mount namespace
    of its own): refused when the workflow is parsed as read-only for everyone, not as "not writable
    by this user", which would send the user after permissions."""
    write_config(tmp_path, data_dir=str(tmp_path / "ro" / "data"))
    (tmp_path / "ro").mkdir()
    ro = tmp_path / "ro"
    cmd = " ".join(
        [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path), "-n", "--cores", "1"]
    )
    script = f"mount --bind {ro} {ro} && mount -o remount,bind,ro {ro} || exit 99; {cmd}"
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode not in (0, 99), out
    assert f"config data_dir = '{ro / 'data'}': {ro}: its file system" in out, out
    assert "is mounted read-only, so no user can write there" in out and "by this user" not in out, out


@pytest.mark.stage
def test_a_tab_indented_config_file_is_named_with_its_line(tmp_path):
    """A tab that indents a line of config.yaml: Snakemake's own message named neither file nor line."""
    write_config(tmp_path)
    lines = (tmp_path / "config.yaml").read_text().splitlines()
    n = next(i for i, ln in enumerate(lines) if ln.startswith("  ") and not ln.startswith("   "))
    lines[n] = "\t" + lines[n][2:]
    (tmp_path / "config.yaml").write_text("\n".join(lines) + "\n")
    proc = snakemake(tmp_path, "-n", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"{tmp_path / 'config.yaml'}, line {n + 1}, column 1: a tab indents this line" in out, out
    assert "replace the tab with spaces" in out, out


@pytest.mark.stage
def test_undefined_system_is_named(tmp_path):
    write_config(tmp_path, training__systems=["dgx"])
    proc = snakemake(tmp_path, "-n", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "KeyError" not in out
    assert "config training.systems names 'dgx', which is not defined under config systems (defined: local)" in out


@pytest.mark.stage
def test_a_second_config_file_overrides_nested_keys(tmp_path):
    """The README's way to override a nested key (--config cannot): its "Changing settings" block,
    run as written (the snakemake line only told where the workflow is and to plan, not run)."""
    write_config(tmp_path)
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Changing settings") :]
    block = section[section.index("```bash\n") + 8 : section.index("\n```", section.index("```bash"))]
    assert "\nsnakemake " in block
    script = block.replace("\nsnakemake ", f"\n{SNAKEMAKE} --snakefile {REPO / 'Snakefile'} --cores 2 ", 1)
    assert planned_jobs(tmp_path, "training")["train"] == 6
    proc = subprocess.run(
        ["bash", "-euc", script + " -n --quiet rules"], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    jobs = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", proc.stdout, re.M)}
    assert jobs["train"] == 1, proc.stdout
