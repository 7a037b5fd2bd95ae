"""The TensorRT-bound INT8 model (issue 27, item 1), on the CPU: a small real network quantized as
the int8_quantize rule does for each engine, its graph read against TensorRT's explicit-quantization
rules (DequantizeLinear reads INT8 only: no INT32 bias), the checker naming hand-doctored nodes,
and how each engine's throughput is timed. No TensorRT or GPU here: what TensorRT's parser would
do with the model is judged from the graph."""

import json
import shlex

import pytest
from helpers import run_script, run_stage, snakemake, write_config
from helpers.stand_in import tensorrt_system

from workflow_scripts.int8 import int8_tables, tensorrt_engine

# The study's network with its classifier bias.
NETWORK, SIZE = "resnet50", 32


def helper(*args):
    """int8_qdq_tensorrt.py's `args` in the torch environment: what it printed."""
    return run_script("pytorch", "int8_qdq_tensorrt.py", *args, timeout=900)


def quantize(work, name, *words, check=True):
    """quantize.py on the prepared model with the given settings; returns the process and the output paths."""
    out, cache = work / f"{name}.onnx", work / f"{name}.cache.json"
    proc = run_stage(
        "pytorch",
        "workflow_scripts.int8.quantize",
        "--onnx",
        work / "fp32.onnx",
        "--ranges",
        work / "ranges.json",
        *words,
        "--calibration-images",
        8,
        "--out",
        out,
        "--cache",
        cache,
        check=check,
    )
    return proc, out, cache


PATHS = {"--onnx", "--ranges", "--out", "--cache", "--calibration-images"}


@pytest.fixture(scope="module")
def rule_words(tmp_path_factory):
    """{engine: the settings words int8_quantize gives quantize.py} (a dry run's shell command
    without its paths), for inference.engine tensorrt and onnxruntime."""
    words = {}
    for engine in ("tensorrt", "onnxruntime"):
        d = tmp_path_factory.mktemp(f"rule-{engine}")
        write_config(d, inference__engine=engine, **(tensorrt_system(d) if engine == "tensorrt" else {}))
        out = snakemake(d, "results/int8/resnet50/int8.onnx", "-n", "-p").stdout
        (cmd,) = [ln for ln in out.splitlines() if "workflow_scripts.int8.quantize" in ln]
        argv = shlex.split(cmd.split("workflow_scripts.int8.quantize", 1)[1].split(">", 1)[0])
        pairs = list(zip(argv[::2], argv[1::2]))
        words[engine] = [w for flag, value in pairs if flag not in PATHS for w in (flag, value)]
    return words


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    work = tmp_path_factory.mktemp("trt-qdq")
    helper("prepare", work, NETWORK, SIZE)
    return work


@pytest.fixture(scope="module")
def models(work, rule_words):
    """The model quantize.py writes with the rule's settings for TensorRT and for ONNX Runtime,
    and the TensorRT-bound model of before (INT8 activations, INT32 biases), each inspected."""
    paths = {engine: quantize(work, engine, *words)[1] for engine, words in rule_words.items()}
    paths["int32_biases"] = work / "int32_biases.onnx"  # the helper's prepare step wrote it
    found = helper("inspect", work / "fp32.onnx", *paths.values())
    return {name: {**found[str(p)], "path": p} for name, p in paths.items()}


@pytest.mark.stage
def test_rule_gives_float_biases_to_tensorrt_and_int32_to_onnxruntime(rule_words):
    words = {engine: " ".join(w) for engine, w in rule_words.items()}
    assert "--activations int8 --bias float --engine tensorrt" in words["tensorrt"], words
    assert "--activations uint8 --bias int32 --engine onnxruntime" in words["onnxruntime"], words


@pytest.mark.stage
def test_tensorrt_model_dequantizes_int8_only(models):
    m = models["tensorrt"]
    print(m["dq_inputs"], m["violations"][:5])
    # What TensorRT's parser takes: every DequantizeLinear reads INT8, weights and activations alike.
    assert set(m["dq_inputs"]) == {"stored int8", "computed int8"}, m["dq_inputs"]
    assert m["violations"] == []
    cache = json.loads((m["path"].parent / "tensorrt.cache.json").read_text())
    assert (cache["bias"], cache["engine"], cache["activations"]) == ("float", "tensorrt", "int8")
    assert set(cache["stored"]) == {"int8"}


