# Settings and helpers of the preflight stage (rules/preflight.smk): which checks the sweep needs
# and what a training job waits for, from config.yaml's preflight section.

from workflow_scripts.common import input_bound  # noqa: E402
from workflow_scripts.plan.input_plan import InputPlan  # noqa: E402

PREFLIGHT = config["preflight"]


def preflight_gpus(system):
    """Task counts of the system's checks: one node (all its tasks, or the sweep's largest run if
    smaller) and, where a run of the sweep or long test takes several nodes, two nodes."""
    per_node = config["systems"][system]["gpus_per_node"]
    counts = [g for g in [*TRAIN["gpus"], *LONG_TEST_GPUS] if PLAN.runnable_now(system, g)] or [1]
    out = [min(per_node, max(counts))]
    crossing = [placement(system, g)[1] for g in counts if placement(system, g)[0] > 1]
    return out + ([2 * min(crossing)] if crossing else [])


def preflight_result(system, framework, gpus):
    return f"{RESULTS}/preflight/{system}/{framework}/{gpus}gpu.json"


def preflight_ok(system, framework):
    return f"{RESULTS}/preflight/{system}/{framework}.ok"


PREFLIGHT_RESULTS = [
    preflight_result(s, f, g) for s in TRAIN["systems"] for f in TRAIN["frameworks"] for g in preflight_gpus(s)
]
PREFLIGHT_OKS = [preflight_ok(s, f) for s in TRAIN["systems"] for f in TRAIN["frameworks"]]


def preflight_data_result(system, framework):
    return f"{RESULTS}/preflight/{system}/{framework}/{preflight_gpus(system)[0]}gpu.data.json"


def preflight_data_ok(system, framework):
    return f"{RESULTS}/preflight/{system}/{framework}.data.ok"


def preflight_input_result(system, framework):
    return f"{RESULTS}/preflight/{system}/{framework}/{preflight_gpus(system)[0]}gpu.input.json"


def reads_data(system, framework):
    """Whether a pair's runs read its format (else they all run on synthetic input)."""
    return any(i != "synthetic" for i in run_inputs(system, framework)) or bool(LONG_TEST_GPUS)


# The dataset is checked by a job of its own, so that the environment checks need no conversion
# (hours on ILSVRC2012): `snakemake preflight` checks the data of the formats already converted.
PAIRS_READING = [(s, f) for s in TRAIN["systems"] for f in TRAIN["frameworks"] if reads_data(s, f)]
CONVERTED_NOW = [(s, f) for s, f in PAIRS_READING if Path(DATA, FORMAT_OF[f], "manifest.json").exists()]
PREFLIGHT_DATA_RESULTS = [preflight_data_result(s, f) for s, f in PAIRS_READING]
PREFLIGHT_INPUT_RESULTS = [preflight_input_result(s, f) for s, f in PAIRS_READING]
ALL_CONVERTED_NOW = len(CONVERTED_NOW) == len(PAIRS_READING)
PREFLIGHT_DATA_OKS_NOW = [preflight_data_ok(s, f) for s, f in CONVERTED_NOW]


# A job waits for its gate, but a preflight run again (and passed again) reruns no finished run:
# the gate files are ancient() to their jobs.
def preflight_passed(w):
    """The gates a training job of (system, framework) waits for: its environment's and, where the
    pair reads a dataset, its data's (none with preflight.gate false)."""
    if not PREFLIGHT["gate"]:
        return []
    data = [preflight_data_ok(w.system, w.framework)] if reads_data(w.system, w.framework) else []
    return [ancient(f) for f in [preflight_ok(w.system, w.framework), *data]]


def preflight_passed_system(w):
    """An interconnect job serves every framework's runs of its system: all their gates."""
    return [ancient(preflight_ok(w.system, f)) for f in TRAIN["frameworks"]] if PREFLIGHT["gate"] else []


def preflight_data(w):
    """The format the pair's runs read (the data check's input)."""
    return converted(FORMAT_OF[w.framework])


# The data check's input check: what it measures and against what (plan/input_plan.py).
INPUT_PLAN = InputPlan(config, PLAN, COMMANDS)


def preflight_data_args(w):
    """The data check's settings: the pair's checks as preflight_args, the node checks only."""
    return [a for a in preflight_args(w) if a != "--data-later"] + ["--only-data"]


def preflight_input_args(w):
    """The input check's settings (plan/input_plan.py). A job of its own, not the data check's: the
    settings follow the sweep's batch, image size and threads, and a data check run again for an
    edit of them would rerun the data gate, which Snakemake lets hold back the edited runs."""
    settings = INPUT_PLAN.settings(w.system, w.framework, SWEEP)
    args = [a for a in preflight_args(w) if a != "--data-later"] + ["--only-input"]
    return args + ([f"--input-check={json.dumps(settings)}"] if settings else [])


def input_judge_args():
    """How the tables judge the input check (preflight_data_table, training_tables): its margin
    and the input paths meant to be measured input-bound."""
    return input_bound.judge_argv(PREFLIGHT)


def preflight_args(w):
    """The checks' settings as argument words: preflight keys, the sweep's precisions, the system."""
    sysc = config["systems"][w.system]
    args = [
        "--timeout-s",
        PREFLIGHT["timeout_s"],
        "--level",
        "full" if PREFLIGHT["full_data_check"] else "sample",
        "--precisions",
        *TRAIN["precisions"],
        f"--env-key={TRAIN_ENV[w.system, w.framework][0]}",
        "--cpus-per-task",
        sysc["cpus_per_task"],
        "--allreduce-elements",
        PREFLIGHT["allreduce_elements"],
    ]
    if sysc["gpu_request"] != "none":
        args += ["--require-gpu", f"--gpu-type={sysc['gpu_type']}"]
    if reads_data(w.system, w.framework):
        args += ["--data-later"]
    return [str(a) for a in args]
