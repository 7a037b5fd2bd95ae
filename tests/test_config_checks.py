"""The parse-time checks (workflow_scripts/plan/config_checks.py, cluster_checks.py) as plain
Python: what each refuses, naming the key, and what it lets through. No Snakemake or SLURM runs
here; tests/test_slurm.py and tests/test_faults.py see the same messages through the workflow."""

import json
import os

import pytest
import yaml
from helpers import CONFIG, REPO, validated, with_overrides

from workflow_scripts.cluster import interpreter
from workflow_scripts.plan import cluster_checks, config_checks
from workflow_scripts.plan.sweep import ConfigProblem, Sweep

pytestmark = pytest.mark.unit

GPU = {"gpus_per_node": 4, "max_nodes": 2, "gpu_request": "gpus-per-node", "cpus_per_task": 8}


def config(**overrides):
    return validated(with_overrides(CONFIG, **overrides))


@pytest.mark.parametrize(
    "value, file_pattern, says",
    [
        ("a\nb", False, "control character"),
        ("data/{x}", True, "wildcards"),
        ("it's", True, "quotes and backslashes"),
        ("-data", False, "write ./-data"),
    ],
)
def test_a_path_no_job_can_carry_is_refused_naming_the_key(value, file_pattern, says):
    with pytest.raises(ConfigProblem, match=f"config data_dir = .*{says}"):
        config_checks.check_path("data_dir", value, file_pattern)


def test_paths_a_job_can_carry_pass():
    for value in ("data", "/abs/path with space", "it's"):  # a quote is fine where no file pattern is tracked
        config_checks.check_path("dataset.root", value)


def test_an_output_directory_under_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigProblem, match="results_dir = .*exists and is not a directory"):
        config_checks.check_writable("results_dir", str(tmp_path / "file" / "results"))
    config_checks.check_writable("results_dir", str(tmp_path / "new" / "results"))


def test_a_training_system_that_is_not_defined_is_named():
    with pytest.raises(ConfigProblem, match="training.systems names 'nowhere'.*defined: local"):
        config_checks.check_config(config(training__systems=["nowhere"]))


def test_resize_and_a_shorter_side_cap_together_are_refused():
    c = config(conversion__resize_shorter=256, conversion__shorter_cap=500)
    with pytest.raises(ConfigProblem, match="conversion.resize_shorter = 256 and conversion.shorter_cap = 500"):
        config_checks.check_config(c)


def test_a_gpu_system_without_cpus_per_task_is_refused_with_the_fix():
    c = config(systems={"g": dict(GPU, cpus_per_task=0)}, training__systems=["g"])
    with pytest.raises(ConfigProblem, match="systems.g.cpus_per_task = 0 with gpu_request gpus-per-node.*Fix"):
        config_checks.check_config(c)


def test_the_dual_decoder_refuses_a_batch_its_parts_do_not_divide_naming_it():
    def dual(batch, precisions=("fp32",), parts=2):
        return config(
            training__pytorch__dali_decoder="dual",
            training__pytorch__dali_dual_parts=parts,
            training__batch_per_gpu__pytorch=batch,
            training__precisions=list(precisions),
        )

    with pytest.raises(ConfigProblem, match="dali_decoder = dual .* PyTorch's fp32 batch is 15 a GPU"):
        config_checks.check_config(dual(15))
    config_checks.check_config(dual(16))
    config_checks.check_config(dual(15, ["fp16"]))  # fp16's batch is doubled: even whatever the fp32 batch
    with pytest.raises(ConfigProblem, match=r"in 3 equal parts \(training.pytorch.dali_dual_parts\).*batch is 64"):
        config_checks.check_config(dual(64, parts=3))
    config_checks.check_config(dual(64, parts=4))


