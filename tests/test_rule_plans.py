"""What the rules hand Snakemake, as plain Python (workflow_scripts/plan/: data_plan, point_jobs,
preflight_plan, interconnect_plan, int8_plan): the files a job reads and writes, its command-line
words and resources, and the configs refused when the workflow is parsed, naming the key. The
methods that take a job's wildcards are given a plain object with those attributes, as Snakemake's
Wildcards has them."""

from types import SimpleNamespace

import pytest
from helpers import CONFIG, validated, with_overrides
from helpers.systems import EXTRA, SYSTEMS

from workflow_scripts.plan import config_checks
from workflow_scripts.plan.cluster_checks import long_test_inputs
from workflow_scripts.plan.commands import TrainerCommands
from workflow_scripts.plan.data_plan import DataPlan, conda_env, folders_of
from workflow_scripts.plan.input_plan import InputPlan
from workflow_scripts.plan.int8_plan import Int8Plan
from workflow_scripts.plan.interconnect_plan import InterconnectPlan
from workflow_scripts.plan.point_jobs import PointJobs, per_job, threads_to_run_alone
from workflow_scripts.plan.preflight_plan import PreflightPlan
from workflow_scripts.plan.slurm_job import JobShape
from workflow_scripts.plan.sweep import ConfigProblem, Sweep

pytestmark = pytest.mark.unit

THREE = {
    "systems": SYSTEMS,
    "training__systems": list(SYSTEMS),
    "training__gpus": [1, 2, 4],
    "training__long_test__gpus": [2],
}


class Wildcards(SimpleNamespace):
    """Snakemake's Wildcards as the plans read them: attributes, get() and keys()."""

    def get(self, key, default=None):
        return getattr(self, key, default)

    def keys(self):
        return vars(self).keys()


def plans(**overrides):
    """The plan objects rules/common.smk builds, on the repository's config with `overrides`."""
    config = validated(with_overrides(CONFIG, **overrides))
    data = DataPlan(config)
    sweep = Sweep(config, data.embedded)
    env_keys = {(s, f): f"envs.{f}" for s in config["training"]["systems"] for f in config["training"]["frameworks"]}
    commands = TrainerCommands(config, sweep, env_keys)
    shape = JobShape(config, sweep, {name: EXTRA.get(name, []) for name in config["systems"]})
    train_env = {pair: (key, ["/env/bin/python"]) for pair, key in env_keys.items()}
    workflow = SimpleNamespace(local_exec=True, resource_settings=SimpleNamespace(cores=6))
    points = PointJobs(config, sweep, commands, shape, data, train_env, workflow)
    return SimpleNamespace(config=config, data=data, sweep=sweep, commands=commands, shape=shape, points=points)


# --- data_plan ---


def test_the_embedded_dataset_is_written_under_data_dir_and_converted_in_a_handful_of_shards():
    p = plans(data_dir="/d")
    assert p.data.embedded and p.data.root == "/d/embedded/ILSVRC2012" and p.data.contents() == ""
    assert p.data.converted("lmdb") == "/d/lmdb/done.json" and p.data.check_record("lmdb") == "/d/checked/lmdb.json"
    assert (p.data.tfrecord_shards("train"), p.data.tfrecord_shards("val")) == (4, 2)
    assert folders_of("/d/lmdb/done.json") == ["/d/lmdb"] and folders_of(["/d/a/x", "/d/b/y"]) == ["/d/a", "/d/b"]
    assert conda_env("pytorch") == "../envs/torch.yaml" and conda_env("mxnet") == "../envs/tf-mxnet.yaml"


def test_a_real_dataset_takes_the_studys_shards_and_a_wrong_root_is_refused(tmp_path):
    p = plans(dataset__root=str(tmp_path / "nowhere"), conversion__tfrecord__val_shards=7)
    assert (p.data.tfrecord_shards("train"), p.data.tfrecord_shards("val")) == (1024, 7)
    with pytest.raises(ConfigProblem, match="config dataset.root"):
        p.data.contents()


def test_the_cpu_stages_ask_slurm_only_for_what_cpu_jobs_sets():
    assert plans().data.cpu_job_resources() == {}
    assert plans(cpu_jobs__partition="cpu", cpu_jobs__time_min=30).data.cpu_job_resources() == {
        "slurm_partition": "cpu",
        "runtime": 30,
    }


