"""Snakemake on a scratch working directory: its config, a run or a dry run, the jobs a dry run
plans, and working copies of a finished run."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import yaml

from .config import CONFIG, REPO, with_overrides
from .processes import bare_interpreter, interpreter

SNAKEMAKE = str(REPO / ".venv" / "bin" / "snakemake")

# Every test's config: runs evict their dataset only (training.cache_clear: dataset). Dropping the whole
# page cache before each run would make every parallel worker read its frameworks' libraries from disk
# again; the node-wide clear is tested by tests/test_training.py and test_preflight.py.
# training.allow_embedded_settings: the suite's real-dataset trees train at the embedded default's
# small settings on purpose (the refusal itself: tests/test_config_checks.py)
SUITE = {"training__cache_clear": "dataset", "training__allow_embedded_settings": True}


def write_config(workdir, bare=False, **overrides):
    """config.yaml with SUITE and `overrides` ({"a__b": value} sets a.b) in `workdir`, the envs made
    absolute (bare: interpreters without this project installed, processes.bare_interpreter)."""
    cfg = with_overrides(CONFIG, **{**SUITE, **overrides})
    cfg["envs"] = {env: (bare_interpreter if bare else interpreter)(env) for env in cfg["envs"]}
    (workdir / "config.yaml").write_text(yaml.safe_dump(cfg))


def without_slurm(workdir):
    """An environment whose PATH holds no SLURM tools, for a plan that must ask no cluster: the
    suite's own SLURM cluster may be up beside it (/etc/slurm, fixed ports), and sinfo would then
    answer with the test cluster's partitions."""
    tools = Path(workdir) / "bin-without-slurm"
    tools.mkdir(exist_ok=True)
    for tool in ("which", "sh", "bash", "git", "nproc"):
        if shutil.which(tool) and not (tools / tool).exists():
            (tools / tool).symlink_to(shutil.which(tool))
    return dict(os.environ, PATH=f"{Path(SNAKEMAKE).parent}:{tools}")


def snakemake(workdir, *args, check=True, env=None):
    proc = subprocess.run(
        [
            SNAKEMAKE,
            "--snakefile",
            str(REPO / "Snakefile"),
            "--directory",
            str(workdir),
            "--cores",
            "2",
            *map(str, args),
        ],
        capture_output=True,
        text=True,
        timeout=3600,
        env=env,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def planned_jobs(workdir, target="all", *args):
    """{rule: job count} a dry run for `target` would execute."""
    out = snakemake(workdir, target, "-n", "--quiet", "rules", *args).stdout
    jobs = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", out, re.M)}
    return {rule: n for rule, n in jobs.items() if rule not in ("total", "all", "data", "training")}


# pipeline_run's config: the embedded default (its dataset, every stage, every run of the sweep, the
# long test) with 6 timed steps a run instead of 20: the count proves nothing a test checks. (Smaller
# images would prove nothing either, but 48 px left the INT8 stage's 8-step ResNet-50 below twice chance,
# and 32 px kept the long test from learning.) The default itself is planned by test_pipeline.py.
PIPELINE = {"training__steps": 6}
PIPELINE_CONFIG = with_overrides(CONFIG, **SUITE, **PIPELINE)


def pipeline_config(workdir, **overrides):
    """Write pipeline_run's config (PIPELINE) with `overrides` to `workdir`: an edit of the run or of a
    copy of it changes only what the test names. Its interpreters are bare ones, as a cluster's module
    or image has them: every job finds the stage modules from the workflow's folder."""
    write_config(workdir, bare=True, **{**PIPELINE, **overrides})


# Written only by the data and training stages, which a copy's reruns never reach: shared with the copy.
SHARED_WITH_COPIES = ("data", "results/runs")


def copy_of_run(run, dest, leave_out=()):
    """A working copy of a finished pipeline directory (`run`, e.g. pipeline_run) at `dest`, for a
    test that reruns later stages without repeating the dataset and training jobs. The converted
    data and the training runs are hard links (Snakemake deletes a job's outputs before it runs, so
    a rerun never writes through a link, and a test that regenerates `run`'s data replaces, not
    rewrites, the files); logs, benchmarks, tables, Snakemake's metadata and config are copied with
    their times, so the copy is as up to date as `run`. A `--touch` of `run` also moves the shared
    files' times: use a copy in the module that makes it (pytest runs modules one after another).
    Paths matching `leave_out` (glob patterns relative to `run`) are not copied: their jobs run
    again in the copy."""
    run, dest = Path(run), Path(dest)
    skip = {path for pattern in leave_out for path in run.glob(pattern)}
    shared = {run / p for p in SHARED_WITH_COPIES}

    def walk(src, dst):
        dst.mkdir(parents=True, exist_ok=True)
        for item in src.iterdir():
            if item in skip:
                continue
            target = dst / item.name
            if item in shared:
                shutil.copytree(item, target, symlinks=True, copy_function=os.link)
            elif item.is_dir() and not item.is_symlink():
                walk(item, target)
                shutil.copystat(item, target)
            else:
                shutil.copy2(item, target, follow_symlinks=False)

    walk(run, dest)
    return dest
