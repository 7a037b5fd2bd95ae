"""`snakemake -n -p all` does not change unless a change means it to: the jobs, their files and every
shell line of the embedded default are compared with tests/snapshots/dry_run_default.txt, and those
of a config of three kinds of SLURM system with tests/snapshots/dry_run_slurm.txt (0.4 MB, kept as
text so that a change's diff shows the jobs it changed). A change to the rules or the plan that is
meant to change them regenerates both, and their diffs are reviewed with the change:

    DLSCALE_UPDATE_SNAPSHOTS=1 .venv/bin/pytest -n 0 tests/test_dry_run_snapshot.py

Dates, job ids, reasons and this machine's paths are left out, and the jobs sorted (their order is
Snakemake's, not ours)."""

import difflib
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from helpers import REPO, SNAKEMAKE

pytestmark = pytest.mark.stage

SNAPSHOTS = REPO / "tests" / "snapshots"
UPDATE = os.environ.get("DLSCALE_UPDATE_SNAPSHOTS") == "1"
SLURM = {
    "systems": {
        "cl": {"gpus_per_node": 4, "max_nodes": 4, "gpu_request": "gpus-per-node", "gpu_type": "a100"}
        | {"partition": "gpu", "cpus_per_task": 20, "mem_mb": 100000, "time_min": 60},
        "cl2": {"gpus_per_node": 2, "max_nodes": 4, "gpu_request": "none", "cpus_per_task": 2},
        "cl3": {"gpus_per_node": 2, "max_nodes": 4, "gpu_request": "gres", "gpu_type": "v100", "exclusive": False}
        | {"sbatch_extra": "--mail-type=NONE --comment 'a b'", "account": "acct", "qos": "q1", "constraint": "c1"}
        | {"cpus_per_task": 4},
    },
    "inference": {"system": "cl3"},
    "envs_gpu": {
        "tensorflow": ".envs/tf-mxnet/bin/python",
        "mxnet": ".envs/tf-mxnet/bin/python",
        "pytorch": ".envs/torch/bin/python",
    },
    "training": {
        "systems": ["cl", "cl2", "cl3"],
        "gpus": [1, 2, 4, 8],
        "inputs": ["auto", "synthetic", "gpu"],
        "repeats": "auto",
        "long_test": {"gpus": [2, 8], "time_min": 120},
    },
}
NOISE = re.compile(r"^\s*\[\w{3} \w{3} .*\d{4}\]$")
# A group's header: Snakemake prints the groups in no fixed order (test_cluster_limits.py checks them)
GROUP = re.compile(r"^\[\w{3} \w{3} [^]]*\d{4}\] Group job .*\n", re.M)


def dry_run(work, overlay=None):
    """The normalised `snakemake -n -p all` of the repository's config (and `overlay`) in `work`."""
    for env in (".venv", ".envs"):
        (work / env).symlink_to(REPO / env)
    # No SLURM tools on the PATH: the parse-time checks ask no cluster (the tests' may be up).
    tools = work / "bin"
    tools.mkdir()
    for tool in ("which", "sh", "bash", "git", "nproc"):
        if shutil.which(tool):
            (tools / tool).symlink_to(shutil.which(tool))
    configs = [str(REPO / "config.yaml")]
    if overlay:
        (work / "overlay.yaml").write_text(yaml.safe_dump(overlay))
        configs.append(str(work / "overlay.yaml"))
    proc = subprocess.run(
        [SNAKEMAKE, "-n", "-p", "all", "--snakefile", str(REPO / "Snakefile"), "--cores", "2"]
        + ["--configfile", *configs],
        cwd=work,
        capture_output=True,
        text=True,
        env=dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}:{tools}"),
        timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    text = GROUP.sub("", (proc.stdout + proc.stderr).replace(str(REPO), "REPO").replace(str(work), "WORK"))
    blocks = []
    for block in re.split(r"\n\s*\n", text):
        lines = [ln for ln in block.splitlines() if not NOISE.match(ln) and not re.match(r"\s*(reason|jobid):", ln)]
        if lines and lines[0] != "SNAKEMAKE":  # its header: date, host, versions, the config's digest
            blocks.append("\n".join(lines))
    return "\n\n".join(sorted(blocks)) + "\n"


def test_the_embedded_defaults_plan_is_the_snapshots(tmp_path):
    text, path = dry_run(tmp_path), SNAPSHOTS / "dry_run_default.txt"
    if UPDATE:
        path.write_text(text)
    want = path.read_text()
    diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True), "snapshot", "now", n=1))
    assert text == want, f"the plan changed (if meant: DLSCALE_UPDATE_SNAPSHOTS=1, see the docstring):\n{diff[:6000]}"


def test_three_kinds_of_slurm_system_plan_as_the_snapshot(tmp_path):
    text, path = dry_run(tmp_path, SLURM), SNAPSHOTS / "dry_run_slurm.txt"
    if UPDATE:
        path.write_text(text)
    want = path.read_text()
    diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True), "snapshot", "now", n=1))
    assert text == want, (
        f"the plan of the SLURM systems changed (if meant: DLSCALE_UPDATE_SNAPSHOTS=1, see the docstring):\n"
        f"{diff[:6000]}"
    )
