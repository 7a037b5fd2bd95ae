# Preflight (`snakemake preflight`): every system x framework of the sweep checked in minutes,
# launched exactly as its training runs are (launcher, interpreter or container, srun geometry,
# SLURM resources), on one node with all its tasks and, where the sweep crosses nodes, on two.
# A pair's training and interconnect jobs wait for its gate file, written only when every check
# passed, so a broken pair stops the workflow once, with its cause, before any run queues.


from workflow_scripts.plan.input_plan import InputPlan  # noqa: E402
from workflow_scripts.plan.preflight_plan import PreflightPlan  # noqa: E402

# Which checks the sweep needs and what a training job waits for (plan/preflight_plan.py); the data
# check's input check measures what plan/input_plan.py says.
PREFLIGHT = PreflightPlan(config, PLAN, SWEEP, LONG_TEST_GPUS, COMMANDS.env_keys, InputPlan(config, PLAN, COMMANDS))
PREFLIGHT_RESULTS = PREFLIGHT.results_all()
PREFLIGHT_OKS = PREFLIGHT.oks()
# The dataset is checked by a job of its own, so that the environment checks need no conversion
# (hours on ILSVRC2012): `snakemake preflight` checks the data of the formats already converted.
PAIRS_READING = PREFLIGHT.pairs_reading()
CONVERTED_NOW = PREFLIGHT.converted_now(os.path.exists)
PREFLIGHT_DATA_RESULTS = [PREFLIGHT.data_result(s, f) for s, f in PAIRS_READING]
PREFLIGHT_INPUT_RESULTS = [PREFLIGHT.data_result(s, f, "input") for s, f in PAIRS_READING]
ALL_CONVERTED_NOW = len(CONVERTED_NOW) == len(PAIRS_READING)
PREFLIGHT_DATA_OKS_NOW = [PREFLIGHT.ok(s, f, "data") for s, f in CONVERTED_NOW]


rule preflight_check:
    output:
        f"{RESULTS}/preflight/{{system}}/{{framework}}/{{gpus}}gpu.json",
    log:
        f"{LOGS}/preflight/{{system}}/{{framework}}_{{gpus}}gpu.log",
    benchmark:
        f"{LOGS}/preflight/{{system}}/{{framework}}_{{gpus}}gpu.bench.tsv"
    wildcard_constraints:
        system=r"[^/]+",
        framework=frameworks.wildcard(),
        gpus=r"\d+",
    # before the conversions where both are ready: a broken environment is found in minutes
    priority: 50
    # A failed check is the answer, not a fluke: the job writes it and never runs again by itself.
    retries: 0
    conda:
        lambda w: conda_env(w.framework)
    threads: POINTS.point_threads
    resources:
        **POINT_RESOURCES,
    params:
        py=PY["workflow"],
        python=POINTS.train_python,
        launch=POINTS.launcher_args,
        args=PREFLIGHT.args,
        data="",
        cache_clear_command=TRAIN["cache_clear_command"],
        cache_clear=TRAIN["cache_clear"],
        # the ranks' CUDA JIT cache, as the training runs have it: their first kernels compile into it
        cuda_cache=TRAIN["cuda_cache_dir"],
    shell:
        "{params.py:q} -m workflow_scripts.preflight.preflight_job --out {output:q} --system {wildcards.system:q} "
        "--framework {wildcards.framework:q} --python={params.python:q} --data={params.data:q} "
        "--cache-clear-command={params.cache_clear_command:q} --cache-clear={params.cache_clear:q} --log {log:q} {params.args:q} "
        "-- --cuda-cache-dir={params.cuda_cache:q} {params.launch:q}"


# The dataset, once converted: its manifest, a sample of its records and its files readable, from
# the pair's first node as its runs see them.
use rule preflight_check as preflight_data_check with:
    input:
        data=POINTS.dataset_of,
    output:
        f"{RESULTS}/preflight/{{system}}/{{framework}}/{{gpus}}gpu.data.json",
    log:
        f"{LOGS}/preflight/{{system}}/{{framework}}_{{gpus}}gpu.data.log",
    benchmark:
        f"{LOGS}/preflight/{{system}}/{{framework}}_{{gpus}}gpu.data.bench.tsv"
    priority: 0
    # params: the base rule's, but these (use rule ... with: replaces only the keys it names)
    params:
        args=PREFLIGHT.data_args,
        data=lambda w, input: folders_of(input.data)[0],


