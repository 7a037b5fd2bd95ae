# The sweep's price before it is submitted (workflow_scripts/plan/price.py): `snakemake price`.
# config budget_gpu_hours refuses, when the workflow is parsed, a plan that reserves more.

from workflow_scripts.plan import price as plan_price  # noqa: E402
from workflow_scripts.plan.preflight_measured import Measured  # noqa: E402

# Every job `all` submits, stage by stage: the files its jobs write, as the plan objects and the
# rules' own inputs list them, and the resources their rules ask SLURM for. Which job writes a file
# is Snakemake's own matching (plan_price.producer); a job without a runtime of its own gets the
# profile's default-resources one, as it does when submitted.
PRICE_READER = plan_price.Reader(
    config,
    plan_price.producer(workflow.rules),
    plan_price.default_minutes(workflow.resource_settings.default_resources),
)
# Preflight's jobs are the checks its tables read (rules/preflight.smk); their results, where they
# exist, are what the estimates and the time limits' suggestions come from.
PREFLIGHT_PRICED = [*rules.preflight_table.input, *rules.preflight_data_table.input]
PREFLIGHT_MEASURED = Measured(config, PREFLIGHT_PRICED)
INT8_PRICED_ENGINES = expand(
    rules.int8_engine.output.engine, model=INT8_MODELS, engine=ENGINE, precision=["fp32", "int8"]
)
PRICE_JOBS = plan_price.done(
    [
        *plan_price.training_jobs(PRICE_READER, SWEEP, POINT_RESOURCES, PLAN.point_group, measured=PREFLIGHT_MEASURED),
        *plan_price.long_test_jobs(
            PRICE_READER, LONG_TEST, LONG_TEST_RESOURCES, LONG_TEST_CONFIG["max_jobs"], PREFLIGHT_MEASURED
        ),
        *plan_price.measured_checks(
            PRICE_READER.jobs("preflight", PREFLIGHT_PRICED, POINT_RESOURCES), PREFLIGHT_MEASURED
        ),
        *plan_price.unmeasured(
            PRICE_READER.jobs("interconnect", rules.interconnect_table.input, POINT_RESOURCES),
            "nothing preflight measures times the interconnect's collectives",
        ),
        *PRICE_READER.jobs("data", rules.embedded_dataset.output if EMBEDDED else [], {}),
        *PRICE_READER.jobs("data", [*rules.index_dataset.output, *rules.data.input], CPU_JOB_RESOURCES),
        *PRICE_READER.jobs(
            "INT8",
            [*rules.int8_accuracy.input.infos, *expand(rules.int8_calibrate.output[0], model=INT8_MODELS)],
            INT8_CPU_RESOURCES,
        ),
        *PRICE_READER.jobs("INT8", rules.int8_accuracy.input.caches, {}),
        *PRICE_READER.jobs(
            "INT8", [*INT8_PRICED_ENGINES, *rules.int8_accuracy.input.evals], INT8_RESOURCES, INFER_SYSTEM
        ),
        # one job writes every record of Fig. 9: priced once, by its first
        *PRICE_READER.jobs("INT8", rules.int8_throughput_run.output[:1], INT8_TIMED_RESOURCES, INFER_SYSTEM),
        *PRICE_READER.jobs("INT8", INT8_ENGINE_CHECKS, INT8_PLAN.check_resources(), INFER_SYSTEM),
    ],
    os.path.exists,
)
if not IN_SLURM_JOB and not plan_price.targets_only_price(sys.argv, [*(r.name for r in workflow.rules), "price"]):
    stop_on_problem(plan_price.check_budget, PRICE_JOBS, config["budget_gpu_hours"])


rule price:
    # The plan exists only in this process: written from here (a local rule, seconds), not passed to
    # a command line a hundred jobs long.
    output:
        md=f"{RESULTS}/price.md",
        json=f"{RESULTS}/price.json",
    log:
        f"{LOGS}/price.log",
    benchmark:
        f"{LOGS}/price.bench.tsv"
    conda:
        "../envs/workflow.yaml"
    params:
        jobs=PRICE_JOBS,
        preflight_found=PREFLIGHT_MEASURED.found,
    run:
        plan_price.write(params.jobs, output.md, output.json, log[0], params.preflight_found)
