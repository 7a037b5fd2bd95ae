"""What the workflow plans from its config, as plain Python that the rules import at parse time
and tests call without Snakemake: the sweep of training runs (sweep.py), each point's job geometry
and SLURM resources (slurm_job.py), the trainer's command lines (commands.py)."""