# --- point_jobs ---


def test_a_run_reads_its_input_path_from_its_directory_name_and_synthetic_reads_no_data():
    p = plans(data_dir="/d")
    w = Wildcards(system="local", framework="pytorch", precision="fp32", gpus="2", variant="", rep="")
    assert p.points.run_input(w) == "cpu"
    assert p.points.training_data(w) == "/d/lmdb/done.json" and p.points.data_checked(w) == "/d/checked/lmdb.json"
    synthetic = Wildcards(**{**vars(w), "variant": "_synthetic"})
    assert p.points.run_input(synthetic) == "synthetic"
    assert p.points.training_data(synthetic) == [] and p.points.data_checked(synthetic) == []
    assert p.points.dataset_of(synthetic) == "/d/lmdb/done.json"
    assert p.points.trainer_args(w) == p.commands.sweep_run("local", "pytorch", "fp32", "cpu")
    assert p.points.trainer_module(w) == "workflow_scripts.train.pytorch_ddp"
    assert p.points.train_python(w) == "/env/bin/python"


def test_horovods_flags_go_to_tensorflow_and_mxnet_runs_only():
    p = plans(training__horovod_controller="gloo")
    w = Wildcards(system="local", framework="pytorch", gpus="2")
    geometry = p.shape.geometry_args("local", 2)
    assert p.points.launcher_args(w) == geometry
    horovod = p.commands.horovod_args("local")
    assert horovod and p.points.launcher_args(Wildcards(system="local", framework="mxnet", gpus="2")) == [
        *geometry,
        *horovod,
    ]


def test_a_points_later_run_follows_the_earlier_runs_log_and_the_first_follows_nothing():
    p = plans(log_dir="/l")
    first = Wildcards(system="s", framework="mxnet", precision="fp16", gpus="4", variant="_synthetic", rep="")
    assert p.points.previous_log(first) == []
    third = Wildcards(**{**vars(first), "rep": "_rep3"})
    assert p.points.previous_log(third) == "/l/train/s/mxnet_fp16_4gpu_synthetic_rep2.log"
    second = Wildcards(**{**vars(first), "rep": "_rep2"})
    assert p.points.previous_log(second) == "/l/train/s/mxnet_fp16_4gpu_synthetic.log"


def test_a_long_test_run_has_no_job_group():
    p = plans(**THREE)
    w = Wildcards(system="pernode", framework="pytorch", precision="fp32", gpus="2")
    assert p.points.job_group(w) is None
    # a sweep run of a GPU system repeats (auto: 3) in one group
    w = Wildcards(**{**vars(w), "variant": "", "rep": "_rep2"})
    assert p.points.job_group(w) == "train_pernode_pytorch_fp32_2gpu"


def test_a_measuring_job_takes_every_local_core_and_through_slurm_its_own_count():
    assert threads_to_run_alone(2, local=True, cores=6) == 6
    assert threads_to_run_alone(8, local=True, cores=6) == 8
    assert threads_to_run_alone(2, local=True, cores=None) == 2  # a dry run without --cores
    assert threads_to_run_alone(2, local=False, cores=6) == 2
    assert plans().points.point_threads(Wildcards(gpus="4")) == 6


def test_each_point_resource_is_a_function_of_a_jobs_wildcards():
    p = plans(**THREE)
    resources = per_job(p.shape.point_resources, p.sweep.sweep()[0])
    assert set(resources) == set(p.shape.point_resources("cpu", 2))
    w = Wildcards(system="pernode", gpus="4")
    assert {k: f(w) for k, f in resources.items()} == p.shape.point_resources("pernode", 4)


def test_the_long_test_is_asked_whether_it_fits_only_through_slurm(tmp_path):
    config = validated(with_overrides(CONFIG, data_dir=str(tmp_path)))
    # no manifest yet: nothing to judge either way, and no file is an input
    assert long_test_inputs(config, [{"system": "local", "framework": "pytorch"}], local=False) == []
    assert long_test_inputs(config, "not asked", local=True) == []


def test_stop_on_problem_raises_a_config_problem_as_the_error_it_is_given():
    stop_on_problem = config_checks.raising(KeyError)
    assert stop_on_problem(max, 1, 3) == 3
    with pytest.raises(KeyError, match="config x"):
        stop_on_problem(config_checks.check_path, "x", "a\nb")


