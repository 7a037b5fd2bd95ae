"""What the workflow plans from its config, as plain Python that the rules import at parse time
and tests call without Snakemake: the sweep of training runs (sweep.py)."""
