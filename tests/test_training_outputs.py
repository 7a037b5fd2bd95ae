"""The tables and figures are named once (results/training_outputs.py for the training stage's,
results/stage_outputs.py for the later stages'), which the writers, the verdict's readers and the
rules read: each has its caption in report/, and every name is declared by a rule of the dry run's
plan (the pipeline's tests check that the files are written)."""

import pytest
from helpers import REPO

from workflow_scripts.results import stage_outputs, training_outputs

pytestmark = pytest.mark.unit


def test_every_output_has_its_caption():
    for name in (*training_outputs.TABLES, *training_outputs.FIGURES):
        assert (REPO / "rules" / training_outputs.caption(name)).resolve().is_file(), name


def test_every_later_stages_output_has_its_caption():
    for name in stage_outputs.TABLES:
        assert (REPO / "rules" / stage_outputs.caption(name)).resolve().is_file(), name
    for name in stage_outputs.FIGURES:
        assert (REPO / "rules" / stage_outputs.figure_caption(name)).resolve().is_file(), name


def test_the_rules_declare_every_output_by_its_name():
    """Each name stands in the default dry run's plan as the output it names (the snapshot is the
    plan as Snakemake prints it), so a name changed here changes the rules' files with it."""
    plan = (REPO / "tests" / "snapshots" / "dry_run_default.txt").read_text()
    for name in (*training_outputs.TABLES, *stage_outputs.TABLES):
        assert f"results/{name}.csv" in plan, name
    for name in (*training_outputs.FIGURES, *stage_outputs.FIGURES):
        assert f"results/figures/{name}.png" in plan, name