# --- preflight_plan ---


def preflight(**overrides):
    p = plans(**overrides)
    inputs = InputPlan(p.config, p.sweep, p.commands)
    return PreflightPlan(p.config, p.sweep, p.sweep.sweep(), p.sweep.long_test_gpus(), p.commands.env_keys, inputs)


def test_preflight_checks_one_node_and_two_where_a_run_crosses_nodes():
    plan = preflight(**THREE)
    assert plan.gpus("pernode") == [4]  # 4 GPUs a node: no run crosses
    assert plan.gpus("gres") == [2, 4]  # 2 a node: the 4-GPU runs take two nodes of 2
    assert plan.result("gres", "mxnet", 4) == "results/preflight/gres/mxnet/4gpu.json"
    assert plan.data_result("gres", "mxnet", "input") == "results/preflight/gres/mxnet/2gpu.input.json"
    assert plan.ok("cpu", "pytorch", "data") == "results/preflight/cpu/pytorch.data.ok"
    w = Wildcards(system="gres", framework="mxnet")
    assert plan.gate_results(w) == [plan.result("gres", "mxnet", g) for g in (2, 4)]
    assert set(plan.system_results(w)) == {r for r in plan.results_all() if "/gres/" in r}


def test_a_pair_waits_for_its_data_gate_only_where_it_reads_data():
    plan = preflight(training__inputs=["synthetic"], training__long_test__gpus=[])
    w = Wildcards(system="local", framework="pytorch")
    assert plan.pairs_reading() == [] and plan.passed(w) == ["results/preflight/local/pytorch.ok"]
    assert "--data-later" not in plan.args(w)
    plan = preflight()
    assert plan.passed(w) == ["results/preflight/local/pytorch.ok", "results/preflight/local/pytorch.data.ok"]
    assert "--data-later" in plan.args(w) and plan.data_args(w)[-1] == "--only-data"
    assert "--data-later" not in plan.data_args(w)
    assert preflight(preflight__gate=False).passed(w) == []


def test_only_the_formats_converted_now_have_their_data_checked_by_preflight():
    plan = preflight(data_dir="/d")
    assert plan.converted_now(lambda path: path == "/d/lmdb/manifest.json") == [("local", "pytorch")]
    assert plan.converted_now(lambda path: False) == []


def test_the_input_check_carries_its_settings_as_one_json_word():
    plan = preflight()
    args = plan.input_args(Wildcards(system="local", framework="pytorch"))
    assert args[-2] == "--only-input" and args[-1].startswith('--input-check={"inputs": ["cpu"]')


# --- interconnect_plan ---


def test_interconnect_measures_every_point_above_one_gpu_up_to_its_systems_message_size():
    p = plans(**THREE)
    ic = InterconnectPlan(p.config, p.sweep, "/repo")
    assert {(q["system"], q["gpus"]) for q in ic.points()} == {(s, g) for s in SYSTEMS for g in (2, 4)}
    assert ic.max_bytes("pernode") == 2**30 and ic.max_bytes("cpu") == 2**27
    w = Wildcards(system="cpu", gpus="2")
    assert ic.args(w)[ic.args(w).index("--max-bytes") + 1] == str(2**27)
    assert (ic.device(w), ic.device(Wildcards(system="gres"))) == ("auto", "cuda")
    assert ic.nccl_logs(w, "torch") == "results/interconnect/cpu/2gpu/nccl_logs/torch"
    assert [a["raw"] for a in ic.allreduce()] == [q["torch"] for q in ic.points()]
    ic.check()


def test_a_message_range_that_is_empty_is_refused_naming_the_keys():
    p = plans(interconnect__min_bytes=2**28)
    with pytest.raises(ConfigProblem, match="interconnect.max_bytes = 134217728 is below interconnect.min_bytes"):
        InterconnectPlan(p.config, p.sweep, "/repo").check()


# --- int8_plan ---


def int8(**overrides):
    p = plans(**overrides)
    return Int8Plan(p.config, p.sweep, p.shape, p.data.cpu_job_resources(), p.sweep.long_test_gpus(), lambda f: False)


