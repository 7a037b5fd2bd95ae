"""What the workflow plans from its config, as plain Python that the rules import at parse time
and tests call without Snakemake. The rules (rules/*.smk) only wire these objects' methods to
Snakemake; docs/architecture.md says how a run flows through them.

    `config_checks`       parse-time checks of the config beyond its schema (ConfigProblem, each
                          naming its key), and `raising`, which turns one into Snakemake's error
    `unbuilt_envs`        the interpreters the config names that are not built yet: named in one
                          line by a plan (a dry run, the price), refused by a run
    `cluster_checks`      parse-time checks that ask SLURM or the sweep's measurements: partitions,
                          GPU types, Horovod's controller, whether a long test fits its jobs
    `sweep`               the sweep of training runs and the long test's runs, where each is
                          placed and where it writes (Sweep)
    `waiting`             the points whose nodes are down (nodes_down: wait) that the tables,
                          figures and the verdict do not wait for (Waiting)
    `commands`            the trainer's command line of each run (and the per-rank batch), and
                          the launcher's Horovod flags
    `slurm_job`           each point's node and task geometry and the SLURM resources of its jobs
    `point_jobs`          what a job at a sweep point is given: its input, command lines,
                          interpreter, threads and the run it follows (PointJobs)
    `data_plan`           the dataset, its converted copies and the converters' settings (DataPlan)
    `preflight_plan`      which preflight checks the sweep needs, their gates and settings
    `input_plan`          what preflight's input check of a pair runs
    `preflight_measured`  what preflight measured of the plan's jobs, for the price
    `interconnect_plan`   the interconnect stage's points and settings
    `int8_plan`           the INT8 stage's models, batches, engine settings and resources
    `tensorrt_check`      whether the INT8 stage's GPU route imports TensorRT, asked at parse time
    `prediction_args`     the scaling prediction's command line
    `price`               what the sweep costs before it is submitted (`snakemake price`)
    `main_process`        what only the main process does: the directory's lock, TERM through
                          SLURM, the interpreters not built yet named or refused
"""
