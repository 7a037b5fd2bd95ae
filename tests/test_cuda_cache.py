"""The CUDA JIT cache of the ranks (issue 27, item 4): the launcher gives every rank of a training
run and of the interconnect stage CUDA_CACHE_PATH (per GPU architecture and build, under
training.cuda_cache_dir) and CUDA_CACHE_MAXSIZE = 4 GiB; a user's own values win."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from helpers import REPO, TRAINERS, snakemake, trainer_flags, write_config

TRAINER = TRAINERS["pytorch"]

WRITE_ENV = (
    "import json, os; open('env.' + os.environ['RANK'] + '.json', 'w').write(json.dumps("
    "{k: os.environ.get(k) for k in ('RANK', 'CUDA_CACHE_PATH', 'CUDA_CACHE_MAXSIZE')}))"
)


def run_launcher(tmp_path, flags, program, env=None):
    """The real launcher with `flags`, two local ranks of `program` (argv), in tmp_path."""
    proc = subprocess.run(
        [sys.executable, "-m", "workflow_scripts.cluster.launcher", "--nproc-per-node=2", "--launcher=local", *flags]
        + ["--", *program],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr


def launch_ranks(tmp_path, *flags, **env):
    """Two local ranks of a tiny program that writes down what it was given."""
    run_launcher(tmp_path, flags, [sys.executable, "-c", WRITE_ENV], env)
    ranks = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("env.*.json"))]
    assert [r["RANK"] for r in ranks] == ["0", "1"]
    return ranks


def arch_dir():
    """What the launcher names this node's architecture: nvidia-smi's compute capabilities."""
    if not shutil.which("nvidia-smi"):
        return "any-arch"
    caps = subprocess.run(
        ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True, text=True
    ).stdout.split()
    return "+".join(sorted({"sm_" + c.replace(".", "") for c in caps}))


@pytest.mark.stage
def test_every_rank_gets_a_cache_per_architecture_and_build_under_the_configured_directory(tmp_path):
    ranks = launch_ranks(tmp_path, f"--cuda-cache-dir={tmp_path / 'jit cache'}")
    paths = {r["CUDA_CACHE_PATH"] for r in ranks}
    assert len(paths) == 1, paths
    path = paths.pop()
    parts = os.path.relpath(path, tmp_path / "jit cache").split(os.sep)
    from workflow_scripts.cluster.cuda_cache import build_key

    assert parts == [arch_dir(), build_key([sys.executable])], path
    assert os.path.isdir(path)
    assert {r["CUDA_CACHE_MAXSIZE"] for r in ranks} == {"4294967296"}


@pytest.mark.stage
def test_without_a_directory_the_users_cache_dir_is_used_not_nv(tmp_path):
    ranks = launch_ranks(tmp_path, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    path = ranks[0]["CUDA_CACHE_PATH"]
    assert path.startswith(str(tmp_path / "xdg" / "dlscale" / "cuda-jit") + os.sep) and ".nv" not in path


@pytest.mark.stage
def test_a_users_own_cache_settings_win(tmp_path):
    mine = str(tmp_path / "my-cache")
    ranks = launch_ranks(
        tmp_path, f"--cuda-cache-dir={tmp_path / 'jit'}", CUDA_CACHE_PATH=mine, CUDA_CACHE_MAXSIZE="1073741824"
    )
    assert {(r["CUDA_CACHE_PATH"], r["CUDA_CACHE_MAXSIZE"]) for r in ranks} == {(mine, "1073741824")}
    assert not (tmp_path / "jit").exists()


@pytest.mark.unit
def test_builds_get_their_own_directories():
    from workflow_scripts.cluster.cuda_cache import build_key

    tf = build_key(["/c/.envs/tensorflow-gpu/bin/python", "-m", "workflow_scripts.train.tensorflow_horovod"])
    mx = build_key(["/c/.envs/mxnet-gpu/bin/python", "-m", "workflow_scripts.train.mxnet_horovod"])
    image = build_key(["apptainer", "exec", "--nv", "/shared/mxnet-24.04.sif", "python", "-m", "x"])
    assert tf.startswith("tensorflow-gpu-") and mx.startswith("mxnet-gpu-") and image.startswith("mxnet-24.04-")
    assert len({tf, mx, image}) == 3
    # a program's own arguments before '-m' (python -c CODE ...) do not name the build
    assert build_key(["/c/.envs/torch/bin/python", "-c", "print(1)", "-m", "x"]).startswith("torch-")


@pytest.mark.stage
def test_the_workflow_passes_the_configured_directory_to_training_and_interconnect(tmp_path):
    jit = tmp_path / "jit $(dir)"  # a shell would run it; config expands only $NAME and ${NAME}
    write_config(tmp_path, training__cuda_cache_dir=str(jit))
    out = snakemake(tmp_path, "-n", "-p", "training", "interconnect").stdout
    lines = [ln for ln in out.splitlines() if "--cuda-cache-dir=" in ln]
    assert any("workflow_scripts.train.training_job" in ln for ln in lines), out[-3000:]
    assert any("workflow_scripts.interconnect" in ln for ln in lines), out[-3000:]
    assert all(f"--cuda-cache-dir='{jit}'" in ln for ln in lines), lines


@pytest.mark.stage
def test_container_definition_sets_the_cache_without_overriding_the_launchers():
    text = (REPO / "envs" / "containers" / "dlscale-gpu.def").read_text()
    env = text.split("%environment", 1)[1]
    assert 'CUDA_CACHE_MAXSIZE="${CUDA_CACHE_MAXSIZE:-4294967296}"' in env
    assert 'CUDA_CACHE_PATH="${CUDA_CACHE_PATH:-' in env
    # the %environment section as the container's shell reads it
    proc = subprocess.run(
        ["sh", "-c", env + '\necho "$CUDA_CACHE_PATH|$CUDA_CACHE_MAXSIZE"'],
        env={"HOME": "/home/u", "CUDA_CACHE_PATH": "/from/launcher", "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
    )
    assert proc.stdout.strip() == "/from/launcher|4294967296", proc
    proc = subprocess.run(
        ["sh", "-c", env + '\necho "$CUDA_CACHE_PATH"'],
        env={"HOME": "/home/u", "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
    )
    assert proc.stdout.strip().startswith("/home/u/.cache/dlscale/cuda-jit/"), proc


@pytest.mark.stage
@pytest.mark.parametrize("warmup", [0, 1])
def test_summary_says_whether_the_first_steps_start_up_is_timed(tmp_path, warmup, monkeypatch):
    """TensorFlow's kernels for an A100/H100 are JIT-compiled at their first use, in the first step:
    a warm-up step keeps that out of images/s; with training.warmup_steps 0 the summary says so."""
    from workflow_scripts.train import harness, loop

    for k in ("RANK", "WORLD_SIZE", "SLURM_PROCID"):
        monkeypatch.delenv(k, raising=False)
    args = harness.arg_parser("t").parse_args(
        trainer_flags(image_size=None, data_source="synthetic", batch_per_gpu=1, warmup_steps=warmup, out=tmp_path)
    )
    run = harness.Run(args, "pytorch", {})

    class Steps(loop.Adapter):  # the loop's own timing, with steps that do nothing
        def next_batch(self):
            return None

        def launch(self, batch, step):
            return lambda: (1.0, None)

        def digest(self):
            return "digest"

    loop.Loop(run, Steps()).short_test(0)
    summary = run.finish()
    assert summary["first_step_timed"] is (warmup == 0) and summary["first_kernel"] is None
    assert summary["warmup_steps"] == warmup and summary["timed_steps"] == 2


@pytest.mark.stage
def test_the_cache_directory_is_bound_into_a_container(tmp_path):
    """A rank in an Apptainer container: the cache directory (here outside $HOME and the repository)
    is bound into it, so that CUDA_CACHE_PATH exists inside; the runtime here is a stand-in script
    that writes down the words it was started with (no container runtime installs on this machine)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    runtime = bin_dir / "apptainer"
    runtime.write_text(
        f'#!/bin/sh\n{sys.executable} -c "import json, os, sys; '
        "open('argv.' + os.environ['RANK'] + '.json', 'w').write(json.dumps(sys.argv[1:]))\" \"$@\"\n"
    )
    runtime.chmod(0o755)
    cache = tmp_path / "scratch" / "cuda-jit"
    program = [str(runtime), "exec", "--nv", f"--bind={REPO}", "image.sif", "python3", "-m", TRAINER]
    run_launcher(tmp_path, [f"--cuda-cache-dir={cache}"], program)
    for rank in (0, 1):
        argv = json.loads((tmp_path / f"argv.{rank}.json").read_text())
        binds = [w.removeprefix("--bind=") for w in argv if w.startswith("--bind=")]
        assert argv[0] == "exec" and any(b.startswith(str(cache)) for b in binds), argv
        assert argv[argv.index("image.sif") + 1 :] == ["python3", "-m", TRAINER]


@pytest.mark.stage
def test_preflight_passes_the_cache_directory_to_its_ranks(tmp_path):
    write_config(tmp_path, training__cuda_cache_dir=str(tmp_path / "jit"))
    out = snakemake(tmp_path, "-n", "-p", "preflight").stdout
    lines = [ln for ln in out.splitlines() if "workflow_scripts.preflight.preflight_job" in ln]
    assert lines and all(f"--cuda-cache-dir={tmp_path / 'jit'}" in ln for ln in lines), lines
