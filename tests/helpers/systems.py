"""Three systems, one of each way of asking SLURM for GPUs (per node, by gres, none), for the plan's
tests (tests/test_job_shape.py) and the dry run that checks the rules against the plan
(tests/test_plan_in_rules.py)."""

SYSTEMS = {
    "pernode": {
        "gpus_per_node": 4,
        "max_nodes": 2,
        "gpu_request": "gpus-per-node",
        "gpu_type": "a100",
        "cpus_per_task": 8,
        "partition": "gpu",
        "time_min": 60,
    },
    "gres": {
        "gpus_per_node": 2,
        "max_nodes": 4,
        "gpu_request": "gres",
        "gpu_type": "v100",
        "cpus_per_task": 4,
        "exclusive": False,
        "account": "acct",
    },
    "cpu": {"gpus_per_node": 2, "max_nodes": 2, "gpu_request": "none", "cpus_per_task": 2},
}
EXTRA = {"pernode": [], "gres": ["--comment", "a b"], "cpu": []}