# The input check (docs/preflight.md#the-input-check): the trainer on real data through each input
# path beside its run on synthetic data, once the pair's data check passed. Only the tables read it:
# no gate waits for it.
use rule preflight_check as preflight_input_check with:
    input:
        data=POINTS.dataset_of,
        passed=lambda w: ancient(PREFLIGHT.ok(w.system, w.framework, "data")),
    output:
        f"{RESULTS}/preflight/{{system}}/{{framework}}/{{gpus}}gpu.input.json",
    log:
        f"{LOGS}/preflight/{{system}}/{{framework}}_{{gpus}}gpu.input.log",
    benchmark:
        f"{LOGS}/preflight/{{system}}/{{framework}}_{{gpus}}gpu.input.bench.tsv"
    priority: 0
    params:
        args=PREFLIGHT.input_args,
        data=lambda w, input: folders_of(input.data)[0],


rule preflight_table:
    input:
        PREFLIGHT_RESULTS,
    output:
        csv=report(f"{RESULTS}/preflight.csv", caption="../report/preflight.rst", category="Preflight"),
        markdown=report(f"{RESULTS}/preflight.md", caption="../report/preflight.rst", category="Preflight"),
    log:
        f"{LOGS}/preflight/table.log",
    benchmark:
        f"{LOGS}/preflight/table.bench.tsv"
    conda:
        "../envs/workflow.yaml"
    params:
        py=PY["workflow"],
        judge=[],
    shell:
        "{params.py:q} -m workflow_scripts.preflight.table --results {input:q} --out {output.csv:q} {params.judge:q} "
        "> {log:q} 2>&1"


# The data checks' rows, in a table of their own: one that waited for them would wait for every
# conversion, and one whose inputs grew once the data was there would be planned again on the next run.
use rule preflight_table as preflight_data_table with:
    input:
        PREFLIGHT_DATA_RESULTS,
        PREFLIGHT_INPUT_RESULTS,
    output:
        csv=report(f"{RESULTS}/preflight_data.csv", caption="../report/preflight.rst", category="Preflight"),
        markdown=report(f"{RESULTS}/preflight_data.md", caption="../report/preflight.rst", category="Preflight"),
    log:
        f"{LOGS}/preflight/data_table.log",
    benchmark:
        f"{LOGS}/preflight/data_table.bench.tsv"
    params:
        # the input check's rows, judged here: editing the tolerance re-measures nothing
        judge=PREFLIGHT.judge_args(),


# Each system's own table: its gates wait for it, so a check that never returned (its job lost
# with its node) holds back its own system's gates and no other's.
use rule preflight_table as preflight_system_table with:
    input:
        PREFLIGHT.system_results,
    output:
        csv=f"{RESULTS}/preflight/{{system}}.csv",
        markdown=f"{RESULTS}/preflight/{{system}}.md",
    log:
        f"{LOGS}/preflight/{{system}}/table.log",
    benchmark:
        f"{LOGS}/preflight/{{system}}/table.bench.tsv"


rule preflight_gate:
    input:
        # after its system's table, so that it lists every pair even when this one stops the
        # workflow (a table rewritten for another pair does not rerun this gate)
        table=ancient(f"{RESULTS}/preflight/{{system}}.csv"),
        results=PREFLIGHT.gate_results,
    output:
        f"{RESULTS}/preflight/{{system}}/{{framework}}.ok",
    log:
        f"{LOGS}/preflight/{{system}}/{{framework}}.gate.log",
    benchmark:
        f"{LOGS}/preflight/{{system}}/{{framework}}.gate.bench.tsv"
    wildcard_constraints:
        system=r"[^/]+",
        framework=frameworks.wildcard(),
    retries: 0
    conda:
        "../envs/workflow.yaml"
    params:
        py=PY["workflow"],
    shell:
        # the failure's one line goes to the workflow's own output (gate.py writes the log itself)
        "{params.py:q} -m workflow_scripts.preflight.gate --results {input.results:q} --ok {output:q} " "--log {log:q}"


use rule preflight_gate as preflight_data_gate with:
    input:
        results=lambda w: PREFLIGHT.data_result(w.system, w.framework),
    output:
        f"{RESULTS}/preflight/{{system}}/{{framework}}.data.ok",
    log:
        f"{LOGS}/preflight/{{system}}/{{framework}}.data.gate.log",
    benchmark:
        f"{LOGS}/preflight/{{system}}/{{framework}}.data.gate.bench.tsv"


rule preflight:
    input:
        rules.preflight_table.output,
        # TensorRT's imports in a container route, on a node (rules/int8.smk, included later)
        lambda w: INT8_ENGINE_CHECKS,
        PREFLIGHT_OKS,
        PREFLIGHT_DATA_OKS_NOW,
        # its table once every format is converted (one still to convert would be converted now)
        rules.preflight_data_table.output if PREFLIGHT_DATA_RESULTS and ALL_CONVERTED_NOW else [],