def test_the_embedded_default_scores_the_pipeline_weights_with_onnx_runtimes_settings():
    plan = int8()
    assert plan.check() == [] and plan.system() == "local"
    assert (plan.calibration_batches(), plan.batch_sizes()) == (4, [1, 8, 32])
    assert (plan.activations(), plan.bias(), plan.engine_args()) == ("uint8", "int32", [])
    assert plan.export_weights(Wildcards(model="resnet50")) == "results/runs/local/pytorch_fp32_2gpu/summary.json"
    assert plan.export_args(Wildcards(model="resnet50"), SimpleNamespace(weights="r/summary.json")) == [
        "--source",
        "pipeline",
        "--weights",
        "r/weights.pt",
    ]
    assert "--histogram-bins" in " ".join(plan.calibration_args())  # entropy's
    assert "--percentile" not in " ".join(plan.calibration_args())
    assert (plan.engine_threads(4, local=True), plan.engine_threads(4, local=False)) == (4, 16)


def test_a_pipeline_model_without_a_pytorch_run_is_left_out_with_a_line_saying_why():
    plan = int8(training__frameworks=["mxnet"])
    said = plan.check()
    assert len(said) == 1 and "no pytorch" in said[0]
    assert plan.infer["models"] == {} and plan.throughput["models"] == []


def test_missing_weights_an_unknown_system_and_tensorrts_limits_are_refused():
    with pytest.raises(ConfigProblem, match="inference.models.vgg16 = '/w.pt': no such weights file"):
        int8(inference__models={"resnet50": "pipeline", "vgg16": "/w.pt"}).check()
    with pytest.raises(ConfigProblem, match="throughput.models names vgg16"):
        int8(inference__throughput__models=["vgg16"]).check()
    with pytest.raises(ConfigProblem, match="inference.system = 'x'"):
        int8(inference__system="x").system()
    with pytest.raises(ConfigProblem, match="TensorRT runs only symmetric"):
        int8(inference__engine="tensorrt", inference__quantization__activations="uint8").activations()
    with pytest.raises(ConfigProblem, match="max_batch = 16 is below batch 32"):
        int8(inference__engine="tensorrt", inference__tensorrt__max_batch=16).check()


def test_engine_auto_is_tensorrt_where_the_inference_system_asks_for_gpus_and_onnx_runtime_elsewhere():
    on = {name: int8(**THREE, inference__engine="auto", inference__system=name) for name in ("gres", "cpu")}
    assert (on["gres"].engine, on["gres"].activations(), on["gres"].bias()) == ("tensorrt", "int8", "float")
    assert (on["cpu"].engine, on["cpu"].activations()) == ("onnxruntime", "uint8")
    # every later reader of the key sees the engine that runs
    assert (on["gres"].config["inference"]["engine"], on["cpu"].config["inference"]["engine"]) == (
        "tensorrt",
        "onnxruntime",
    )


def test_only_tensorrt_on_a_container_route_waits_for_a_check_on_the_node():
    trt = int8(**THREE, inference__engine="tensorrt", inference__system="gres")
    assert trt.engine_checks({"container": "x.sif"}) == ["results/preflight/int8/gres.engine.json"]
    assert trt.engine_checks(".envs/torch-cu126/bin/python") == []  # asked when the workflow is parsed
    assert int8(**THREE, inference__system="gres").engine_checks({"container": "x.sif"}) == []
    checked = trt.check_resources()
    assert checked["runtime"] == 10 and checked["gres"](Wildcards()) == "gpu:v100:1"


def test_tensorrts_timed_runs_take_one_gpu_and_their_node_alone():
    plan = int8(**THREE, inference__engine="tensorrt", inference__system="pernode")
    trt, ort = Wildcards(engine="tensorrt"), Wildcards(engine="onnxruntime")
    timed, built = plan.resources(measuring=True), plan.resources()
    assert timed["slurm_partition"] == "gpu" and timed["cpus_per_task"] == 16
    assert timed["slurm_extra"](trt) == "--exclusive --gpus-per-node=a100:1"
    assert built["slurm_extra"](trt) == "--gpus-per-node=a100:1" and built["slurm_extra"](ort) is None
    assert (timed["gres"](trt), timed["gpu"](trt)) == (None, None)
    gres = int8(**THREE, inference__engine="tensorrt", inference__system="gres").resources()
    assert gres["gres"](trt) == "gpu:v100:1" and gres["gres"](ort) is None
    assert plan.durations(trt) == ["--warmup-s=0.2", "--duration-s=3"] and plan.durations(ort) == []