def test_sbatch_extra_is_split_as_words_and_an_open_quote_named():
    c = config(systems={"g": dict(GPU, sbatch_extra="--comment 'a b' --mail-type=NONE")})
    assert config_checks.sbatch_words(c, "g") == ["--comment", "a b", "--mail-type=NONE"]
    c = config(systems={"g": dict(GPU, sbatch_extra="--comment 'a b")})
    with pytest.raises(ConfigProblem, match="systems.g.sbatch_extra"):
        config_checks.sbatch_words(c, "g")


def test_a_training_run_takes_its_systems_interpreter_then_envs_gpu_then_envs():
    own = dict(GPU, envs={"pytorch": "/opt/own/python"})
    c = config(systems={"own": own, "g": GPU, "cpu": {**GPU, "gpu_request": "none"}})
    assert config_checks.framework_config(c, "own", "pytorch") == ("systems.own.envs.pytorch", "/opt/own/python")
    assert config_checks.framework_config(c, "g", "pytorch")[0] == "envs_gpu.pytorch"
    assert config_checks.framework_config(c, "cpu", "pytorch")[0] == "envs.pytorch"


def test_a_missing_interpreter_names_the_key_and_the_set_up(tmp_path):
    with pytest.raises(ConfigProblem, match="config envs.pytorch: .*bash envs/setup.sh --gpu"):
        config_checks.interpreter_words("envs.pytorch", str(tmp_path / "no-python"), REPO, "bash envs/setup.sh --gpu")
    (python := tmp_path / "python").touch()
    assert config_checks.interpreter_words("envs.workflow", str(python), REPO) == [str(python)]


def test_an_environment_whose_scratch_folder_was_purged_is_named_with_its_link(tmp_path):
    """setup.sh's DLSCALE_ENVS_DIR leaves .envs/<name> a link to scratch; once a purge took the
    target, the interpreter is named with the link and where it pointed."""
    (tmp_path / ".envs").mkdir()
    (tmp_path / ".envs" / "tensorflow-gpu").symlink_to(tmp_path / "scratch" / "tensorflow-gpu")
    python = str(tmp_path / ".envs" / "tensorflow-gpu" / "bin" / "python")
    with pytest.raises(ConfigProblem) as raised:
        config_checks.interpreter_words("envs_gpu.tensorflow", python, REPO, "bash envs/setup.sh --gpu")
    assert (
        f"{tmp_path / '.envs' / 'tensorflow-gpu'} links to {tmp_path / 'scratch' / 'tensorflow-gpu'}, which is gone"
        in str(raised.value)
    )


def test_the_workflows_folder_comes_first_on_pythonpath_and_the_working_directory_never():
    sep = os.pathsep
    assert interpreter.search_path("/repo", {}) == "/repo"
    # a module's own entries stay, after it; an empty entry (the working directory) and a second
    # copy of the folder go
    environ = {"PYTHONPATH": f"{sep}/opt/site{sep}/repo{sep}{sep}/more"}
    assert interpreter.search_path("/repo", environ) == sep.join(["/repo", "/opt/site", "/more"])


def test_a_conda_jobs_command_sets_the_path_snakemake_took_out():
    assert interpreter.job_words(["python3"], "/repo", path_blocked=False) == ["python3"]
    assert interpreter.job_words(["python3"], "/repo", path_blocked=True) == ["env", "PYTHONPATH=/repo", "python3"]


def test_a_relative_interpreter_is_the_working_directorys_else_the_repositorys(tmp_path):
    repo, work, venv = tmp_path / "repo", tmp_path / "work", ".venv/bin/python"
    for folder in (repo, work):
        (folder / venv).parent.mkdir(parents=True)
    (repo / venv).touch()
    assert config_checks.located(venv, repo, work) == str(repo / venv)
    (work / venv).touch()
    assert config_checks.located(venv, repo, work) == venv
    for value in ("python3", "/opt/python", {"container": ".venv/bin/python"}):
        assert config_checks.located(value, repo, work) == value


