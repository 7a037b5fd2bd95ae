"""The suite's throw-away two-node SLURM cluster (benchmarks/slurm_cluster.py) for a test module's
fixture: started once, stopped whatever the tests did, skipped with the reason where this machine
lacks what it needs."""

import pytest

from benchmarks import slurm_cluster


def started(**settings):
    """A fixture's body: `yield from started(task_plugin=...)` gives the running cluster."""
    why = slurm_cluster.missing_prerequisites()
    if why:
        pytest.skip(f"SLURM cluster tests skipped: {why}")
    c = slurm_cluster.Cluster(**settings)
    try:
        c.start()
        yield c
    finally:
        c.stop()
