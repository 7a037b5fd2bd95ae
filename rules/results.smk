# The tables and figures from the runs (the study's Fig. 2, 4-8, Table III, Fig. 9; the scale-out
# whitepaper's long test, Fig. 35), and the captions `snakemake --report report.html` shows them with.


TRAINING_TABLES = training_outputs.TABLES  # named once, with their writers (results/training_outputs.py)
# The points each output is written without while they wait for their nodes (rules/common.smk).
TRAINING_WAITING = json.dumps(WAITING.waiting((SWEEP, run_files), (IC_ALLREDUCE, interconnect_files)))
LONG_TEST_WAITING = json.dumps(WAITING.waiting((LONG_TEST, run_files)))
EVERY_OUTPUT = ((SWEEP, run_files), (LONG_TEST, run_files), (IC_POINTS, interconnect_files))
EVERY_WAITING_POINTS = WAITING.waiting(*EVERY_OUTPUT)
EVERY_WAITING = json.dumps(EVERY_WAITING_POINTS)
# The INT8 stage's tables, where its weights come from a run still waiting: the verdict does not wait
# for them either, and says which findings they will decide.
INT8_HELD = ["int8_accuracy", "int8_throughput"] if INT8_PLAN.weights_waiting() else []
TRAINING_FIGURES = training_outputs.FIGURES


rule training_tables:
    input:
        runs=TABLE_RUNS,
        interconnect=[p["raw"] for p in TABLE_IC_ALLREDUCE],
        # preflight's input check: the runs it finds input-bound carry that caveat
        preflight=PREFLIGHT_INPUT_RESULTS,
    output:
        **{
            t: report(
                f"{RESULTS}/{t}.csv", caption=training_outputs.caption(t), category="Training", subcategory="Tables"
            )
            for t in TRAINING_TABLES
        },
        markdown=[f"{RESULTS}/{t}.md" for t in TRAINING_TABLES],
    log:
        f"{LOGS}/results/training_tables.log",
    benchmark:
        f"{LOGS}/results/training_tables.bench.tsv"
    conda:
        "../envs/workflow.yaml"
    params:
        py=PY["workflow"],
        points=json.dumps(TABLE_SWEEP),
        interconnect=json.dumps(TABLE_IC_ALLREDUCE),
        waiting=TRAINING_WAITING,
        judge=PREFLIGHT.judge_args(),
        out_dir=lambda w, output: os.path.dirname(output.training_throughput),
    shell:
        "{params.py:q} -m workflow_scripts.results.training_tables --points {params.points:q} "
        "--interconnect {params.interconnect:q} --preflight {input.preflight:q} {params.judge:q} "
        "--waiting {params.waiting:q} --out-dir {params.out_dir:q} > {log:q} 2>&1"


rule training_figures:
    input:
        rules.training_tables.output,
    output:
        **{
            f: report(
                f"{RESULTS}/figures/{f}.png",
                caption=training_outputs.caption(f),
                category="Training",
                subcategory="Figures",
            )
            for f in TRAINING_FIGURES
        },
    log:
        f"{LOGS}/results/training_figures.log",
    benchmark:
        f"{LOGS}/results/training_figures.bench.tsv"
    conda:
        "../envs/workflow.yaml"
    params:
        py=PY["workflow"],
        tables=lambda w, input: os.path.dirname(input[0]),
        out_dir=lambda w, output: os.path.dirname(output[0]),
        waiting=TRAINING_WAITING,
    shell:
        "{params.py:q} -m workflow_scripts.results.training_figures --tables {params.tables:q} "
        "--waiting {params.waiting:q} --out-dir {params.out_dir:q} > {log:q} 2>&1"


rule inference_figures:
    input:
        accuracy=rules.int8_accuracy.output.csv,
        throughput=rules.int8_throughput.output.csv,
    output:
        fig9=report(
            f"{RESULTS}/figures/{stage_outputs.FIG9}.png",
            caption=stage_outputs.figure_caption(stage_outputs.FIG9),
            category="Inference",
        ),
        table=report(
            f"{RESULTS}/{stage_outputs.INT8_VS_STUDY}.csv",
            caption=stage_outputs.caption(stage_outputs.INT8_VS_STUDY),
            category="Inference",
        ),
        markdown=f"{RESULTS}/{stage_outputs.INT8_VS_STUDY}.md",
    log:
        f"{LOGS}/results/inference_figures.log",
    benchmark:
        f"{LOGS}/results/inference_figures.bench.tsv"
    conda:
        "../envs/workflow.yaml"
    params:
        py=PY["workflow"],
        out_dir=lambda w, output: os.path.dirname(output.table),
    shell:
        "{params.py:q} -m workflow_scripts.results.inference_figures --accuracy {input.accuracy:q} "
        "--throughput {input.throughput:q} --out-dir {params.out_dir:q} > {log:q} 2>&1"


