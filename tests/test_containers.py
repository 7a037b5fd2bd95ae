"""Containers get what the launcher sets (issue 61, item 5): every variable the launcher sets goes
into a rank's container explicitly and the run records what the rank saw; data_dir and the real
places of its links are bound; a registry image is refused when the workflow is parsed; the pyxis
route (srun --container-image) gets the same.

No container runtime installs on this machine (`apt-cache policy apptainer singularity-container`:
no candidate; enroot and pyxis are not packaged in Debian 12), so none runs here. Where a rank must
start in a container, the runtime is a stand-in script named `apptainer` that does what Apptainer's
user guide says its exec does with the environment ("Environment Variable Precedence"): the host's
variables, then the image's own over them, then APPTAINERENV_<NAME> and --env over those, then the
image's later environment scripts; and a path not bound is not there (a tmpfs over it, in a mount
namespace of its own). The launcher, the rank's record, preflight's data check and the trainer
are the real ones, run by a real Python as the container's python."""

import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest
from helpers import REPO, TRAINERS, interpreter, snakemake, trainer_command, trainer_flags, write_config

from workflow_scripts.cluster import container_env, launcher
from workflow_scripts.cluster import interpreter as interpreter_words
from workflow_scripts.preflight import owners

STAND_IN = '''#!{python}
"""A stand-in for `apptainer exec [options] IMAGE PROGRAM ARGS...`: the environment as Apptainer
builds it, the image's described by the JSON file IMAGE."""
import json, os, sys

args = sys.argv[1:]
assert args[0] == "exec", args
i, binds, given = 1, [], {{}}
while args[i].startswith("-"):
    if args[i].startswith("--bind="):
        binds.append(args[i].split("=", 1)[1].split(":")[0])
    elif args[i].startswith("--env="):
        name, _, value = args[i].split("=", 1)[1].partition("=")
        given[name] = value
    i += 1
image = json.load(open(args[i]))
env = dict(os.environ)
env.update(image.get("environment", {{}}))  # a host variable does not override the image's
env.update({{k[len("APPTAINERENV_"):]: v for k, v in os.environ.items() if k.startswith("APPTAINERENV_")}})
env.update(given)
env.update(image.get("after", {{}}))  # the image's own scripts, sourced last
program = args[i + 1 :]
hidden = [p for p in image.get("hidden", []) if not any(p == b or p.startswith(b + "/") for b in binds)]
if hidden:
    mounts = " && ".join(f"mount -t tmpfs none {{p}}" for p in hidden)
    program = ["unshare", "-m", "sh", "-c", mounts + ' && exec "$@"', "sh", *program]
os.execvpe(program[0], program, env)
'''


