# Settings and helpers of the preflight stage (rules/preflight.smk): which checks the sweep needs
# and what a training job waits for, from config.yaml's preflight section.

PREFLIGHT = config["preflight"]


def preflight_gpus(system):
    """Task counts of the system's checks: one node (all its tasks, or the sweep's largest run if
    smaller) and, where a run of the sweep or long test takes several nodes, two nodes."""
    per_node = config["systems"][system]["gpus_per_node"]
    counts = [*TRAIN["gpus"], *LONG_TEST_GPUS]
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


# A job waits for its gate, but a preflight run again (and passed again) reruns no finished run:
# the gate files are ancient() to their jobs.
def preflight_passed(w):
    """The gate a training job of (system, framework) waits for (none with preflight.gate false)."""
    return [ancient(preflight_ok(w.system, w.framework))] if PREFLIGHT["gate"] else []


def preflight_passed_system(w):
    """An interconnect job serves every framework's runs of its system: all their gates."""
    return [ancient(preflight_ok(w.system, f)) for f in TRAIN["frameworks"]] if PREFLIGHT["gate"] else []


def preflight_data(w):
    """The format the pair's runs read; none where they all run on synthetic input."""
    reads = any(i != "synthetic" for i in run_inputs(w.system, w.framework)) or bool(LONG_TEST_GPUS)
    return f"{DATA}/{FORMAT_OF[w.framework]}" if reads else []


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
        "--elements",
        PREFLIGHT["allreduce_elements"],
    ]
    if sysc["gpu_request"] != "none":
        args += ["--require-gpu", f"--gpu-type={sysc['gpu_type']}"]
    return [str(a) for a in args]
