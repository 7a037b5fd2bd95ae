# dlscale: re-run "Deep Learning at Scale on NVIDIA V100 Accelerators" (PMBS18) on any SLURM GPU
# cluster, or end to end on a laptop with the embedded default dataset. See README.md.

configfile: "config.yaml"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/train.smk"


rule all:
    input:
        rules.data.input,
        rules.training.input,
    default_target: True
