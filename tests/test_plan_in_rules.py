"""The rules plan what workflow_scripts/plan says: a dry run of `all` on a config of three kinds of
system lists exactly the sweep's and the long test's run directories, and each training job carries
the SLURM resources of plan/slurm_job.py for its point."""

import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from helpers import CONFIG, REPO, SNAKEMAKE, validated, with_overrides
from helpers.systems import EXTRA, SYSTEMS

from workflow_scripts.plan.slurm_job import JobShape
from workflow_scripts.plan.sweep import Sweep

pytestmark = pytest.mark.stage

OVERRIDES = {
    "systems": {name: dict(s, partition="") for name, s in SYSTEMS.items()},  # no partition: sinfo is not asked
    "training__systems": list(SYSTEMS),
    "training__gpus": [1, 2, 4],
    "training__inputs": ["auto", "synthetic"],
    "training__long_test__gpus": [2],
    "envs_gpu": {
        fw: str(REPO / ".envs" / ("torch" if fw == "pytorch" else "tf-mxnet") / "bin" / "python")
        for fw in ("tensorflow", "mxnet", "pytorch")
    },
}


def test_the_dry_run_plans_the_sweep_with_its_resources(tmp_path):
    config = with_overrides(CONFIG, **OVERRIDES)
    config["systems"]["gres"]["sbatch_extra"] = "--comment 'a b'"
    config["envs"] = {env: str(REPO / path) for env, path in config["envs"].items()}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("which", "sh", "bash", "git"):
        if shutil.which(tool):
            (tools / tool).symlink_to(shutil.which(tool))
    proc = subprocess.run(
        [SNAKEMAKE, "-n", "-p", "all", "--snakefile", str(REPO / "Snakefile"), "--cores", "4"],
        cwd=tmp_path,
        env=dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}:{tools}"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    validated(config)
    plan = Sweep(config, embedded=True)
    want = {p["run_dir"] for p in plan.sweep() + plan.long_test()}
    assert set(re.findall(r"output: (results/runs/\S+)/summary\.json", out)) == want
    shape = JobShape(config, plan, EXTRA)
    blocks = [b for b in out.split("\n\n") if "rule train:" in b]
    assert len(blocks) == len(plan.sweep())
    for block in blocks:
        system, gpus = re.search(r"wildcards: system=([^,]+), framework=\w+, precision=\w+, gpus=(\d+)", block).groups()
        r = shape.point_resources(system, int(gpus))
        assert f"nodes={r['nodes']}, tasks={r['tasks']}," in block, block
        assert f"slurm_extra={r['slurm_extra']}" in block, block
