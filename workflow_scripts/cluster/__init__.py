"""What touches the machine and the scheduler: starting a run's ranks (launcher, rank_env, netif, the
CPUs and GPUs each rank takes), what the pipeline asks SLURM (slurm), and what a node is and did while a run
measured (provenance, mounts, page_cache, telemetry, neighbours, nccl_log). The small shared helpers
are common's."""
