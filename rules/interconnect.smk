# The interconnect stage (the Brookhaven paper, section III and Fig. 2): all-reduce and broadcast
# bandwidth by message size at every system and GPU count > 1 of the training sweep, each measured
# by a job launched exactly as the training run of that point (same launcher, geometry, SLURM
# resources); its all-reduce of the gradients' size then explains the runs' scaling (scaling.csv).


from workflow_scripts.plan.interconnect_plan import InterconnectPlan  # noqa: E402

# What config.yaml's interconnect section means for each sweep point (plan/interconnect_plan.py).
IC = InterconnectPlan(config, PLAN, REPO, UNBUILT)
stop_on_problem(IC.check)
stop_on_problem(IC.note_envs)
NCCL_TESTS = IC.nccl_tests
IC_POINTS = IC.points()
# The measurements scaling.csv's predictions read: the all-reduces at each system and GPU count > 1.
IC_ALLREDUCE = IC.allreduce()
# Those the tables read now, and the points they are written without (rules/common.smk, WAITING).
TABLE_IC_POINTS = WAITING.ready(IC_POINTS, interconnect_files)
TABLE_IC_ALLREDUCE = WAITING.ready(IC_ALLREDUCE, interconnect_files)
IC_WAITING = json.dumps(WAITING.waiting((IC_POINTS, interconnect_files)))


rule interconnect_collectives:
    input:
        preflight=lambda w: ancient(PREFLIGHT.passed_system(w)),
    output:
        f"{RESULTS}/interconnect/{{system}}/{{gpus}}gpu/torch.json",
    log:
        f"{LOGS}/interconnect/{{system}}/{{gpus}}gpu.torch.log",
    benchmark:
        f"{LOGS}/interconnect/{{system}}/{{gpus}}gpu.torch.bench.tsv"
    wildcard_constraints:
        system=r"[^/]+",
        gpus=r"\d+",
    conda:
        "../envs/torch.yaml"
    threads: POINTS.point_threads
    resources:
        **POINT_RESOURCES,
    params:
        cuda_cache=TRAIN["cuda_cache_dir"],
        # The launcher runs on the host (it calls srun); the ranks in the system's PyTorch environment.
        launcher=PY["workflow"],
        py=lambda w: stop_on_problem(IC.python, w),
        launch=POINTS.geometry_args,
        args=IC.args,
        device=IC.device,
        nccl_logs=lambda w: IC.nccl_logs(w, "torch"),
    # NCCL's debug files are read once the launcher has returned, not by rank 0 after its last
    # barrier: a file another node writes is sure to be whole on the shared file system only once
    # its process has closed it (NFS' close-to-open consistency), and NCCL closes it at exit.
    shell:
        "{params.launcher:q} -m workflow_scripts.cluster.launcher {params.launch:q} "
        "--cuda-cache-dir={params.cuda_cache:q} --nccl-log-dir={params.nccl_logs:q} -- {params.py:q} "
        "-m workflow_scripts.interconnect.collectives {params.args:q} --device {params.device:q} "
        "--out {output:q} > {log:q} 2>&1 && {params.launcher:q} -m workflow_scripts.cluster.nccl_log "
        "{params.nccl_logs:q} --into {output:q} >> {log:q} 2>&1"


rule interconnect_nccl_tests:
    input:
        preflight=lambda w: ancient(PREFLIGHT.passed_system(w)),
    output:
        f"{RESULTS}/interconnect/{{system}}/{{gpus}}gpu/nccl_tests.json",
    log:
        f"{LOGS}/interconnect/{{system}}/{{gpus}}gpu.nccl_tests.log",
    benchmark:
        f"{LOGS}/interconnect/{{system}}/{{gpus}}gpu.nccl_tests.bench.tsv"
    wildcard_constraints:
        system=r"[^/]+",
        gpus=r"\d+",
    conda:
        "../envs/torch.yaml"
    threads: POINTS.point_threads
    resources:
        **POINT_RESOURCES,
    params:
        cuda_cache=TRAIN["cuda_cache_dir"],
        # A driver on the host; the binaries run in the system's PyTorch environment (IC.nccl_exec).
        py=PY["workflow"],
        build=NCCL_TESTS,
        launch=POINTS.geometry_args,
        args=IC.args,
        exec=IC.nccl_exec,
        srun_mpi=IC.srun_mpi,
        nccl_logs=lambda w: IC.nccl_logs(w, "nccl_tests"),
    shell:
        "{params.py:q} -m workflow_scripts.interconnect.nccl_tests --build={params.build:q} {params.args:q} "
        "{params.launch:q} --exec={params.exec:q} --srun-mpi={params.srun_mpi:q} "
        "--cuda-cache-dir={params.cuda_cache:q} --nccl-log-dir={params.nccl_logs:q} --out {output:q} > {log:q} 2>&1"


rule interconnect_table:
    input:
        torch=[p["torch"] for p in TABLE_IC_POINTS],
        nccl_tests=[p["nccl_tests"] for p in TABLE_IC_POINTS if p["nccl_tests"]],
    output:
        csv=report(
            f"{RESULTS}/{stage_outputs.INTERCONNECT}.csv",
            caption=stage_outputs.caption(stage_outputs.INTERCONNECT),
            category="Interconnect",
        ),
        markdown=f"{RESULTS}/{stage_outputs.INTERCONNECT}.md",
    log:
        f"{LOGS}/results/interconnect_table.log",
    benchmark:
        f"{LOGS}/results/interconnect_table.bench.tsv"
    conda:
        "../envs/workflow.yaml"
    params:
        py=PY["workflow"],
        points=json.dumps(TABLE_IC_POINTS),
        waiting=IC_WAITING,
    shell:
        "{params.py:q} -m workflow_scripts.interconnect.interconnect_table --points {params.points:q} "
        "--waiting {params.waiting:q} --out {output.csv:q} > {log:q} 2>&1"


rule interconnect_figure:
    input:
        rules.interconnect_table.output.csv,
    output:
        report(
            f"{RESULTS}/figures/{stage_outputs.FIG_INTERCONNECT}.png",
            caption=stage_outputs.figure_caption(stage_outputs.FIG_INTERCONNECT),
            category="Interconnect",
        ),
    log:
        f"{LOGS}/results/interconnect_figure.log",
    benchmark:
        f"{LOGS}/results/interconnect_figure.bench.tsv"
    conda:
        "../envs/workflow.yaml"
    params:
        py=PY["workflow"],
        # Only the swept systems' links: editing another system's link_gbps redraws nothing.
        links=json.dumps(
            {s: config["systems"][s]["link_gbps"] for s in TRAIN["systems"] if "link_gbps" in config["systems"][s]}
        ),
        waiting=IC_WAITING,
    shell:
        "{params.py:q} -m workflow_scripts.interconnect.figure --table {input:q} --links {params.links:q} "
        "--waiting {params.waiting:q} --out {output:q} > {log:q} 2>&1"


rule interconnect:
    input:
        rules.interconnect_table.output,
        rules.interconnect_figure.output,
