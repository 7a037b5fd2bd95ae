"""What the tests share, in one place (pytest puts tests/ on the path: pyproject.toml's pythonpath).

    config      the checkout (REPO), its config.yaml (CONFIG) and configs made from it
    processes   a stage's module, or one of scripts/, run with an environment's interpreter
    trainer     the trainer's command line for a test that runs a trainer itself
    data        small datasets: embedded trees through the index stage into a format
    workflow    Snakemake on a scratch directory: config, run, dry run, copies of a finished run
    dry_run     a dry run with the SLURM profile on a cluster faked in its commands, and its SLURM jobs
    slurm_test_cluster
                the suite's two-node SLURM cluster, started and stopped by a module's fixture
    docs        markdown: ```bash blocks, headings' anchors, links, the README's Layout
    gpu_layout, hostile, systems
                a made-up GPU node; config strings a shell must never run; three kinds of system
    scripts/    scripts run inside the framework environments (each prints JSON last)

Fixtures and the suite's hooks (xdist groups, the kind markers) are in tests/conftest.py. The
names most tests use are importable from here: `from helpers import REPO, run_stage, snakemake`.
"""

from .config import CONFIG, LONG_TEST_GPUS, REPO, validated, with_overrides
from .data import QUIRKY, embedded_lmdb, source_catalog, tree_hashes
from .docs import anchors, bash_blocks, layout_items, links
from .processes import as_a_user, bare_interpreter, interpreter, run_script, run_stage
from .trainer import TRAINERS, launched, trainer_command, trainer_flags
from .workflow import (
    PIPELINE,
    PIPELINE_CONFIG,
    SNAKEMAKE,
    SUITE,
    copy_of_run,
    pipeline_config,
    planned_jobs,
    snakemake,
    without_slurm,
    write_config,
)

__all__ = [
    "CONFIG",
    "LONG_TEST_GPUS",
    "PIPELINE",
    "PIPELINE_CONFIG",
    "QUIRKY",
    "REPO",
    "SNAKEMAKE",
    "SUITE",
    "TRAINERS",
    "anchors",
    "as_a_user",
    "bare_interpreter",
    "bash_blocks",
    "copy_of_run",
    "embedded_lmdb",
    "interpreter",
    "launched",
    "layout_items",
    "links",
    "pipeline_config",
    "planned_jobs",
    "run_script",
    "run_stage",
    "snakemake",
    "source_catalog",
    "trainer_command",
    "trainer_flags",
    "tree_hashes",
    "validated",
    "without_slurm",
    "with_overrides",
    "write_config",
]
