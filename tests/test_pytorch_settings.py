"""What pytorch_ddp's 'auto' options become, per device, input path and node count: the rules
docs/decisions.md gives (#compile: CUDA graphs with synthetic data and DALI within a node;
#prefetch and #dali_pools: DALI four batches ahead with its pools allocated), resolved here without
a GPU (a CUDA device object needs none; nothing is run on it)."""

import json
import subprocess

import pytest
from helpers import REPO, interpreter

pytestmark = pytest.mark.stage

SCRIPT = """
import json, sys, torch
from workflow_scripts.train import harness, pytorch_ddp as p
out = {}
for name, device, nodes, argv in json.loads(sys.argv[1]):
    args = p.add_experiment_args(p.add_args(harness.arg_parser("x"))).parse_args(argv + ["--out", "unused"])
    cpus = int(name.rsplit("_cpus", 1)[1]) if "_cpus" in name else None
    distributed = not name.endswith("_alone")
    s = p.resolve(args, torch.device(device), nodes=nodes, distributed=distributed, cpus=cpus)
    out[name] = {**s.describe(), "execution_mode": s.execution_mode()}
print(json.dumps(out))
"""

REAL = ["--data", "LMDB", "--batch-per-gpu", "256", "--image-size", "224"]
CASES = [
    ("cpu", "cpu", 1, REAL),
    ("gpu_dali", "cuda", 1, REAL),
    ("gpu_dali_two_nodes", "cuda", 2, REAL),
    ("gpu_synthetic", "cuda", 1, ["--data-source", "synthetic", "--batch-per-gpu", "256", "--image-size", "224"]),
    (
        "gpu_synthetic_dali",
        "cuda",
        1,
        ["--data-source", "synthetic", "--input", "dali", "--batch-per-gpu", "256", "--image-size", "224"],
    ),
    ("cpu_synthetic", "cpu", 1, ["--data-source", "synthetic", "--batch-per-gpu", "256", "--image-size", "224"]),
    ("gpu_dali_split", "cuda", 1, REAL + ["--ddp-graph", "split"]),
    ("gpu_dali_split_alone", "cuda", 1, REAL + ["--ddp-graph", "split"]),
    ("gpu_gpu_input", "cuda", 1, REAL + ["--input", "gpu"]),
    ("gpu_cpu_input", "cuda", 1, REAL + ["--input", "cpu"]),
    ("gpu_dali_lag1", "cuda", 1, REAL + ["--loss-lag", "1"]),
    ("gpu_dali_cpus13", "cuda", 1, REAL),
    ("gpu_dali_cpus14", "cuda", 1, REAL),
    ("gpu_dali_cpus16", "cuda", 1, REAL),
    ("gpu_dali_lag0_cpus16", "cuda", 1, REAL + ["--loss-lag", "0"]),
    ("cpu_cpus16", "cpu", 1, REAL),
    ("gpu_dali_small", "cuda", 1, ["--data", "LMDB", "--batch-per-gpu", "64", "--image-size", "112"]),
    ("gpu_dali_128", "cuda", 1, ["--data", "LMDB", "--batch-per-gpu", "128", "--image-size", "224"]),
    ("gpu_dali_runs3", "cuda", 1, REAL + ["--dali-run-batches", "3"]),
    (
        "gpu_dali_asked",
        "cuda",
        1,
        REAL + ["--compile", "default", "--prefetch", "2", "--dali-pinned-mb", "0", "--dali-device-mb", "100"],
    ),
]