def test_horovod_over_mpi_needs_srun_for_several_gpus():
    c = config(training__horovod_controller="mpi", training__frameworks=["tensorflow"], training__gpus=[1, 2])
    with pytest.raises(ConfigProblem, match="horovod_controller = mpi.*tensorflow, 2 GPUs.*no srun"):
        cluster_checks.check_horovod_controller(c, [], have_srun=False)
    cluster_checks.check_horovod_controller(c, [], have_srun=True)
    one = config(training__horovod_controller="mpi", training__frameworks=["tensorflow"], training__gpus=[1])
    cluster_checks.check_horovod_controller(one, [], have_srun=False)


def test_no_partition_asks_the_cluster_nothing():
    c = config(systems={"g": GPU}, training__systems=["g"], training__gpus=[1, 8])
    cluster_checks.check_cluster(c, Sweep(c, True).placement, [8])  # no partition: no sinfo, no error


def test_a_long_test_that_cannot_fit_its_jobs_is_named(tmp_path):
    c = config(
        data_dir=str(tmp_path / "data"),
        results_dir=str(tmp_path / "results"),
        systems={"g": dict(GPU, time_min=10)},
        training__systems=["g"],
        training__frameworks=["pytorch"],
        training__long_test__gpus=[4],
        training__long_test__epochs=90,
        training__long_test__max_jobs=2,
    )
    long_test = Sweep(c, False).long_test()
    cluster_checks.check_long_test_fits(c, long_test)  # no manifest yet: nothing to judge by
    manifest = tmp_path / "data" / "lmdb" / "manifest.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"splits": {"train": {"images": 1_281_167}}}))
    run = tmp_path / "results" / "runs" / "g" / f"pytorch_{long_test[0]['precision']}_1gpu"
    run.mkdir(parents=True)
    summary = {"status": "ok", "images_per_s": 400.0, "world_size": 1, "args": {"data_source": "real"}}
    (run / "summary.json").write_text(json.dumps(summary))
    # 1,281,167 images at 4 x 400 images/s: 13 min an epoch, more than a 10-minute job holds
    with pytest.raises(ConfigProblem, match="systems.g.time_min = 10: .*cannot save a single epoch"):
        cluster_checks.check_long_test_fits(c, long_test)


@pytest.mark.unit
def test_user_and_home_in_path_keys_are_expanded_and_an_unset_variable_is_refused():
    config = {
        "data_dir": "/scratch/$USER/dlscale",
        "log_dir": "~/logs",
        "results_dir": "${PROJECT}/results",
        "dataset": {"root": "", "val_labels": ""},
        "training": {"cuda_cache_dir": ""},
    }
    config_checks.expand_paths(config, {"USER": "ada", "PROJECT": "/proj/x", "HOME": "/home/ada"})
    assert config["data_dir"] == "/scratch/ada/dlscale" and config["results_dir"] == "/proj/x/results"
    assert config["log_dir"] == "/home/ada/logs" and config["dataset"]["root"] == ""
    with pytest.raises(ConfigProblem, match=r"config dataset.root = '\$NOPE/imagenet': \$NOPE is not set"):
        config_checks.expand_paths({"dataset": {"root": "$NOPE/imagenet"}}, {})


@pytest.mark.unit
def test_a_real_dataset_with_the_embedded_defaults_settings_is_refused_naming_the_preset():
    real = with_overrides(CONFIG, dataset__root="/data/ILSVRC2012")
    with pytest.raises(ConfigProblem, match=r"presets/study\.yaml.*allow_embedded_settings"):
        config_checks.check_not_laptop_settings(validated(real), CONFIG)
    # the embedded dataset, the preset, or the user's word: no refusal
    config_checks.check_not_laptop_settings(validated(CONFIG), CONFIG)
    preset = yaml.safe_load((REPO / "presets" / "study.yaml").read_text())
    studied = validated(with_overrides(real, **{f"training__{k}": v for k, v in preset["training"].items()}))
    assert studied["training"]["image_size"] == 224 and studied["training"]["steps"] == 100
    config_checks.check_not_laptop_settings(studied, CONFIG)
    config_checks.check_not_laptop_settings(
        validated(with_overrides(real, training__allow_embedded_settings=True)), CONFIG
    )


