"""Preflight: each system x framework of the sweep checked in minutes, launched exactly as its
training runs are, before the sweep queues hours of jobs (rules/preflight.smk).

    job.py      one check job: the per-node checks, then the per-task checks, under a watchdog
    node.py     per node (workflow interpreter): page-cache clearing, the dataset, readability
    rank.py     per task (framework interpreter): GPU, tiny-net kernel, all-reduce, CPUs, telemetry
    fw_*.py     each framework's tiny conv net and all-reduce path
    rows.py     a check's result row; markers.py: per-rank progress markers
    seams.py    the points where other parts of the project plug in (classification, threads, data)
    table.py    results/preflight.csv/.md;  gate.py: the file training waits for
"""
