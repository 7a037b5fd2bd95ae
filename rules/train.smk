# The training stage: ResNet-50 data-parallel training per framework from its own format,
# one job per sweep point (system x framework x precision x GPU count). Paper section IV.
# On a cluster each run is one SLURM job of `nodes` x `gpus_per_node` tasks (srun inside it);
# locally the same launcher starts child processes.


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
        retries=TRAIN["retries"],
    threads: lambda w: int(w.gpus)
    retries: TRAIN["retries"]
    resources:
        nodes=lambda w: placement(w.system, int(w.gpus))[0],
        tasks=lambda w: int(w.gpus),
        # The job step then runs this shell as it is, and the launcher calls srun (one task per
        # GPU); the plugin accepts mpi only for more than one task.
        mpi=lambda w: "srun" if int(w.gpus) > 1 else None,
        cpus_per_task=system_value("cpus_per_task", 1),
        mem_mb=system_value("mem_mb", 0),
        runtime=system_value("time_min"),
        slurm_partition=system_value("partition"),
        slurm_account=system_value("account"),
        constraint=system_value("constraint"),
        qos=system_value("qos"),
        gres=slurm_gres,
        tasks_per_gpu=0,
        slurm_extra=slurm_extra,
        attempt=lambda w, attempt: attempt,
    log:
        f"{LOGS}/train/{{system}}/{{framework}}_{{precision}}_{{gpus}}gpu.log",
    benchmark:
        f"{LOGS}/train/{{system}}/{{framework}}_{{precision}}_{{gpus}}gpu.bench.tsv"
    conda:
        lambda w: "../envs/torch.yaml" if w.framework == "pytorch" else "../envs/tf-mxnet.yaml"
    shell:
        # Snakemake deletes {log} before a retry, so each attempt also writes its own
        # {log}.attempt<N>, which survives. Page caches are cleared on every node of the run.
        "attempt_log={log}.attempt{resources.attempt}; rc=0; "
        "( echo \"attempt {resources.attempt} on $(hostname), SLURM job ${{SLURM_JOB_ID:-none}}\" && "
        "rm -rf {params.run_dir} && mkdir -p {params.run_dir} && "
        "{params.py} -m workflow_scripts.train.launch --per-node {params.launch} -- "
        "{params.py} -m workflow_scripts.common.page_cache --paths {input.data} "
        "--command={params.cache_command:q} --out {params.run_dir}/cache.{{node}}.json && "
        "{params.py} -m workflow_scripts.train.launch {params.launch} -- "
        "{params.py} -m workflow_scripts.train.{params.trainer} {params.args} --out {params.run_dir} "
        ") > $attempt_log 2>&1 || rc=$?; cp $attempt_log {log}; "
        # The last attempt's failure becomes the run's result (status failed, and why), so the
        # tables list it rather than the sweep stopping short of them.
        "if [ $rc -ne 0 ] && [ {resources.attempt} -gt {params.retries} ]; then "
        "{params.py} -m workflow_scripts.train.failure --out {params.run_dir} --log $attempt_log "
        "--attempts {resources.attempt} --exit-code $rc; rc=0; fi; exit $rc"


rule training:
    input:
        TRAINING_RUNS,
