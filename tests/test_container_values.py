"""A value the launcher gives a rank in an Apptainer or Singularity container arrives as it was,
whatever characters it holds (issue 61, item 5).

Apptainer turns every APPTAINERENV_<NAME> (and every --env) into a line of a shell script that it
sources before the program starts: `export NAME="<value>"`, with only the value's double quotes
escaped, or, under --no-eval, `export NAME='<value>'` with its single quotes escaped
(internal/pkg/runtime/engine/apptainer/process_linux.go, injectEnvHandler, in apptainer/apptainer).
So in the default mode the shell reads the value: a backslash, `$` or a backquote in it is taken
as the shell's (a `$(...)` in a path from config would run), and the launcher's own record of what
it asked (JSON, whose strings escape quotes and backslashes with backslashes) would reach the rank
changed or not at all.

No container runtime installs on this machine (`apt-cache policy apptainer singularity-container`:
no candidate), so the runtime here is a stand-in named `apptainer` that builds those lines exactly
as that function does and has /bin/sh source them, then runs the program. The launcher, the values'
passage through it and the rank's record are the real ones, with a real Python as the container's
python.
"""

import json
import os
import subprocess
import sys

import pytest
from helpers import REPO, interpreter
from helpers.hostile import HOSTILE, markers

STAND_IN = '''#!{python}
"""`apptainer exec [options] IMAGE PROGRAM ARGS...`: the injected variables as Apptainer's
injectEnvHandler writes them, sourced by a shell, then PROGRAM."""
import os, subprocess, sys

args = sys.argv[1:]
i = 1
while args[i].startswith("-"):
    i += 1
no_eval = "--no-eval" in args[1:i]
lines = []
for key, value in os.environ.items():
    if key.startswith("APPTAINERENV_"):
        if no_eval:
            quoted = "'" + value.replace("'", "'\\"'\\"'") + "'"
        else:
            quoted = '"' + value.replace('"', '\\\\"') + '"'
        lines.append(f"export {{key[len('APPTAINERENV_'):]}}={{quoted}}")
script = "\\n".join(lines) + '\\nexec "$@"\\n'
sys.exit(subprocess.call(["sh", "-c", script, "sh", *args[i + 1 :]]))
'''

# config nccl_env values as a user may write them; each holds a character the shell reads
VALUES = {
    "NCCL_TOPO_FILE": r"C:\topo\h100.xml",
    "NCCL_DEBUG_FILE": "/scratch/$USER/nccl.%h.%p",
    "NCCL_IB_HCA": 'a"b`c',
    # a run directory under a results_dir no shell may read (NCCL_DEBUG_FILE is one the launcher sets)
    "NCCL_DEBUG_SUBSYS": HOSTILE["data_dir"],
}
SEEN = (
    "import json, os, sys; from workflow_scripts.cluster import container_env, rank_env; rank_env.detect(); "
    "names = " + repr(tuple(VALUES)) + "; "
    "open('seen.' + os.environ['RANK'] + '.json', 'w').write(json.dumps("
    "{'record': container_env.record(), 'env': {k: os.environ.get(k) for k in names}}))"
)


def in_stand_in(tmp_path, options, program, given=()):
    """The real launcher running two local ranks of `program` in the stand-in container."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    runtime = bin_dir / "apptainer"
    runtime.write_text(STAND_IN.format(python=sys.executable))
    runtime.chmod(0o755)
    image = tmp_path / "image.sif"
    image.write_text("{}")
    words = [str(runtime), "exec", *options, f"--bind={REPO}", f"--env=PYTHONPATH={REPO}", str(image)]
    return subprocess.run(
        [sys.executable, "-m", "workflow_scripts.cluster.launcher", "--nproc-per-node=2", "--launcher=local"]
        + [*given, f"--cuda-cache-dir={tmp_path / 'jit'}", "--", *words, *program],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.stage
@pytest.mark.parametrize("options", [["--nv"], ["--nv", "--no-eval"]], ids=["shell-evaluated", "no-eval"])
def test_a_value_reaches_the_rank_as_it_was_whatever_its_characters(tmp_path, options):
    given = [w for k, v in VALUES.items() for w in ("--env", f"{k}={v}")]
    proc = in_stand_in(tmp_path, options, [sys.executable, "-c", SEEN], given)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert markers(tmp_path) == []
    for rank in ("0", "1"):
        seen = json.loads((tmp_path / f"seen.{rank}.json").read_text())
        assert seen["env"] == VALUES, seen["env"]
        assert seen["record"]["differs"] == {} and set(VALUES) <= set(seen["record"]["asked"]), seen["record"]


@pytest.mark.stage
def test_the_interconnect_stage_records_what_its_ranks_saw_in_a_container(tmp_path):
    """The interconnect's ranks run in the system's PyTorch container too: its record, like a
    training run's, says whether the NCCL settings it lists were the launcher's."""
    out = tmp_path / "torch.json"
    program = [interpreter("pytorch"), "-m", "workflow_scripts.interconnect.collectives", "--max-bytes", "64"]
    program += ["--warmup", "1", "--iterations", "2", "--out", str(out)]
    proc = in_stand_in(tmp_path, ["--nv"], program, ["--env", "NCCL_IB_DISABLE=1"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    raw = json.loads(out.read_text())
    assert raw["nccl_env"]["NCCL_IB_DISABLE"] == "1" and raw["container_env"]["differs"] == {}, raw
    assert raw["container_env"]["container"] == str(tmp_path / "image.sif")
    assert "NCCL_IB_DISABLE" in raw["container_env"]["asked"], raw["container_env"]
