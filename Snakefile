# dlscale: re-run "Deep Learning at Scale on NVIDIA V100 Accelerators" (PMBS18) on any SLURM GPU
# cluster, or end to end on a laptop with the embedded default dataset. See README.md.

import sys

from snakemake.exceptions import WorkflowError

sys.path.insert(0, workflow.basedir)
from workflow_scripts.plan.config_checks import yaml_problem  # noqa: E402
from workflow_scripts.preflight import table as preflight_table  # noqa: E402

# Snakemake's own message for a config.yaml it cannot read names neither the file nor the line (a
# file given with --configfile is read before this one, by Snakemake alone).
if yaml_problem("config.yaml"):
    raise WorkflowError(yaml_problem("config.yaml"))


configfile: "config.yaml"


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/preflight.smk"
include: "rules/train.smk"
include: "rules/int8.smk"
include: "rules/int8_results.smk"
include: "rules/interconnect.smk"
include: "rules/predict.smk"
include: "rules/results.smk"
include: "rules/price.smk"


# Every stage has noted the interpreters it needs: those not built yet are named, or refused, here.
main_process.settle_unbuilt(UNBUILT, stop_on_problem)


# Seconds of work on files the jobs already wrote (gate files, the val split, tables, figures, the
# verdict): run where snakemake runs, not queued on a cluster (docs/slurm.md#how-jobs-run).
localrules:
    price,
    preflight_gate,
    preflight_data_gate,
    preflight_table,
    preflight_system_table,
    preflight_data_table,
    int8_split,
    int8_weights,
    int8_accuracy,
    int8_throughput,
    interconnect_table,
    interconnect_figure,
    scaling_prediction,
    study_on_paper,
    training_tables,
    training_figures,
    time_to_accuracy,
    time_to_accuracy_figure,
    inference_figures,
    conclusions,


rule all:
    default_target: True
    input:
        rules.data.input,
        rules.preflight.input,
        # the data checks' table: `all` converts the data (`preflight` alone, only once converted)
        rules.preflight_data_table.output if PREFLIGHT_DATA_RESULTS else [],
        rules.training.input,
        rules.int8.input,
        rules.results_tables.input,
        rules.interconnect.input,
        rules.predict.input,


# Two runs in one directory would run the same jobs side by side: the second stops here, naming the
# first (rules/common.smk). Through SLURM a TERM from now on stops the workflow and cancels its jobs,
# which Snakemake's own TERM would wait for (cluster/workflow_stop.py); its scheduler has set its
# handler by now, so this one replaces it.
onstart:
    main_process.take_workflow_lock(workflow, WorkflowError)
    main_process.stop_on_term(workflow)


# The tables written without a point whose nodes were down: say whether it has run since, so that
# the next command writes them again with it (plan/waiting.py).
onsuccess:
    for line in WAITING.end_lines(EVERY_WAITING_POINTS, *EVERY_OUTPUT):
        print(line, file=sys.stderr)


# A preflight check that returned nothing holds back its own system's gates only: say which, since
# snakemake's own message names the failed job, not what waits for it. A data check that failed
# stopped the workflow before its table: written now, so it does not keep the rows of the last one.
onerror:
    for line in preflight_gate.unreturned(
        [*PREFLIGHT_RESULTS, *PREFLIGHT_DATA_RESULTS, *PREFLIGHT_INPUT_RESULTS], LOGS
    ):
        print(line, file=sys.stderr)
    for line in preflight_table.write_stopped(
        PREFLIGHT_DATA_RESULTS,
        PREFLIGHT_INPUT_RESULTS,
        rules.preflight_data_table.output.csv,
        [*PY["workflow"], "-m", "workflow_scripts.preflight.table", *PREFLIGHT.judge_args()],
    ):
        print(line, file=sys.stderr)