@pytest.mark.stage
def test_float_biases_change_no_prediction_on_onnxruntime(models):
    """The TensorRT model still runs on ONNX Runtime's CPU engine, and its top-1 is the one the
    INT32-bias model gave (rounding a bias to input scale x weight scale moves a logit by far less
    than a top-1 margin, save for near ties)."""
    a, b = models["tensorrt"], models["int32_biases"]
    same = sum(x == y for x, y in zip(a["top1"], b["top1"]))
    print(f"same top-1 {same} of {a['images']}; vs FP32: {a['same_top1_as_fp32']} and {b['same_top1_as_fp32']}")
    assert same >= 0.95 * a["images"]
    assert abs(a["same_top1_as_fp32"] - b["same_top1_as_fp32"]) <= 0.05 * a["images"]


@pytest.mark.stage
def test_onnxruntime_model_keeps_int32_biases(models):
    m = models["onnxruntime"]
    assert m["dq_inputs"].get("stored int32", 0) > 0 and m["dq_inputs"]["computed uint8"] > 0, m["dq_inputs"]
    # Not TensorRT's: the checker names its INT32 biases and UINT8 activations.
    assert any("is INT32" in v for v in m["violations"]) and any("is UINT8" in v for v in m["violations"])
    cache = json.loads((m["path"].parent / "onnxruntime.cache.json").read_text())
    assert (cache["bias"], cache["engine"]) == ("int32", "onnxruntime") and cache["stored"]["int32"] > 0