rule time_to_accuracy:
    input:
        TABLE_LONG_TEST_RUNS,
    output:
        csv=report(
            f"{RESULTS}/{stage_outputs.TIME_TO_ACCURACY}.csv",
            caption=stage_outputs.caption(stage_outputs.TIME_TO_ACCURACY),
            category="Training",
            subcategory="Long test",
        ),
        markdown=f"{RESULTS}/{stage_outputs.TIME_TO_ACCURACY}.md",
    log:
        f"{LOGS}/results/time_to_accuracy.log",
    benchmark:
        f"{LOGS}/results/time_to_accuracy.bench.tsv"
    conda:
        "../envs/workflow.yaml"
    params:
        py=PY["workflow"],
        points=json.dumps(TABLE_LONG_TEST),
        waiting=LONG_TEST_WAITING,
    shell:
        "{params.py:q} -m workflow_scripts.results.time_to_accuracy --points {params.points:q} "
        "--waiting {params.waiting:q} --out {output.csv:q} > {log:q} 2>&1"


rule time_to_accuracy_figure:
    input:
        rules.time_to_accuracy.output.csv,
    output:
        report(
            f"{RESULTS}/figures/{stage_outputs.FIG35}.png",
            caption=stage_outputs.figure_caption(stage_outputs.FIG35),
            category="Training",
            subcategory="Long test",
        ),
    log:
        f"{LOGS}/results/time_to_accuracy_figure.log",
    benchmark:
        f"{LOGS}/results/time_to_accuracy_figure.bench.tsv"
    conda:
        "../envs/workflow.yaml"
    params:
        py=PY["workflow"],
        waiting=LONG_TEST_WAITING,
    shell:
        "{params.py:q} -m workflow_scripts.results.accuracy_figure --table {input:q} --waiting {params.waiting:q} "
        "--out {output:q} > {log:q} 2>&1"


# `snakemake long_test`: the scale-out whitepaper's long test alone (its runs, table and figure).
rule long_test:
    input:
        rules.time_to_accuracy.output,
        rules.time_to_accuracy_figure.output,


# The study's findings against this run's tables, one verdict each (workflow_scripts/results/
# study_findings.yaml). Category "Conclusions" sorts first of the report's categories, which the
# report lists alphabetically: the first thing a reader sees is whether the study holds here.
rule conclusions:
    input:
        scaling=rules.training_tables.output.scaling,
        training_throughput=rules.training_tables.output.training_throughput,
        fp16_vs_fp32=rules.training_tables.output.fp16_vs_fp32,
        system_comparison=rules.training_tables.output.system_comparison,
        storage_throughput=rules.training_tables.output.storage_throughput,
        network_throughput=rules.training_tables.output.network_throughput,
        int8_accuracy=[] if INT8_HELD else rules.int8_accuracy.output.csv,
        int8_throughput=[] if INT8_HELD else rules.int8_throughput.output.csv,
        time_to_accuracy=rules.time_to_accuracy.output.csv,
        # its predicted column: the scaling findings at GPU counts this sweep did not run
        scaling_prediction=rules.scaling_prediction.output.csv,
    output:
        csv=report(
            f"{RESULTS}/{stage_outputs.CONCLUSIONS}.csv",
            caption=stage_outputs.caption(stage_outputs.CONCLUSIONS),
            category="Conclusions",
        ),
        markdown=f"{RESULTS}/{stage_outputs.CONCLUSIONS}.md",
    log:
        f"{LOGS}/results/conclusions.log",
    benchmark:
        f"{LOGS}/results/conclusions.bench.tsv"
    conda:
        "../envs/workflow.yaml"
    params:
        py=PY["workflow"],
        tables=lambda w, input: os.path.dirname(input.scaling),
        waiting=EVERY_WAITING,
        held=["--held", *INT8_HELD] if INT8_HELD else [],
    shell:
        "{params.py:q} -m workflow_scripts.results.conclusions --tables {params.tables:q} {params.held:q} "
        "--prediction {input.scaling_prediction:q} --waiting {params.waiting:q} --out {output.csv:q} > {log:q} 2>&1"


rule results_tables:
    input:
        rules.conclusions.output,
        rules.training_tables.output,
        rules.training_figures.output,
        rules.time_to_accuracy.output,
        rules.time_to_accuracy_figure.output,
        rules.inference_figures.output,
        rules.interconnect.input,
        rules.predict.input,
