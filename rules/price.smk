# The sweep's price before it is submitted (workflow_scripts/plan/price.py): `snakemake price`.
# config budget_gpu_hours refuses, when the workflow is parsed, a plan that reserves more.

from workflow_scripts.plan import price as plan_price  # noqa: E402

PRICE_JOBS = plan_price.plan_jobs(config, SWEEP, LONG_TEST, placement, PREFLIGHT.gpus, PLAN.point_group)
if not IN_SLURM_JOB and not plan_price.targets_only_price(sys.argv, [*(r.name for r in workflow.rules), "price"]):
    parse_time(plan_price.check_budget, PRICE_JOBS, config["budget_gpu_hours"])


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
    run:
        plan_price.write(params.jobs, output.md, output.json, log[0])
