# Preflight (`snakemake preflight`): every system x framework of the sweep checked in minutes,
# launched exactly as its training runs are (launcher, interpreter or container, srun geometry,
# SLURM resources), on one node with all its tasks and, where the sweep crosses nodes, on two.
# A pair's training and interconnect jobs wait for its gate file, written only when every check
# passed, so a broken pair stops the workflow once, with its cause, before any run queues.

PREFLIGHT = config["preflight"]


def preflight_gpus(system):
    """Task counts of the system's checks: one node (all its tasks, or the sweep's largest run if
    smaller) and, where a run of the sweep or long test takes several nodes, two nodes."""
    per_node = config["systems"][system]["gpus_per_node"]
    counts = [*TRAIN["gpus"], *ACCURACY["gpus"]]
    out = [min(per_node, max(counts))]
    crossing = [placement(system, g)[1] for g in counts if placement(system, g)[0] > 1]
    return out + ([2 * min(crossing)] if crossing else [])


def preflight_result(system, framework, gpus):
    return f"{RESULTS}/preflight/{system}/{framework}/{gpus}gpu.json"


def preflight_ok(system, framework):
    return f"{RESULTS}/preflight/{system}/{framework}.ok"


PREFLIGHT_RESULTS = [preflight_result(s, f, g) for s in TRAIN["systems"] for f in TRAIN["frameworks"]
                     for g in preflight_gpus(s)]
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
    reads = any(i != "synthetic" for i in run_inputs(w.system, w.framework)) or bool(ACCURACY["gpus"])
    return f"{DATA}/{FORMAT_OF[w.framework]}" if reads else []


def preflight_args(w):
    """The checks' settings as argument words: preflight keys, the sweep's precisions, the system."""
    sysc = config["systems"][w.system]
    args = ["--timeout-s", PREFLIGHT["timeout_s"], "--level", "full" if PREFLIGHT["full_data_check"] else "sample",
            "--precisions", *TRAIN["precisions"], f"--env-key={TRAIN_ENV[w.system, w.framework][0]}",
            "--cpus-per-task", sysc["cpus_per_task"], "--elements", PREFLIGHT["allreduce_elements"]]
    if sysc["gpu_request"] != "none":
        args += ["--require-gpu", f"--gpu-type={sysc['gpu_type']}"]
    return [str(a) for a in args]


rule preflight_check:
    input:
        data=preflight_data,
    output:
        f"{RESULTS}/preflight/{{system}}/{{framework}}/{{gpus}}gpu.json",
    wildcard_constraints:
        system=r"[^/]+",
        framework="tensorflow|mxnet|pytorch",
        gpus=r"\d+",
    params:
        py=PY["workflow"],
        python=train_python,
        launch=launcher_args,
        args=preflight_args,
        cache_command=TRAIN["cache_clear_command"],
    threads: point_threads
    # A failed check is the answer, not a fluke: the job writes it and never runs again by itself.
    retries: 0
    resources:
        **POINT_RESOURCES,
    log:
        f"{LOGS}/preflight/{{system}}/{{framework}}_{{gpus}}gpu.log",
    conda:
        lambda w: "../envs/torch.yaml" if w.framework == "pytorch" else "../envs/tf-mxnet.yaml"
    shell:
        "{params.py:q} -m workflow_scripts.preflight.job --out {output:q} --system {wildcards.system:q} "
        "--framework {wildcards.framework:q} --python={params.python:q} --data={input.data:q} "
        "--cache-command={params.cache_command:q} --log {log:q} {params.args:q} -- {params.launch:q}"


rule preflight_table:
    input:
        PREFLIGHT_RESULTS,
    output:
        csv=report(f"{RESULTS}/preflight.csv", caption="../report/preflight.rst", category="Preflight"),
        markdown=report(f"{RESULTS}/preflight.md", caption="../report/preflight.rst", category="Preflight"),
    params:
        py=PY["workflow"],
    log:
        f"{LOGS}/preflight/table.log",
    conda:
        "../envs/workflow.yaml"
    shell:
        "{params.py:q} -m workflow_scripts.preflight.table --results {input:q} --out {output.csv:q} > {log:q} 2>&1"


rule preflight_gate:
    input:
        # after the table, so that it lists every pair even when this one stops the workflow (a
        # table rewritten for another pair does not rerun this gate)
        table=ancient(rules.preflight_table.output.csv),
        results=lambda w: [preflight_result(w.system, w.framework, g) for g in preflight_gpus(w.system)],
    output:
        f"{RESULTS}/preflight/{{system}}/{{framework}}.ok",
    wildcard_constraints:
        system=r"[^/]+",
        framework="tensorflow|mxnet|pytorch",
    params:
        py=PY["workflow"],
    retries: 0
    conda:
        "../envs/workflow.yaml"
    shell:
        "{params.py:q} -m workflow_scripts.preflight.gate --results {input.results:q} --ok {output:q}"


rule preflight:
    input:
        rules.preflight_table.output,
        PREFLIGHT_OKS,
