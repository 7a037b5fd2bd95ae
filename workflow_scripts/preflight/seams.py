"""Where preflight meets other parts of the project. Each is one small function, so that what it
asks (why a kernel failed, the trainers' thread counts, whether a dataset matches its manifest)
is answered in one place by the module that owns the answer."""
import importlib.util
import os
import subprocess
import sys

from .rows import FAILED, NA, OK

_NO_KERNEL = ("no kernel image", "invalid device function", "unsupported gpu architecture",
              "not compatible with the current pytorch installation", "cudaerrornokernelimagefordevice")


def classify(exc):
    """(cause, fix) of an exception raised while running the tiny net on a device."""
    text = f"{type(exc).__name__}: {exc}".strip()
    if any(k in text.lower() for k in _NO_KERNEL):
        return (f"the framework has no kernels for this GPU's architecture ({text.splitlines()[0][:300]})",
                "use a build of the framework compiled for this GPU's compute capability (config envs_gpu.<framework> "
                "or systems.<name>.envs)")
    return text.splitlines()[0][:400] if text else type(exc).__name__, "see the check job's log"


def thread_counts(framework, launch):
    """{name: count} of the threads a trainer of `framework` starts per task on a CPU host, as the
    trainers compute them today (ranks share the host's cores)."""
    per_rank = max(1, (os.cpu_count() or 1) // launch.local_size)
    return {"intra_op": per_rank, "decode": per_rank}


def dataset_check(data_dir, level, python=(sys.executable,)):
    """(status, figure, cause, fix) of one format's files against its manifest, through the data
    stage's verifier (python -m workflow_scripts.data.verify), run by `python` (the framework's
    interpreter: the one with that format's reader, as the training job's own check)."""
    if importlib.util.find_spec("workflow_scripts.data.verify") is None:
        return NA, "", "verify module missing (workflow_scripts/data/verify.py)", ""
    proc = subprocess.run([*python, "-m", "workflow_scripts.data.verify", "--data", str(data_dir), "--level", level],
                          capture_output=True, text=True)
    lines = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    if proc.returncode == 0:
        return OK, f"level {level}: {lines[-1] if lines else 'matches its manifest'}", "", ""
    fix = next((ln[ln.index("snakemake --forcerun"):] for ln in lines if "snakemake --forcerun" in ln),
               "snakemake --forcerun <the format's conversion rule>")
    causes = [ln.split(". Fix: ")[0] for ln in lines]
    more = f" (and {len(causes) - 1} more)" if len(causes) > 1 else ""
    return FAILED, f"level {level}", (causes[0][:600] + more) if causes else f"verify exited {proc.returncode}", fix
