# What the interconnect and the sweep predict past the largest machine run (docs/interconnect.md,
# "Predicting past the largest machine measured"): the all-reduce model fitted to the interconnect
# table and the sweep's runs, for every GPU count up to prediction.max_gpus; and the same model on
# the study's own hardware, from workflow_scripts/predict/paper_figures.yaml alone.

from workflow_scripts.plan.prediction_args import prediction_args


rule scaling_prediction:
    input:
        interconnect=rules.interconnect_table.output.csv,
        runs=TABLE_RUNS,
    output:
        csv=report(
            f"{RESULTS}/{stage_outputs.SCALING_PREDICTION}.csv",
            caption=stage_outputs.caption(stage_outputs.SCALING_PREDICTION),
            category="Interconnect",
        ),
        markdown=f"{RESULTS}/{stage_outputs.SCALING_PREDICTION}.md",
        figure=report(
            f"{RESULTS}/figures/{stage_outputs.FIG_SCALING_PREDICTION}.png",
            caption=stage_outputs.figure_caption(stage_outputs.FIG_SCALING_PREDICTION),
            category="Interconnect",
        ),
    log:
        f"{LOGS}/results/scaling_prediction.log",
    benchmark:
        f"{LOGS}/results/scaling_prediction.bench.tsv"
    conda:
        "../envs/workflow.yaml"
    params:
        py=PY["workflow"],
        points=json.dumps(TABLE_SWEEP),
        waiting=json.dumps(WAITING.waiting((SWEEP, run_files), (IC_POINTS, interconnect_files))),
        # Only the swept systems' own GPUs per node: editing another system reruns nothing.
        systems=json.dumps({s: config["systems"][s]["gpus_per_node"] for s in TRAIN["systems"]}),
        # Every prediction.* key, and nothing else: an edit of one reruns this stage alone (and
        # the verdict table that reads it).
        args=prediction_args(config["prediction"]),
    shell:
        "{params.py:q} -m workflow_scripts.predict.scaling_prediction --interconnect {input.interconnect:q} "
        "--points {params.points:q} --systems {params.systems:q} {params.args:q} --out {output.csv:q} "
        "--figure {output.figure:q} --waiting {params.waiting:q} > {log:q} 2>&1"


rule study_on_paper:
    input:
        str(REPO / "workflow_scripts" / "predict" / "paper_figures.yaml"),
    output:
        csv=report(
            f"{RESULTS}/{stage_outputs.STUDY_ON_PAPER}.csv",
            caption=stage_outputs.caption(stage_outputs.STUDY_ON_PAPER),
            category="Interconnect",
        ),
        markdown=f"{RESULTS}/{stage_outputs.STUDY_ON_PAPER}.md",
    log:
        f"{LOGS}/results/study_on_paper.log",
    benchmark:
        f"{LOGS}/results/study_on_paper.bench.tsv"
    conda:
        "../envs/workflow.yaml"
    params:
        py=PY["workflow"],
    shell:
        "{params.py:q} -m workflow_scripts.predict.study_on_paper --yaml {input:q} --out-csv {output.csv:q} "
        "--out-md {output.markdown:q} > {log:q} 2>&1"


# `snakemake predict`: the scaling prediction and the study on paper (and what they read).
rule predict:
    input:
        rules.scaling_prediction.output,
        rules.study_on_paper.output,
