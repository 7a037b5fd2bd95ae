# The inference stage's results (paper section V), from rules/int8.smk's engines and evaluations:
# Table III's accuracy table, Fig. 9's timed runs and their table, and `snakemake int8`.


rule int8_accuracy:
    input:
        evals=expand(
            f"{INT8}/{{model}}/{ENGINE}/{{precision}}.eval.json", model=INT8_MODELS, precision=["fp32", "int8"]
        ),
        caches=expand(rules.int8_quantize.output.cache, model=INT8_MODELS),
        infos=expand(rules.int8_export.output.info, model=INT8_MODELS),
    output:
        csv=report(
            f"{RESULTS}/{stage_outputs.INT8_ACCURACY}.csv",
            caption=stage_outputs.caption(stage_outputs.INT8_ACCURACY),
            category="Inference",
        ),
        md=f"{RESULTS}/{stage_outputs.INT8_ACCURACY}.md",
    log:
        f"{LOGS}/int8/accuracy.log",
    benchmark:
        f"{LOGS}/int8/accuracy.bench.tsv"
    conda:
        "../envs/workflow.yaml"
    params:
        py=PY["workflow"],
        root=lambda w, output: Path(output.csv).parent / "int8",  # INT8: the stage's folder beside the table
        engine=ENGINE,
        models=INT8_MODELS,
    shell:
        "{params.py:q} -m workflow_scripts.int8.int8_tables accuracy --root {params.root:q} --engine {params.engine:q} "
        "--models {params.models:q} --csv {output.csv:q} --md {output.md:q} > {log:q} 2>&1"


# Timed runs (Fig. 9): one job times every network and batch size of inference.throughput in turn,
# each pair of FP32 and INT8 engines alternately in one process, so that a ratio never spans two
# devices or nodes, each pair with its own warm-up and its own record (int8/timing_job.py). It is a
# measuring job: run locally it takes every core snakemake has, so nothing of the workflow runs
# beside it; through SLURM it takes its node alone, for a time limit of minutes from its estimate
# with TensorRT (plan/int8_plan.py, resources, timing_minutes). ONNX Runtime's threads stay
# inference.threads, capped at those cores (inside a SLURM job at the CPUs of its allocation:
# --cpus-per-task): a param, so the timings rerun when the thread count changes, and only then.
rule int8_throughput_run:
    input:
        expand(
            f"{INT8}/{{model}}/{ENGINE}/{{precision}}.engine", model=THROUGHPUT["models"], precision=["fp32", "int8"]
        ),
    output:
        expand(f"{INT8}/{{model}}/{ENGINE}/throughput/bs{{bs}}.json", model=THROUGHPUT["models"], bs=BATCH_SIZES),
    log:
        f"{LOGS}/int8/throughput_{INFER_SYSTEM}_{ENGINE}.log",
    benchmark:
        f"{LOGS}/int8/throughput_{INFER_SYSTEM}_{ENGINE}.bench.tsv"
    conda:
        "../envs/torch.yaml"
    threads: POINTS.threads_to_run_alone(INFER["threads"])
    resources:
        **INT8_TIMED_RESOURCES,
    params:
        py=INT8_PY,
        engine=ENGINE,
        pairs=INT8_PLAN.timing_pairs(),
        batch_sizes=BATCH_SIZES,
        image_size=INFER["image_size"],
        warmup=THROUGHPUT["warmup"],
        repeats=THROUGHPUT["repeats"],
        engine_threads=lambda w, threads: INT8_PLAN.engine_threads(threads, workflow.local_exec),
        # as configured too: engine_threads is capped at a local run's cores, and an edit of the key
        # must rerun the timings wherever they ran
        threads_asked=INFER["threads"],
        durations=INT8_PLAN.durations,
    shell:
        "{params.py:q} -m workflow_scripts.int8.timing_job --engine {params.engine:q} {params.pairs:q} "
        "--batch-sizes {params.batch_sizes:q} --image-size {params.image_size:q} "
        "--warmup {params.warmup:q} --repeats {params.repeats:q} "
        "--threads {params.engine_threads:q} --cpus-per-task {resources.cpus_per_task:q} {params.durations:q} "
        "> {log:q} 2>&1"


rule int8_throughput:
    input:
        expand(
            f"{INT8}/{{model}}/{ENGINE}/throughput/bs{{bs}}.json",
            model=THROUGHPUT["models"],
            bs=BATCH_SIZES,
        ),
    output:
        csv=report(
            f"{RESULTS}/{stage_outputs.INT8_THROUGHPUT}.csv",
            caption=stage_outputs.caption(stage_outputs.INT8_THROUGHPUT),
            category="Inference",
        ),
        md=f"{RESULTS}/{stage_outputs.INT8_THROUGHPUT}.md",
    log:
        f"{LOGS}/int8/throughput.log",
    benchmark:
        f"{LOGS}/int8/throughput.bench.tsv"
    conda:
        "../envs/workflow.yaml"
    params:
        py=PY["workflow"],
        root=lambda w, output: Path(output.csv).parent / "int8",  # INT8: the stage's folder beside the table
        engine=ENGINE,
        models=THROUGHPUT["models"],
        batch_sizes=BATCH_SIZES,
    shell:
        "{params.py:q} -m workflow_scripts.int8.int8_tables throughput --root {params.root:q} --engine {params.engine:q} "
        "--models {params.models:q} --batch-sizes {params.batch_sizes:q} --csv {output.csv:q} --md {output.md:q} > {log:q} 2>&1"


rule int8:
    input:
        rules.int8_accuracy.output,
        rules.int8_throughput.output,