@pytest.mark.stage
def test_quantize_refuses_a_tensorrt_model_that_breaks_the_rules(work, models):
    proc, out, cache = quantize(
        work,
        "refused",
        "--activations",
        "int8",
        "--bias",
        "int32",
        "--engine",
        "tensorrt",
        "--per-channel",
        1,
        check=False,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert str(out) in proc.stderr and "inference.engine = tensorrt" in proc.stderr
    # The INT32 biases, by node: the ones the inspection counted in main's TensorRT-bound model.
    bias_nodes = [v.split(" ")[1] for v in models["int32_biases"]["violations"]]
    assert bias_nodes and all(n in proc.stderr or "more" in proc.stderr for n in bias_nodes[:10])
    assert "INT32" in proc.stderr and not out.exists() and not cache.exists()


@pytest.mark.stage
def test_checker_names_the_doctored_nodes(work, models):
    made = helper("doctor", models["tensorrt"]["path"], work)
    for name, d in made.items():
        named = {v.split(" ")[1] for v in d["violations"]}
        print(name, d["violations"])
        assert named == set(d["doctored"]), (name, d)
    assert "is INT32" in made["int32_weight"]["violations"][0]
    assert all("not 0" in v for v in made["zero_point"]["violations"])
    assert "output-channel axis 0" in made["conv_axis"]["violations"][0]
    # The checker's command line: exit 2 naming the file and nodes, 0 on the clean model.
    proc = run_stage("pytorch", "workflow_scripts.int8.qdq_rules", made["zero_point"]["file"], check=False)
    assert proc.returncode == 2 and made["zero_point"]["file"] in proc.stderr
    assert all(n in proc.stderr for n in made["zero_point"]["doctored"])
    assert run_stage("pytorch", "workflow_scripts.int8.qdq_rules", models["tensorrt"]["path"]).returncode == 0


@pytest.mark.unit
def test_cuda_event_times_become_per_run_seconds():
    # An event before the first run and one after each: the runs tile the span between the first and last.
    assert tensorrt_engine.run_seconds([0.0, 1.5, 3.0, 4.75]) == pytest.approx([0.0015, 0.0015, 0.00175])
    assert sum(tensorrt_engine.run_seconds([0.0, 0.2, 0.5])) == pytest.approx(0.5e-3)
    for bad in ([0.0], [], [0.0, 2.0, 1.0], [1.0, 2.0]):
        with pytest.raises(ValueError):
            tensorrt_engine.run_seconds(bad)


@pytest.mark.stage
def test_throughput_record_and_table_say_how_runs_were_timed(work, tmp_path):
    engine = tmp_path / "fp32.engine"
    run_stage(
        "pytorch",
        "workflow_scripts.int8.build_engine",
        "--engine",
        "onnxruntime",
        "--onnx",
        work / "fp32.onnx",
        "--precision",
        "fp32",
        "--out",
        engine,
        "--info",
        tmp_path / "fp32.engine.json",
    )
    out = tmp_path / NETWORK / "onnxruntime" / "throughput" / "bs1.json"
    out.parent.mkdir(parents=True)
    run_stage(
        "pytorch",
        "workflow_scripts.int8.throughput",
        "--engine",
        "onnxruntime",
        "--fp32",
        engine,
        "--int8",
        engine,
        "--network",
        NETWORK,
        "--image-size",
        SIZE,
        "--batch-size",
        1,
        "--warmup",
        1,
        "--repeats",
        2,
        "--out",
        out,
    )
    record = json.loads(out.read_text())
    for run in record["precisions"].values():
        assert run["timing"] == "host perf_counter" and len(run["times_s"]) == 2
    rows = int8_tables.throughput_rows(tmp_path, "onnxruntime", [NETWORK], [1])
    assert rows[0]["timing"] == "host perf_counter"
    assert "timed with host perf_counter" in int8_tables.throughput_markdown(rows)
    # A TensorRT record carries what Runner.timing names: the table says so.
    for run in record["precisions"].values():
        run["timing"] = tensorrt_engine.Runner.timing
    out.write_text(json.dumps(record))
    rows = int8_tables.throughput_rows(tmp_path, "onnxruntime", [NETWORK], [1])
    assert rows[0]["timing"] == "cuda-events" and "timed with cuda-events" in int8_tables.throughput_markdown(rows)


class FakeClock:
    """A clock each run moves by run_s (a GPU whose runs take that long), read by warm_up."""

    def __init__(self, run_s):
        self.now, self.run_s, self.runs = 0.0, run_s, 0

    def execute(self):
        self.runs += 1
        self.now += self.run_s

    def __call__(self):
        return self.now


@pytest.mark.unit
def test_warm_up_and_timing_go_by_duration_as_well_as_by_count():
    """trtexec's rule (--warmUp 200 ms, --duration 3 s): 3 warm-up runs of 10 ms would leave a GPU's
    clocks still rising, so the warm-up lasts 200 ms; 10 timed runs of 10 ms would time 0.1 s, so
    the timed span is about 3 s; a slow run never gets fewer than the counts."""
    from workflow_scripts.common.timing import timed_runs, warm_up

    fast = FakeClock(0.01)
    done, seconds, run_s = warm_up(fast.execute, lambda: None, 3, 0.2, clock=fast)
    assert done == fast.runs == 20 and seconds == pytest.approx(0.2) and run_s == pytest.approx(0.01)
    assert timed_runs(10, 3.0, run_s) == 300
    slow = FakeClock(0.5)
    assert warm_up(slow.execute, lambda: None, 3, 0.2, clock=slow)[0] == 3
    assert timed_runs(10, 3.0, 0.5) == 10 and timed_runs(10, 0.0, 0.5) == 10


@pytest.mark.stage
def test_the_timed_job_passes_tensorrts_durations_and_only_its(tmp_path):
    write_config(
        tmp_path,
        inference__engine="tensorrt",
        inference__tensorrt__warmup_ms=250,
        inference__tensorrt__duration_s=4,
        **tensorrt_system(tmp_path),
    )
    out = snakemake(tmp_path, "-n", "-p", "int8").stdout
    lines = [ln for ln in out.splitlines() if "workflow_scripts.int8.timing_job" in ln]
    assert lines and all("--warmup-s=0.25 --duration-s=4" in ln for ln in lines), lines
    write_config(tmp_path)
    out = snakemake(tmp_path, "-n", "-p", "int8").stdout
    assert "--duration-s" not in out
