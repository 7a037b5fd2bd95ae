"""The points benchmarks/trainer_vs_plain.py measures, as the pipeline would run them: each point's
config (its config files, the schema's defaults, one GPU), the variants an item may add, and the
sweep rule's trainer words for it."""

import copy
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from workflow_scripts.plan.commands import TrainerCommands  # noqa: E402
from workflow_scripts.plan.slurm_job import JobShape  # noqa: E402
from workflow_scripts.plan.sweep import Sweep  # noqa: E402

SYSTEM, FRAMEWORK = "local", "pytorch"
# config.yaml is the CPU laptop's default; on a GPU the trainer's own size: 224 px, 128 a GPU
# (fp16's factor 2: 256), the scale-out whitepaper's 10 + 100 steps.
DEFAULTS = {"training": {"image_size": 224, "batch_per_gpu": {"pytorch": 128}, "warmup_steps": 10, "steps": 100}}


def node_of(gpus):
    """Every point on a system of one node of `gpus` GPUs that asks SLURM for them, as a cluster's
    runs are (their words then say --require-gpu, and input auto is dali), one run at a time."""
    return {
        "systems": {SYSTEM: {"gpus_per_node": gpus, "max_nodes": 1, "gpu_request": "gpus-per-node"}},
        "training": {"gpus": [gpus]},
    }


POINTS = {
    "preset-fp32": (("config.yaml", "presets/study.yaml"), {}, "fp32"),
    "preset-fp16": (("config.yaml", "presets/study.yaml"), {}, "fp16"),
    "defaults-fp16": (("config.yaml",), DEFAULTS, "fp16"),
}
# A variant is config values (applied to the point's config: the trainer's words and preflight's
# check follow from it) or, for what no config key sets, the trainer's words.
VARIANTS = {
    "lag0": {"training.pytorch.loss_lag": 0},
    "lag1": {"training.pytorch.loss_lag": 1},
    "tel0": ["--telemetry-interval", "0"],
    "compile-default": {"training.pytorch.compile": "default"},
    "compile-auto": {"training.pytorch.compile": "auto"},
    "ddp1": ["--ddp-one-rank"],
    "cpu": {"training.pytorch.dali_decoder": "cpu"},
    "mixed": {"training.pytorch.dali_decoder": "mixed"},
    "mixed99": {"training.pytorch.dali_decoder": "mixed", "training.pytorch.hw_decoder_load": 0.99},
    "read-every": [],  # the plain loop's --read-loss every
    "pools2x": {"training.pytorch.dali_pinned_mb": 2048, "training.pytorch.dali_device_mb": 4096},
    "prefetch8": {"training.pytorch.prefetch": 8},
    "batch256": {"training.batch_per_gpu.pytorch": 128},  # x fp16's factor 2
    "block": ["--loss-wait", "block"],
    "copy": ["--dali-copy"],
    "fastidct": ["--dali-fast-idct"],
    "warm50": {"training.warmup_steps": 50},
    "steps300": {"training.steps": 300},
    "keep-queue": ["--drain-input", "off"],
    "spy": [],  # trainer_vs_plain runs the trainer under py-spy (PY_SPY: its path)
}
for n in range(1, 16):
    VARIANTS[f"threads{n}"] = {"training.pytorch.loader_workers": n}
for n in (0, 10, 17, 25, 33, 50, 67, 80, 100):  # decoder split, that percentage on the GPU
    VARIANTS[f"share{n}"] = {"training.pytorch.dali_decoder": "split", "training.pytorch.dali_hw_share": n / 100}
for n in range(1, 9):
    VARIANTS[f"run{n}"] = {"training.pytorch.dali_run_batches": n}
VARIANTS["dual"] = {"training.pytorch.dali_decoder": "dual"}
for n in range(1, 7):  # decoder dual, the GPU's pipeline with n of the threads
    VARIANTS[f"dual{n}"] = {"training.pytorch.dali_decoder": "dual", "training.pytorch.dali_gpu_threads": n}