@pytest.mark.unit
def test_a_misspelt_key_is_named_in_a_few_lines_with_the_nearest_valid_one():
    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    with pytest.raises(ConfigProblem) as e:
        config_checks.unknown_keys({**CONFIG, "traning": {"gpus": [1]}}, schema)
    assert str(e.value).startswith("config traning: no such key; did you mean training?")
    assert len(str(e.value).splitlines()) == 1
    with pytest.raises(ConfigProblem, match=r"config training\.gpuz: no such key; did you mean training\.gpus\?"):
        config_checks.unknown_keys(with_overrides(CONFIG, training__gpuz=[1]), schema)
    config_checks.unknown_keys(CONFIG, schema)  # the shipped config: nothing unknown


@pytest.mark.unit
def test_a_renamed_key_is_refused_naming_its_new_name():
    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    old = {**CONFIG, "training": {**CONFIG["training"], "accuracy": {"gpus": [8]}}}
    del old["training"]["long_test"]
    with pytest.raises(ConfigProblem) as e:
        config_checks.unknown_keys(old, schema)
    assert str(e.value) == (
        "config training.accuracy: renamed training.long_test (issue 53); rename the key, its values stay"
    )


@pytest.mark.unit
@pytest.mark.parametrize(
    "key, says",
    [
        ("demand_steps", "renamed preflight.input_steps"),
        ("input_seconds", "removed: the input check now runs the trainer on real data beside its synthetic run"),
        ("input_margin", "replaced by preflight.input_tolerance"),
    ],
)
def test_the_input_checks_old_keys_are_refused_naming_what_replaced_them(key, says):
    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    old = {**CONFIG, "preflight": {**CONFIG["preflight"], key: 5}}
    with pytest.raises(ConfigProblem) as e:
        config_checks.unknown_keys(old, schema)
    assert str(e.value).startswith(f"config preflight.{key}: {says}"), e.value


def test_a_start_up_limit_a_run_cannot_reach_before_its_time_limit_is_clamped(capsys):
    """Issue 61 item 6: 30 minutes a run (the job stops its ranks 3 minutes before, as a time limit)
    leave no room for the watchdog's default 1800 s before the first step: a start-up hang would be
    filed as a time limit and never retried. The limit is clamped, at parse time, to the time less
    twice the stop margin, and the line says so, naming both keys."""
    c = config(systems={"g": dict(GPU, time_min=30)}, training__systems=["g"])
    assert c["training"]["hang_start_s"] == 1800  # the schema's default
    config_checks.check_config(c)
    assert c["training"]["hang_start_s"] == 1800 - 2 * 180
    said = capsys.readouterr().err
    assert "training.hang_start_s = 1800: clamped to 1440 s" in said and "systems.g.time_min = 30" in said, said
    # the shortest time wins, a long test's own included; a limit that fits, and 0 (no watchdog), stay
    c = config(
        systems={"g": dict(GPU, time_min=120), "h": dict(GPU, time_min=90)},
        training__systems=["g", "h"],
        training__long_test__time_min=20,
    )
    config_checks.check_config(c)
    assert (
        c["training"]["hang_start_s"] == 1200 - 2 * 120
        and "training.long_test.time_min = 20" in capsys.readouterr().err
    )
    for c in (
        config(systems={"g": dict(GPU, time_min=60)}, training__systems=["g"]),
        config(systems={"g": dict(GPU, time_min=1)}, training__systems=["g"], training__hang_start_s=0),
    ):
        before = c["training"]["hang_start_s"]
        config_checks.check_config(c)
        assert c["training"]["hang_start_s"] == before and capsys.readouterr().err == ""
