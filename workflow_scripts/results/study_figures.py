"""The study's own figures (study_v100_figures.yaml beside this module), which the results' figures
draw beside ours."""

from pathlib import Path

import yaml

STUDY_FIGURES = yaml.safe_load(Path(__file__).with_name("study_v100_figures.yaml").read_text())
