import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())
# The embedded default's long test: training.accuracy.gpus auto is [2] there (none on a real dataset).
LONG_TEST_GPUS = [2] if CONFIG["training"]["accuracy"]["gpus"] == "auto" else CONFIG["training"]["accuracy"]["gpus"]

# The suite runs more processes than there are cores (its workers; the SLURM test's two nodes share
# this machine's), so an OpenMP thread (PyTorch's, MXNet's) that spins while it waits for work takes
# a core another process needs. Passive waiting changes no result, only who gets the cores.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Likewise Horovod's background thread, which wakes every HOROVOD_CYCLE_TIME ms (its default: 1) to
# look for tensors to all-reduce: beside the ranks' compute on shared cores, waking less often leaves
# the cores to the compute. Each all-reduce then waits at most the longer cycle: the same results.
os.environ.setdefault("HOROVOD_CYCLE_TIME", "10")


def interpreter(env):
    exe = REPO / CONFIG["envs"][env]
    if not exe.exists():
        pytest.fail(f"{exe} missing: run 'bash envs/setup.sh' first (the README's test command does)")
    return str(exe)


def run_stage(env, module, *args, check=True, timeout=600):
    """Run a stage module with its environment's interpreter, as the rules do."""
    proc = subprocess.run(
        [interpreter(env), "-m", module, *map(str, args)], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{module} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def run_reader(env, script, *args, python=None, environ=None, timeout=600):
    """Run one of tests/readers/ in a framework's environment (or the interpreter `python`, with
    the environment variables `environ`); it prints JSON."""
    proc = subprocess.run(
        [python or interpreter(env), str(REPO / "tests" / "readers" / script), *map(str, args)],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def tree_hashes(path):
    path = Path(path)
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="session")
def quirky_tree(tmp_path_factory):
    """A small raw-layout tree with CMYK, PNG-as-JPEG, grayscale, truncated, empty and
    non-image files (flat val/ with TF's synset label list)."""
    from workflow_scripts.data import embedded

    root = tmp_path_factory.mktemp("quirky") / "ILSVRC2012"
    embedded.make(root, seed=7, broken=True, **QUIRKY)
    return root


def embedded_lmdb(work, **sizes):
    """An embedded tree (embedded.make's `sizes`: classes, train_per_class, ...) in `work`, through
    the index stage into the Caffe2 LMDB (`work`/lmdb, its index beside it)."""
    from workflow_scripts.data import embedded

    embedded.make(work / "ILSVRC2012", **sizes)
    run_stage(
        "workflow",
        "workflow_scripts.data.index",
        "--root",
        work / "ILSVRC2012",
        "--out",
        work / "index",
        "--threads",
        "2",
    )
    run_stage(
        "pytorch",
        "workflow_scripts.data.lmdb_caffe2",
        "--index",
        work / "index",
        "--out",
        work / "lmdb",
        "--threads",
        "2",
    )
    return work / "lmdb"


@pytest.fixture(scope="session")
def small_lmdb(tmp_path_factory):
    """A 5-class embedded tree (6 train, 2 val images a class) in the Caffe2 LMDB: what the PyTorch
    input paths read."""
    return embedded_lmdb(tmp_path_factory.mktemp("small_lmdb"), classes=5, train_per_class=6, val_per_class=2, seed=11)


@pytest.fixture(scope="session")
def quirky_converted(quirky_tree, tmp_path_factory):
    """The quirky tree through the index stage and all three converters."""
    out = tmp_path_factory.mktemp("converted")
    run_stage(
        "workflow",
        "workflow_scripts.data.index",
        "--root",
        quirky_tree,
        "--out",
        out / "index",
        "--max-reject-fraction",
        "0.2",
        "--threads",
        "2",
    )
    run_stage(
        "tensorflow",
        "workflow_scripts.data.tfrecord",
        "--index",
        out / "index",
        "--out",
        out / "tfrecord",
        "--train-shards",
        "3",
        "--val-shards",
        "2",
        "--threads",
        "2",
    )
    run_stage("mxnet", "workflow_scripts.data.recordio", "--index", out / "index", "--out", out / "recordio")
    run_stage("pytorch", "workflow_scripts.data.lmdb_caffe2", "--index", out / "index", "--out", out / "lmdb")
    return out


QUIRKY = dict(classes=5, train_per_class=6, val_per_class=4)


def source_catalog(root):
    """{split: {file name: facts}} for every decodable image of the quirky tree, worked out from
    the tree itself (folders, label file, the generator's naming), not from the index stage."""
    from PIL import Image

    root = Path(root)
    synsets = sorted(p.name for p in (root / "train").iterdir())
    label = {w: i for i, w in enumerate(synsets)}
    val_labels = (root / "imagenet_2012_validation_synset_labels.txt").read_text().split()
    n_val = QUIRKY["classes"] * QUIRKY["val_per_class"]  # broken val files are numbered after these
    files = {
        "train": [(p, label[p.parent.name]) for p in (root / "train").rglob("*.JPEG") if "broken" not in p.name],
        "val": [
            (p, label[val_labels[n - 1]])
            for p in (root / "val").glob("*.JPEG")
            if (n := int(p.stem.rsplit("_", 1)[1])) <= n_val
        ],
    }
    out = {}
    for split, items in files.items():
        out[split] = {}
        for p, lab in items:
            im = Image.open(p)
            out[split][p.name] = {
                "label": lab,
                "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
                "rgb_jpeg": im.format == "JPEG" and im.mode == "RGB",
                "size": list(im.size),
            }
    return out


SNAKEMAKE = str(REPO / ".venv" / "bin" / "snakemake")


def with_overrides(config, **overrides):
    cfg = yaml.safe_load(yaml.safe_dump(config))
    for dotted, value in overrides.items():
        node = cfg
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return cfg


def validated(config):
    """`config` with the schema's defaults filled in, as Snakemake's validate() leaves it when the
    workflow is parsed (for tests of the plan's modules, which run without Snakemake)."""
    import jsonschema

    def set_defaults(validator, properties, instance, schema):
        for key, sub in properties.items():
            if isinstance(instance, dict) and "default" in sub:
                instance.setdefault(key, sub["default"])
        yield from jsonschema.Draft7Validator.VALIDATORS["properties"](validator, properties, instance, schema)

    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    jsonschema.validators.extend(jsonschema.Draft7Validator, {"properties": set_defaults})(schema).validate(config)
    return config


# Every test's config: runs evict their dataset only (training.cache_clear: dataset). Dropping the whole
# page cache before each run would make every parallel worker read its frameworks' libraries from disk
# again; the node-wide clear is tested by tests/test_training.py and test_preflight.py.
SUITE = {"training__cache_clear": "dataset"}


def write_config(workdir, **overrides):
    """config.yaml with SUITE and `overrides` ({"a__b": value} sets a.b) in `workdir`, the envs made
    absolute."""
    cfg = with_overrides(CONFIG, **{**SUITE, **overrides})
    cfg["envs"] = {env: interpreter(env) for env in cfg["envs"]}
    (workdir / "config.yaml").write_text(yaml.safe_dump(cfg))


def snakemake(workdir, *args, check=True):
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
    copy of it changes only what the test names."""
    write_config(workdir, **{**PIPELINE, **overrides})


@pytest.fixture(scope="session")
def pipeline_run(tmp_path_factory):
    """The quick start's `snakemake all` (at PIPELINE's sizes) in a scratch working directory."""
    work = tmp_path_factory.mktemp("pipeline")
    pipeline_config(work)
    snakemake(work)
    return work


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


# pytest-xdist (pyproject.toml: -n auto --dist loadgroup) runs a group's tests on one worker, in order.
# The tests that read pipeline_run share one run; the SLURM tests share one cluster (fixed ports
# and /etc/slurm); every other test goes with its module, whose module-scoped fixtures run once.
# The two long groups are handed out first (--no-loadscope-reorder keeps this order).
GROUPS = {"pipeline_run": "pipeline", "cluster": "slurm", "bound_cluster": "slurm"}
FIRST = ("pipeline", "slurm")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks
def pytest_collection_modifyitems(items):
    group = {}
    for item in items:
        group[item] = next((g for f, g in GROUPS.items() if f in item.fixturenames), item.module.__name__)
        item.add_marker(pytest.mark.xdist_group(group[item]))
    items.sort(key=lambda item: FIRST.index(group[item]) if group[item] in FIRST else len(FIRST))


def pytest_xdist_auto_num_workers(config):
    """-n auto: two workers more than the cores. The SLURM group spends most of its time waiting for
    the scheduler, and the workers below the long groups' priority fill the cores those leave idle."""
    return (os.cpu_count() or 1) + 2


# The pipeline group is the suite's longest chain (the quick start's run, then the tests that read it)
# and the SLURM group's jobs run while it waits: a worker whose first test belongs to neither runs
# at a lower priority (os.nice, inherited by what it starts), so it takes the cores those leave
# idle instead of stretching them. Without workers (-p no:xdist) nothing changes.
YIELD = 5
_priority_set = False


def pytest_runtest_setup(item):
    global _priority_set
    if _priority_set or not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    _priority_set = True
    if item.get_closest_marker("xdist_group").args[0] not in FIRST:
        os.nice(YIELD)


sys.path.insert(0, str(REPO))