def stand_in(tmp_path, **image):
    """The stand-in runtime (bin/apptainer) and an image described by `image`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    runtime = bin_dir / "apptainer"
    runtime.write_text(STAND_IN.format(python=sys.executable))
    runtime.chmod(0o755)
    sif = tmp_path / "image.sif"
    sif.write_text(json.dumps(image))
    return runtime, sif


# What an NGC image might set of the launcher's variables: NCCL's, and a CUDA cache of its own.
IMAGE_ENV = {"NCCL_IB_DISABLE": "0", "CUDA_CACHE_PATH": "/image/cache", "CUDA_CACHE_MAXSIZE": "1024"}
SEEN = (
    "import json, os; from workflow_scripts.cluster import container_env, rank_env; rank_env.detect(); "
    "names = ('NCCL_IB_DISABLE', 'CUDA_CACHE_PATH', 'CUDA_CACHE_MAXSIZE', 'RANK', 'MASTER_PORT'); "
    "open('seen.' + os.environ['RANK'] + '.json', 'w').write(json.dumps("
    "{'record': container_env.record(), 'env': {k: os.environ.get(k) for k in names}}))"
)


def launch_in(tmp_path, runtime, sif, program, ranks=2):
    """The real launcher: `ranks` local ranks of `program` in the stand-in container."""
    words = [str(runtime), "exec", "--nv", f"--bind={REPO}", f"--env=PYTHONPATH={REPO}", str(sif), *program]
    return subprocess.run(
        [sys.executable, "-m", "workflow_scripts.cluster.launcher", f"--nproc-per-node={ranks}", "--launcher=local"]
        + ["--env", "NCCL_IB_DISABLE=1", f"--cuda-cache-dir={tmp_path / 'jit'}", "--", *words],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.stage
def test_the_ranks_in_a_container_see_what_the_launcher_set_over_the_images_values(tmp_path):
    runtime, sif = stand_in(tmp_path, environment={**IMAGE_ENV, "RANK": "7"})
    proc = launch_in(tmp_path, runtime, sif, [sys.executable, "-c", SEEN])
    assert proc.returncode == 0, proc.stderr
    for rank in ("0", "1"):
        seen = json.loads((tmp_path / f"seen.{rank}.json").read_text())
        env, record = seen["env"], seen["record"]
        assert env["NCCL_IB_DISABLE"] == "1" and env["CUDA_CACHE_MAXSIZE"] == str(4 * 2**30), env
        assert env["CUDA_CACHE_PATH"].startswith(str(tmp_path / "jit")) and env["RANK"] == rank, env
        assert record["container"] == str(sif) and record["differs"] == {}, record
        assert {"NCCL_IB_DISABLE", "CUDA_CACHE_PATH", "RANK", "MASTER_PORT"} <= set(record["asked"]), record


@pytest.mark.stage
def test_a_rank_names_each_variable_the_image_still_changed(tmp_path):
    # an image's environment script, sourced after the runtime's injection, can still set one
    runtime, sif = stand_in(tmp_path, environment=IMAGE_ENV, after={"NCCL_IB_DISABLE": "0"})
    proc = launch_in(tmp_path, runtime, sif, [sys.executable, "-c", SEEN])
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "seen.0.json").read_text())["record"]
    assert record["differs"] == {"NCCL_IB_DISABLE": {"asked": "1", "saw": "0"}}, record
    assert f"container {sif}: the rank does not see what the launcher set: NCCL_IB_DISABLE (asked '1', saw '0')" in (
        proc.stderr
    )


@pytest.mark.stage
def test_a_training_run_in_a_container_records_what_its_ranks_saw(tmp_path):
    runtime, sif = stand_in(tmp_path, environment=IMAGE_ENV)
    out = tmp_path / "run"
    trainer = trainer_command(data_source="synthetic", batch_per_gpu=4, out=out)
    proc = launch_in(tmp_path, runtime, sif, trainer)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["container_env"]["container"] == str(sif) and summary["container_env"]["differs"] == {}
    assert summary["nccl_env"]["NCCL_IB_DISABLE"] == "1", summary["nccl_env"]
    rank1 = json.loads((out / "rank1.json").read_text())
    assert "NCCL_IB_DISABLE" in rank1["container_env"]["asked"] and rank1["container_env"]["differs"] == {}


@pytest.mark.unit
def test_a_run_on_the_host_is_given_and_records_nothing_more(tmp_path):
    env = {"PATH": "/usr/bin", "NCCL_IB_DISABLE": "1"}
    assert container_env.passed([sys.executable, "-m", "x"], env, {}) is env
    assert container_env.remember({"PATH": "/usr/bin"}) is None and container_env.record() is None


@pytest.mark.stage
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="hiding a path needs a mount namespace")
def test_preflight_says_not_bound_where_the_container_cannot_see_the_data(tmp_path):
    data = tmp_path / "data" / "lmdb"
    data.mkdir(parents=True)
    (data / "manifest.json").write_text(json.dumps({"format": "lmdb", "files": {}}))
    runtime, sif = stand_in(tmp_path, hidden=[str(tmp_path / "data")])
    python = [str(runtime), "exec", f"--bind={REPO}", f"--env=PYTHONPATH={REPO}", str(sif), sys.executable]
    status, _, cause, fix = owners.dataset_check(data, "quick", python)
    assert status == "failed" and cause.startswith(f"not bound: {data / 'manifest.json'} is not visible"), cause
    assert str(sif) in cause and "--forcerun" not in fix and str(data) in fix, fix
    bound = [*python[:2], f"--bind={tmp_path / 'data'}", *python[2:]]
    assert owners.dataset_check(data, "quick", bound)[0] == "ok"


GPU_SYSTEM = {"gpu": {"gpus_per_node": 2, "max_nodes": 1, "gpu_request": "gpus-per-node", "cpus_per_task": 1}}


def container_config(tmp_path, value, **more):
    write_config(
        tmp_path,
        systems=GPU_SYSTEM,
        training__systems=["gpu"],
        training__frameworks=["mxnet"],
        training__gpus=[2],
        inference__models={"resnet50": "torchvision"},
        envs_gpu={"mxnet": value},
        **more,
    )


@pytest.mark.stage
@pytest.mark.parametrize(
    "value, fix",
    [
        ({"container": "docker://nvcr.io/nvidia/mxnet:24.06-py3"}, "apptainer build /shared/containers/<name>.sif"),
        ({"container": "nvcr.io#nvidia/mxnet:24.06-py3", "runtime": "pyxis"}, "enroot import -o"),
    ],
)
def test_a_registry_image_is_refused_when_the_workflow_is_parsed(tmp_path, value, fix):
    container_config(tmp_path, value)
    proc = snakemake(tmp_path, "-n", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and f"config envs_gpu.mxnet.container: {value['container']} is a registry" in out
    assert fix in out and "every task would" in out, out[-2000:]


@pytest.mark.stage
def test_data_dir_and_the_real_places_of_its_links_are_bound(tmp_path):
    image = tmp_path / "mxnet.sif"
    image.write_bytes(b"the dry run only checks that it exists")
    lustre = tmp_path / "lustre" / "recordio"
    lustre.mkdir(parents=True)
    data = tmp_path / "scratch-data"
    data.mkdir()
    (data / "recordio").symlink_to(lustre)
    (tmp_path / "data").symlink_to(data)  # data_dir itself a link
    container_config(tmp_path, {"container": str(image)}, data_dir="data")
    out = snakemake(tmp_path, "-n", "-p", "training").stdout
    line = next(ln for ln in out.splitlines() if "--python=" in ln and str(image) in ln)
    python = shlex.split(shlex.split(line.split("--python=", 1)[1])[0])
    assert f"--bind={data}" in python and f"--bind={lustre}" in python, python
    assert python.index(f"--bind={data}") < python.index(str(image))


@pytest.mark.unit
def test_pyxis_words_mount_what_apptainer_binds_and_the_working_directory(tmp_path):
    value = {"container": "/shared/mxnet.sqsh", "runtime": "pyxis", "bind": ["/scratch/imagenet"]}
    words = interpreter_words.words(value, REPO, extras=[], cwd=tmp_path)
    assert words[:4] == ["srun", "--nodes=1", "--ntasks=1", "--overlap"] and "--nv" not in words
    assert "--container-image=/shared/mxnet.sqsh" in words and f"--container-workdir={tmp_path}" in words
    assert f"--container-mounts={REPO}:{REPO},{tmp_path}:{tmp_path},/scratch/imagenet:/scratch/imagenet" in words
    assert words[-3:] == ["env", f"PYTHONPATH={REPO}", "python3"]


@pytest.mark.unit
def test_the_launcher_folds_a_pyxis_container_into_its_srun_line(tmp_path):
    """The real launcher's srun line for two nodes of a pyxis interpreter (the srun that would run it
    is not: pyxis is not installed here): the container's options on srun's own line, not an srun
    inside srun, and every variable the launcher set named in --container-env, which pyxis needs to
    let the host's value win over the image's."""
    value = {"container": "/shared/mxnet.sqsh", "runtime": "pyxis"}
    words = interpreter_words.words(value, REPO, extras=[], cwd=tmp_path)
    cmd = [*words, "-m", TRAINERS["mxnet"], *trainer_flags()]
    env = container_env.passed(cmd, {"PATH": "/usr/bin", "NCCL_IB_DISABLE": "1", "HOROVOD_CONTROLLER": "gloo"}, {})
    line = container_env.srun_line(launcher.srun_command(2, 4, 8), cmd, env)
    assert line.count("srun") == 1 and line[:4] == ["srun", "--nodes=2", "--ntasks=8", "--ntasks-per-node=4"]
    names = next(w for w in line if w.startswith("--container-env=")).split("=", 1)[1].split(",")
    assert {"NCCL_IB_DISABLE", "HOROVOD_CONTROLLER", "PATH", container_env.ASKED} <= set(names)
    assert "--container-image=/shared/mxnet.sqsh" in line and "--overlap" not in line
    assert line[line.index("env") :][:4] == ["env", f"PYTHONPATH={REPO}", "python3", "-m"]


@pytest.mark.stage
def test_a_pyxis_container_outside_an_allocation_is_refused_by_the_launcher(tmp_path):
    words = interpreter_words.words({"container": "/shared/x.sqsh", "runtime": "pyxis"}, REPO, extras=[], cwd=tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    proc = subprocess.run(
        [interpreter("workflow"), "-m", "workflow_scripts.cluster.launcher", "--", *words, "-c", "pass"],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "a pyxis container (config runtime: pyxis) starts only through srun" in proc.stderr