for k in range(2, 9):  # decoder dual, every batch in k parts, one of them decoded on the GPU
    VARIANTS[f"parts{k}"] = {"training.pytorch.dali_decoder": "dual", "training.pytorch.dali_dual_parts": k}


def merge(base, over):
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            merge(base[k], v)
        else:
            base[k] = copy.deepcopy(v)
    return base


def with_defaults(instance, spec, root):
    """`instance` with the schema's defaults filled in where a key is missing, as Snakemake's
    validate() fills them when the workflow is parsed (no jsonschema needed on a GPU node)."""
    if "$ref" in spec:
        spec = {**root["$defs"][spec["$ref"].split("/")[-1]], **{k: v for k, v in spec.items() if k != "$ref"}}
    if not isinstance(instance, dict):
        return instance
    props = spec.get("properties", {})
    for key, sub in props.items():
        if key not in instance and "default" in sub:
            instance[key] = copy.deepcopy(sub["default"])
        if key in instance:
            with_defaults(instance[key], sub, root)
    extra = spec.get("additionalProperties")
    if isinstance(extra, dict):
        for key in instance:
            if key not in props:
                with_defaults(instance[key], extra, root)
    return instance


# --set KEY=VALUE words, applied to every point's config after its files (a smaller run to try the
# script on a CPU: training.image_size=32 ...)
OVERRIDES = []


def set_key(config, key, value):
    """config's dotted `key` set to `value` (its parents made where missing)."""
    *parents, leaf = key.split(".")
    node = config
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def config_of(point, variants=(), gpus=1):
    files, overlay, _ = POINTS[point]
    config = {}
    for f in files:
        merge(config, yaml.safe_load((REPO / f).read_text()))
    merge(config, overlay)
    merge(config, node_of(gpus))
    for word in OVERRIDES:
        key, _, value = word.partition("=")
        set_key(config, key, yaml.safe_load(value))
    for name in variants:
        if isinstance(VARIANTS[name], dict):
            for key, value in VARIANTS[name].items():
                set_key(config, key, value)
    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    return with_defaults(config, schema, schema)


def trainer_words(point, data_source, variants=(), gpus=1):
    """The sweep rule's trainer words for the point's run on synthetic data or on its input path."""
    config = config_of(point, variants, gpus)
    sweep = Sweep(config, True)
    commands = TrainerCommands(config, sweep, {(SYSTEM, FRAMEWORK): "envs.pytorch"})
    path = "synthetic" if data_source == "synthetic" else sweep.effective_input(SYSTEM, FRAMEWORK, "auto")
    return commands.sweep_run(SYSTEM, FRAMEWORK, POINTS[point][2], path)


def launcher_words(point, variants=(), gpus=1):
    """The sweep rule's launcher words for the point at `gpus` GPUs of one node (its geometry and
    the ranks' communication settings: plan/slurm_job.py)."""
    config = config_of(point, variants, gpus)
    return JobShape(config, Sweep(config, True), {}).geometry_args(SYSTEM, gpus)


def parse_item(name):
    kind = "synthetic"
    for prefix in ("plain", "real", "check"):
        if name.startswith(prefix + "-"):
            kind, name = prefix, name[len(prefix) + 1 :]
    name, *variants = name.split("+")
    point, _, cpus = name.partition("@")
    point, gpus = re.fullmatch(r"(.+?)(?:x(\d+))?", point).groups()
    if point not in POINTS or any(v not in VARIANTS for v in variants) or gpus == "0":
        raise SystemExit(
            f"item {name!r}: points {', '.join(POINTS)}, each with xGPUS or not; variants {', '.join(VARIANTS)}"
        )
    return {
        "kind": kind,
        "point": point,
        "gpus": int(gpus) if gpus else None,
        "cpus": int(cpus) if cpus else None,
        "variants": tuple(variants),
    }


def words_of(item):
    """The trainer words of the item's variants that no config key sets."""
    return [w for v in item["variants"] if isinstance(VARIANTS[v], list) for w in VARIANTS[v]]
