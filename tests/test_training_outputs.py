"""The training stage's tables and figures are named once (results/training_outputs.py), which the
writers and rules/results.smk both read: each has its caption in report/ (the pipeline's tests
check that the files are written)."""

import pytest
from helpers import REPO

from workflow_scripts.results import training_outputs

pytestmark = pytest.mark.unit


def test_every_output_has_its_caption():
    for name in (*training_outputs.TABLES, *training_outputs.FIGURES):
        assert (REPO / "rules" / training_outputs.caption(name)).resolve().is_file(), name