@pytest.fixture(scope="module")
def resolved():
    proc = subprocess.run(
        [interpreter("pytorch"), "-c", SCRIPT, json.dumps(CASES)], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_cuda_graphs_where_they_kept_the_step_steady(resolved):
    assert resolved["cpu"]["compile"] == "off"  # the CPU default runs eager, as it always did
    assert resolved["gpu_dali"]["compile"] == resolved["gpu_synthetic"]["compile"] == "reduce-overhead"
    # GPU decoding waited behind the graphs; across nodes DDP's graph is split at its buckets.
    assert resolved["gpu_gpu_input"]["compile"] == resolved["gpu_cpu_input"]["compile"] == "default"
    assert resolved["gpu_dali_two_nodes"]["compile"] == "default"
    assert resolved["gpu_dali_two_nodes"]["ddp_graph"] == "split"
    assert resolved["gpu_dali_asked"]["compile"] == "default"


def test_a_ddp_graph_split_keeps_the_graphs_of_a_run_without_ddp(resolved):
    """ddp_graph split cuts DDP's graph at its buckets, which leaves compile auto nothing to graph
    whole: but a run of one process has no DDP, so its step is still one graph (the study's preset
    at 1 GPU ran launched kernel by kernel before: docs/decisions.md#compile)."""
    assert resolved["gpu_dali_split"]["compile"] == "default"
    assert resolved["gpu_dali_split_alone"]["compile"] == "reduce-overhead"
    assert resolved["gpu_dali_split_alone"]["ddp_graph"] == "split"
    # what the run records of how its step ran: a run without DDP has no DDP graph to name
    assert resolved["gpu_dali_split_alone"]["execution_mode"] == "torch.compile reduce-overhead with CUDA graphs"
    assert resolved["gpu_dali_split"]["execution_mode"] == "torch.compile default, DDP graph split"
    assert resolved["gpu_dali"]["execution_mode"] == "torch.compile reduce-overhead with CUDA graphs, DDP graph whole"


def test_dali_queue_and_pools(resolved):
    dali = resolved["gpu_dali"]
    assert dali["input"] == "dali" and dali["prefetch"] == 4 and dali["dali_pools_mb"] == [1024, 2048]
    # In proportion to batch x pixels: a quarter of the batch at a quarter of the pixels.
    assert resolved["gpu_dali_small"]["dali_pools_mb"] == [64, 128]
    assert resolved["gpu_gpu_input"]["prefetch"] == 2 and resolved["gpu_gpu_input"]["dali_pools_mb"] == [0, 0]
    assert resolved["cpu"]["dali_pools_mb"] == [0, 0]  # DALI's CPU pipeline has no such pools
    # The cpu path has no queue of its own (its DataLoader prefetches): none is recorded.
    assert resolved["cpu"]["prefetch"] == resolved["gpu_cpu_input"]["prefetch"] == 0
    asked = resolved["gpu_dali_asked"]
    assert asked["prefetch"] == 2 and asked["dali_pools_mb"] == [0, 100]


def test_a_synthetic_run_records_no_input_path(resolved):
    """Synthetic data takes no input path: its settings say so, not the input path 'auto' would
    have chosen on the device (dali on a GPU, with its queue and pools)."""
    for name in ("gpu_synthetic", "cpu_synthetic"):
        synthetic = resolved[name]
        assert (synthetic["input"], synthetic["prefetch"], synthetic["dali_pools_mb"]) == ("synthetic", 0, [0, 0]), name


def test_a_synthetic_run_reads_its_loss_one_step_behind_whatever_the_input_says(resolved):
    """loss_lag auto: on a GPU each loss is read after the next step is queued; a synthetic run
    takes no input path, so an input path's own rule (pytorch_options.LOSS_AT_STEP_END) never
    reaches it, --input auto or not (docs/decisions.md#loss_lag). On a CPU, read at once."""
    assert resolved["gpu_synthetic"]["loss_lag"] == resolved["gpu_synthetic_dali"]["loss_lag"] == 1
    assert resolved["cpu_synthetic"]["loss_lag"] == resolved["cpu"]["loss_lag"] == 0


def test_dali_reads_its_loss_one_step_behind_from_the_rule_s_cpus_a_rank(resolved):
    """loss_lag auto with DALI: one step behind where the rank has pytorch_options.LAG_MIN_CPUS (14)
    CPUs or more, at the step's end below and where the CPUs are not known; always at once on a CPU;
    a value given wins (docs/decisions.md#loss_lag)."""
    lags = {k: resolved[k]["loss_lag"] for k in ("gpu_dali_cpus13", "gpu_dali_cpus14", "gpu_dali_cpus16")}
    assert lags == {"gpu_dali_cpus13": 0, "gpu_dali_cpus14": 1, "gpu_dali_cpus16": 1}
    assert resolved["gpu_dali_lag0_cpus16"]["loss_lag"] == resolved["cpu_cpus16"]["loss_lag"] == 0


def test_a_loss_lag_given_overrides_the_input_paths_rule(resolved):
    """DALI's runs read each loss at their step's end under auto; training.pytorch.loss_lag 1 (the
    flag --loss-lag 1) reads it one step behind there too."""
    assert resolved["gpu_dali"]["loss_lag"] == 0 and resolved["gpu_dali_lag1"]["loss_lag"] == 1


def test_dali_runs_at_least_its_images_at_once_on_a_gpu(resolved):
    """dali_run_batches auto: on a GPU one run of DALI's pipeline prepares enough of the step's
    batches for pytorch_options.DALI_RUN_IMAGES images (docs/decisions.md#dali_run_batches); on a
    CPU, and for synthetic data, one; a number given is taken as it is."""
    runs = {name: resolved[name]["dali_run_batches"] for name in resolved}
    assert (runs["gpu_dali"], runs["gpu_dali_128"], runs["gpu_dali_small"], runs["gpu_dali_runs3"]) == (2, 4, 8, 3)
    assert runs["cpu"] == runs["gpu_synthetic"] == runs["gpu_synthetic_dali"] == 1


def test_dali_decoder_auto_follows_a_ranks_cpus():
    """auto: libjpeg-turbo alone where a rank has pytorch_options.DALI_CPU_DECODER_MIN_CPUS CPUs or
    more, split below, the GPU's decoder taking DALI_HW_SHARE of the JPEGs
    (docs/decisions.md#dali_decoder); a decoder or share asked for is kept at any count."""
    code = (
        "import json; from workflow_scripts.train.pytorch_options import dali_decoder as d, "
        "dali_hw_share as h, DALI_CPU_DECODER_MIN_CPUS as m, DALI_HW_SHARE as share; "
        "print(json.dumps([[d('auto', m), d('auto', 2 * m), d('auto', m - 1), d('auto', 1), "
        "d('cpu', 1), d('mixed', 64)], [h('auto') == share, h(0.3), h(1)]]))"
    )
    proc = subprocess.run([interpreter("pytorch"), "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout) == [["cpu", "cpu", "split", "split", "cpu", "mixed"], [True, 0.3, 1.0]]


DECODER_AUTO = """
import json, pathlib, sys
from workflow_scripts.cluster.rank_env import Launch
from workflow_scripts.preflight import input_task
from workflow_scripts.train.pytorch_options import DALI_CPU_DECODER_MIN_CPUS as least
shared = {"allowed": set(range(4 * least)), "node_cpus": 4 * least, "env": {}, "root": pathlib.Path(sys.argv[1])}
settings = {"device": "gpu", "decode_threads": 0, "loader_workers": 0, "decoder": "auto"}
out = {}
for name, decoder, ranks in (("one", "auto", [1, 8]), ("eight", "auto", [8]), ("asked", "cpu", [8])):
    asked = {**settings, "decoder": decoder, "ranks_per_node": ranks}
    out[name] = input_task.path_threads("pytorch", "dali", asked, Launch(source="env"), **shared)["cpu_decoding"]
print(json.dumps(out))
"""


def test_dali_decoder_auto_decodes_on_the_cpu_where_the_check_ran_with_enough_cpus(tmp_path):
    """decoder auto: the check's run decodes in DALI's CPU threads where a rank has
    pytorch_options.DALI_CPU_DECODER_MIN_CPUS (4 times that on the node, at 1 rank), so its rate at
    other counts follows the threads; with fewer (8 ranks) it splits with the GPU's decoder, which
    takes most of the JPEGs, so the threads do not set its rate; a decoder asked for is kept. In
    PyTorch's interpreter, as preflight runs it."""
    proc = subprocess.run(
        [interpreter("pytorch"), "-c", DECODER_AUTO, str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout) == {"one": True, "eight": False, "asked": True}


def test_settings_declare_no_default_of_their_own():
    """pytorch_options.Settings is what resolve() made of the flags, whose defaults are the schema's:
    a field with a default of its own would be a second home for it."""
    code = (
        "import dataclasses, json; from workflow_scripts.train.pytorch_options import Settings; "
        "print(json.dumps([f.name for f in dataclasses.fields(Settings) "
        "if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING]))"
    )
    proc = subprocess.run([interpreter("pytorch"), "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout) == []
