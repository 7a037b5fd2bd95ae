"""Adding a framework is a record in common/frameworks.py and its adapter: a stand-in fourth
framework (no library of its own), added to a copy of the repository by exactly those two files,
is planned by the workflow like the three: its training runs, its preflight checks and its rows in
the tables, with the schema's lists of framework names (envs, batch_per_gpu, training.frameworks)
taken from the registry and no other file changed (docs/architecture.md#add-a-framework)."""

import dataclasses
import shutil
import subprocess

import pytest
import yaml
from helpers import REPO, SNAKEMAKE

from workflow_scripts.common import frameworks

pytestmark = pytest.mark.stage

# PyTorch's record under another name, with its own trainer and no library (json stands in for one)
RECORD = repr(
    dataclasses.replace(
        frameworks.of("pytorch"),
        name="standin",
        title="Standin",
        package="json",
        trainer="standin_trainer",
        inputs=("cpu", "synthetic"),
        gpu_input="cpu",
        container="none",
    )
)
ADAPTER = '''"""A stand-in framework's trainer: the loop's adapter and nothing of a real library."""

from . import loop


class Standin(loop.Adapter):
    framework, name = "standin", "Standin"


if __name__ == "__main__":
    loop.main(Standin())
'''


def copy_with_standin(dest):
    """The repository's tracked files as they are in the working tree, plus the record and its adapter;
    the built environments linked, not copied."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True)
    for name in filter(None, tracked.stdout.split("\0")):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    for env in (".venv", ".envs"):
        (dest / env).symlink_to(REPO / env)
    registry = dest / "workflow_scripts" / "common" / "frameworks.py"
    text = registry.read_text()
    assert text.count("    )\n}\nNAMES = ") == 1, "the registry's end moved: update RECORD's place"
    registry.write_text(text.replace("    )\n}\nNAMES = ", f"        {RECORD},\n    )\n}}\nNAMES = "))
    (dest / "workflow_scripts" / "train" / "standin_trainer.py").write_text(ADAPTER)


def test_a_fourth_framework_is_a_record_and_an_adapter(tmp_path):
    repo, work = tmp_path / "repo", tmp_path / "work"
    work.mkdir()
    copy_with_standin(repo)
    # the config a user of it would write: the framework asked for, and its interpreter
    config = {"training": {"frameworks": ["pytorch", "standin"]}, "envs": {"standin": ".envs/torch/bin/python"}}
    (work / "standin.yaml").write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [SNAKEMAKE, "--snakefile", str(repo / "Snakefile"), "--directory", str(work), "-n", "-p", "all"]
        + ["--configfile", str(repo / "config.yaml"), str(work / "standin.yaml")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    # its runs, through its own trainer, beside PyTorch's
    assert "-- workflow_scripts.train.standin_trainer " in out and "-- workflow_scripts.train.pytorch_ddp " in out
    assert "output: results/runs/local/standin_fp32_1gpu/summary.json" in out, out[-3000:]
    # its preflight, and the tables read its runs
    assert "--framework standin" in out
    tables = [line for line in out.splitlines() if line.strip().startswith("input:") and "standin_fp32" in line]
    assert tables, "no job reads the stand-in's runs"
