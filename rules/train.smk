# The training stage: ResNet-50 data-parallel training per framework from its own format,
# one job per sweep run (system x framework x precision x GPU count x repeat). Paper section IV.
# On a cluster a run takes `nodes` x `gpus_per_node` tasks (srun inside its job), and a point's
# repeats share one SLURM job, in turn (workflow_scripts/plan/point_jobs.py, job_group); locally the same launcher
# starts child processes.


rule train:
    input:
        data=POINTS.training_data,
        # every converted file matched its manifest's sha256 (rules/data.smk, data_check)
        checked=POINTS.data_checked,
        # the pair's preflight passed (rules/preflight.smk)
        preflight=lambda w: ancient(PREFLIGHT.passed(w)),
        previous=lambda w: ancient(POINTS.previous_log(w)),
    output:
        f"{RESULTS}/runs/{{system}}/{{framework}}_{{precision}}_{{gpus}}gpu{{variant}}{{rep}}/summary.json",
    log:
        f"{LOGS}/train/{{system}}/{{framework}}_{{precision}}_{{gpus}}gpu{{variant}}{{rep}}.log",
    benchmark:
        f"{LOGS}/train/{{system}}/{{framework}}_{{precision}}_{{gpus}}gpu{{variant}}{{rep}}.bench.tsv"
    wildcard_constraints:
        system="[^/]+",  # runs/<system>/accuracy/... is the long test's
        framework=frameworks.wildcard(),
        precision="fp32|fp16",
        gpus=r"\d+",
        # the input path, when it is not the framework's default (workflow_scripts/plan/sweep.py, input_suffix)
        variant=r"(_(cpu|gpu|dali|synthetic))?",
        # a point's second and later runs (training.repeats; workflow_scripts/plan/sweep.py, repeat_suffix)
        rep=r"(_rep\d+)?",
    retries: TRAIN["retries"]
    group:
        POINTS.job_group
    conda:
        lambda w: conda_env(w.framework)
    threads: POINTS.point_threads
    resources:
        **POINT_RESOURCES,
        attempt=lambda w, attempt: attempt,
        # the progress watchdog's limits (changing them reruns nothing)
        hang_start_s=TRAIN["hang_start_s"],
        hang_idle_s=TRAIN["hang_idle_s"],
    params:
        # train/training_job.py runs in the workflow's environment; the framework's interpreter (or
        # container) starts the rendezvous and the ranks.
        py=PY["workflow"],
        python=POINTS.train_python,
        run_dir=lambda w, output: os.path.dirname(output[0]),
        # the copy's folder: its files' page cache is cleared (workflow_scripts/cluster/page_cache.py)
        data=lambda w, input: folders_of(input.data),
        # results_dir (output = <results_dir>/runs/<system>/<run>/summary.json)
        results_dir=lambda w, output: Path(output[0]).parents[3],
        trainer=POINTS.trainer_module,
        args=POINTS.trainer_args,
        launch=POINTS.launcher_args,
        cache_clear_command=TRAIN["cache_clear_command"],
        cache_clear=TRAIN["cache_clear"],
        cuda_cache=TRAIN["cuda_cache_dir"],
        retries=TRAIN["retries"],
    shell:
        # train/training_job.py: empties the run dir (inside results_dir only), clears the page cache on
        # every node, starts the ranks; each attempt keeps its own {log}.attempt<N>; the last
        # attempt's failure becomes the run's result. Every value below is one quoted argument.
        # The CUDA JIT cache's directory and training.retries are params, so changing either
        # reruns every run: moving them to resources now would rerun every sweep already made.
        "{params.py:q} -m workflow_scripts.train.training_job --run-dir {params.run_dir:q} "
        "--results-dir {params.results_dir:q} --log {log:q} --attempt {resources.attempt} "
        "--retries {params.retries} --share-min {resources.runtime:q} --hang-start-s {resources.hang_start_s:q} "
        "--hang-idle-s {resources.hang_idle_s:q} --data {params.data:q} --cache-clear-command={params.cache_clear_command:q} "
        "--cache-clear={params.cache_clear:q} "
        "--python={params.python:q} --cuda-cache-dir={params.cuda_cache:q} {params.launch:q} "
        "-- {params.trainer} {params.args:q}"


rule training:
    input:
        TRAINING_RUNS,


# The scale-out whitepaper's long test (training.long_test): the same job as the sweep's, in a run
# directory of its own, the trainer in mode accuracy (epochs with the step schedule, top-1/top-5 per
# epoch, time to the target). Its arguments are training.long_test's and the shared training keys,
# never the sweep's mode or steps, so each test's edits rerun only its own runs.
use rule train as long_test_run with:
    input:
        data=POINTS.dataset_of,
        checked=POINTS.checked_of,
        preflight=lambda w: ancient(PREFLIGHT.passed(w)),
        fits=lambda w: stop_on_problem(cluster_checks.long_test_inputs, config, LONG_TEST, workflow.local_exec),
    output:
        f"{RESULTS}/runs/{{system}}/accuracy/{{framework}}_{{precision}}_{{gpus}}gpu/summary.json",
    log:
        f"{LOGS}/train/{{system}}/accuracy/{{framework}}_{{precision}}_{{gpus}}gpu.log",
    benchmark:
        f"{LOGS}/train/{{system}}/accuracy/{{framework}}_{{precision}}_{{gpus}}gpu.bench.tsv"
    # Each job resumes the last one's checkpoint (train/checkpoint.py): up to max_jobs jobs, and
    # training.retries attempts that saved nothing.
    retries: TRAIN["retries"] + LONG_TEST_CONFIG["max_jobs"] - 1
    resources:
        **LONG_TEST_RESOURCES,
        attempt=lambda w, attempt: attempt,
        hang_start_s=TRAIN["hang_start_s"],
        hang_idle_s=TRAIN["hang_idle_s"],
    params:
        # results_dir (output = <results_dir>/runs/<system>/accuracy/<run>/summary.json)
        results_dir=lambda w, output: Path(output[0]).parents[4],
        args=POINTS.long_test_args,
