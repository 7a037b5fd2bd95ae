"""What touches the machine and the scheduler. The small shared helpers are common's.

Starting a run's ranks:

    `launcher`        K processes on this host, or N nodes x K tasks through srun
    `rank_env`        who a process is: rank, world size, local rank, master address
    `netif`           the network interface the ranks talk over
    `comm_env`        the communication libraries' environment of a run (config nccl_env), as recorded
    `interpreter`     a stage's Python interpreter, or the container whose python runs it
    `container_env`   what the launcher sets, passed into a rank's container, and what the rank saw
    `cpus`            the CPUs a rank may run on, and the thread counts derived from them
    `threads_tensorflow`, `threads_mxnet`
                      TensorFlow's and MXNet's thread rules, which their records name
    `affinity`        a CPU set grouped by physical core
    `cpu_bind`        CPUs of its own for each rank the local launcher starts
    `gpu_identity`    which GPU CUDA numbers i, and which CPUs are near it
    `gpu_choice`      which GPU each rank of a node takes
    `cuda_cache`      where CUDA keeps the kernels it JIT-compiles, for a run's ranks
    `kernel_check`    the first kernel on a task's GPU, and what its failure means

What the pipeline asks SLURM: `slurm` (a job's nodes, a partition's limits, why jobs wait); how
the workflow stops through SLURM: `workflow_stop` (a TERM cancels its jobs, as Ctrl-C does).

A node and what it did while a run measured:

    `provenance`      the node, the code and the settings a result came from
    `mounts`          which mount a path lives on: its cache, its transport, read-only, quotas
    `page_cache`      clearing the page cache before a run, and checking it left memory
    `telemetry`       per-node samples during a run: storage, network, CPU, GPU
    `storage_probe`   the counters of the file system the dataset is read from
    `neighbours`      what else used a node while a run measured
    `nccl_log`        which transport NCCL used, from its own log lines
"""
