"""The study's own figures (published_v100.yaml beside this module), which the results' figures
draw beside ours."""

from pathlib import Path

import yaml

PUBLISHED = yaml.safe_load(Path(__file__).with_name("published_v100.yaml").read_text())
