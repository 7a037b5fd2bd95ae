"""What a rank in a container is given of the environment the launcher prepared, and what it saw.

A container runtime does not hand the host's environment over as it is. Apptainer and Singularity
pass most host variables in, but one the image sets (its Docker ENV, its %environment) keeps the
image's value; pyxis (enroot under srun) does the same for every variable not named in
--container-env. NGC images set some of the variables the launcher sets (NCCL's, CUDA's), so a
rank could run with the image's NCCL interface or cache directory while its record said ours.

So every variable the launcher set (and every communication variable it records, comm_env.py)
goes in explicitly: for Apptainer and Singularity as APPTAINERENV_<NAME> / SINGULARITYENV_<NAME>
(the runtime's own override, injected after the image's environment; unlike --env, whose list is
split at commas, it takes any value), for pyxis by name in --container-env. The launcher also
passes what it asked for (ASKED, JSON), and each rank compares it with its own environment before
anything else changes it (rank_env.detect): the run's record then says what the rank saw and names
every variable that differs.
"""

import json
import re
import sys
from pathlib import Path

from .comm_env import RECORDED

ASKED = "DLSCALE_LAUNCH_ENV"
IMAGE = "DLSCALE_CONTAINER"
# the runtimes that take a variable from the host as it is when it carries this prefix
PREFIX = {"apptainer": "APPTAINERENV_", "singularity": "SINGULARITYENV_"}
# given to the container by the interpreter's own words (cluster/interpreter.py), not here
OWN_WORDS = {"PYTHONPATH"}

_seen = None


def runtime_of(cmd):
    """'apptainer' or 'singularity' for their exec line, 'pyxis' for an srun that names a
    container image, else None (an interpreter on the host)."""
    if len(cmd) >= 2 and Path(cmd[0]).name in PREFIX and cmd[1] == "exec":
        return Path(cmd[0]).name
    if cmd[:1] == ["srun"] and any(w.startswith("--container-image=") for w in _srun_options(cmd)):
        return "pyxis"
    return None


def _srun_options(cmd):
    """The option words of an srun line (`srun --a=1 --b=2 prog ...`): up to the program."""
    out = []
    for w in cmd[1:]:
        if not w.startswith("-"):
            break
        out.append(w)
    return out


def image_of(cmd):
    """The container image a command runs in (its .sif or squashfs file), or ''."""
    runtime = runtime_of(cmd)
    if runtime == "pyxis":
        return next(w.split("=", 1)[1] for w in _srun_options(cmd) if w.startswith("--container-image="))
    if runtime:
        return next((w for w in cmd[2:] if not w.startswith("-")), "")
    return ""


def asked(env, base):
    """The variables of `env` a rank must see as they are: those the launcher set or changed
    (`base`: the environment it started with) and the communication settings it records."""
    names = {k for k in env if base.get(k) != env[k]} | {k for k in env if RECORDED.fullmatch(k)}
    return {k: env[k] for k in sorted(names - OWN_WORDS)}


def passed(cmd, env, base):
    """The environment to start `cmd` with: `env`, and where `cmd` runs in an Apptainer or
    Singularity container, every asked variable again under the runtime's prefix; where it runs in
    any container, ASKED and IMAGE too. A command on the host gets `env` unchanged."""
    runtime = runtime_of(cmd)
    if runtime is None:
        return env
    want = {**asked(env, base), IMAGE: image_of(cmd)}
    want[ASKED] = json.dumps(want, sort_keys=True)
    out = {**env, **want}
    prefix = PREFIX.get(runtime)
    if prefix:
        proof = _as_written if _no_eval(runtime, cmd, env) else _shell_proof
        out.update({prefix + k: proof(v) for k, v in want.items()})
    return out


def _no_eval(runtime, cmd, env):
    """Whether the runtime takes injected values literally (--no-eval, or its variable)."""
    image = image_of(cmd)
    options = cmd[2 : cmd.index(image)] if image in cmd else cmd[2:]
    return "--no-eval" in options or env.get(f"{runtime.upper()}_NO_EVAL", "").lower() in ("1", "true", "yes")


def _as_written(value):
    return value


def _shell_proof(value):
    """`value` as the runtime must be handed it to give it back unchanged: it writes each injected
    variable as export NAME="<value>", escaping only double quotes, and a shell sources that line,
    so a backslash, $ or backquote of the value would be read by the shell (the JSON of ASKED
    escapes with backslashes: it would arrive unreadable)."""
    return re.sub(r"([\\$`])", r"\\\1", value)


def srun_line(srun, cmd, env):
    """pyxis: the launcher's srun line with the container's own srun options of `cmd` (a pyxis
    interpreter's words, a one-task srun of their own) folded in, and every asked variable named
    in --container-env (`env`: what passed() returned); any other `cmd` after `srun` unchanged."""
    if runtime_of(cmd) != "pyxis":
        return [*srun, *cmd]
    options = _srun_options(cmd)
    container = [w for w in options if w.startswith(("--container", "--no-container"))]
    names = json.loads(env[ASKED]).keys() | {ASKED}
    return [*srun, *container, f"--container-env={','.join(sorted(names))}", *cmd[1 + len(options) :]]


def mounted(cmd, path):
    """`cmd` with `path` also mounted at the same place, where it runs in a pyxis container."""
    if runtime_of(cmd) != "pyxis":
        return cmd
    out = list(cmd)
    for i, w in enumerate(out):
        if w.startswith("--container-mounts="):
            out[i] = f"{w},{path}:{path}"
            return out
    return [out[0], f"--container-mounts={path}:{path}", *out[1:]]


def remember(env, rank=0):
    """At a rank's start, before anything changes its environment: what the launcher asked for
    against what this process sees (None outside a container). Kept for record(), and said in the
    log where they differ (by each node's first rank)."""
    global _seen
    text = env.get(ASKED)
    if not text:
        _seen = None
        return None
    want = json.loads(text)
    differs = {k: {"asked": v, "saw": env.get(k)} for k, v in want.items() if env.get(k) != v}
    _seen = {"container": want.get(IMAGE, ""), "asked": sorted(want), "differs": differs}
    if differs and rank == 0:
        names = ", ".join(f"{k} (asked {v['asked']!r}, saw {v['saw']!r})" for k, v in differs.items())
        print(
            f"container {_seen['container']}: the rank does not see what the launcher set: {names}",
            file=sys.stderr,
            flush=True,
        )
    return _seen


def record():
    """What remember() found, for the run's summary and rank files; None on the host."""
    return _seen
