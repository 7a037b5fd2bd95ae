# The training stage: ResNet-50 data-parallel training per framework from its own format,
# one job per sweep point (system x framework x precision x GPU count). Paper section IV.


rule train:
    input:
        data=training_data,
    output:
        f"{RESULTS}/runs/{{system}}/{{framework}}_{{precision}}_{{gpus}}gpu/summary.json",
    wildcard_constraints:
        framework="tensorflow|mxnet|pytorch",
        precision="fp32|fp16",
        gpus=r"\d+",
    params:
        py=lambda w: PY[w.framework],
        run_dir=lambda w, output: os.path.dirname(output[0]),
        trainer=lambda w: TRAINER_OF[w.framework],
        args=trainer_args,
        launch=launcher_args,
        cache_command=TRAIN["cache_clear_command"],
    threads: lambda w: int(w.gpus)
    log:
        f"{LOGS}/train/{{system}}/{{framework}}_{{precision}}_{{gpus}}gpu.log",
    benchmark:
        f"{LOGS}/train/{{system}}/{{framework}}_{{precision}}_{{gpus}}gpu.bench.tsv"
    conda:
        lambda w: "../envs/torch.yaml" if w.framework == "pytorch" else "../envs/tf-mxnet.yaml"
    shell:
        "rm -rf {params.run_dir} && mkdir -p {params.run_dir} && "
        "{params.py} -m workflow_scripts.common.page_cache --paths {input.data} "
        "--command={params.cache_command:q} --out {params.run_dir}/cache.{{node}}.json > {log} 2>&1 && "
        "{params.py} -m workflow_scripts.train.launch {params.launch} -- "
        "{params.py} -m workflow_scripts.train.{params.trainer} {params.args} --out {params.run_dir} >> {log} 2>&1"


rule training:
    input:
        TRAINING_RUNS,
