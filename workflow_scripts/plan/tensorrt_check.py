"""With inference.engine: tensorrt, no INT8 GPU job is submitted that cannot import its engine: the
route interpreter of inference.system (rules/int8.smk, INT8_ENV) is asked, when the workflow is
parsed, what it imports (int8/engine_imports.py, run with that interpreter), and a route without
tensorrt >= 10 and pycuda stops the workflow naming the interpreter, its config key and the
install command for the route's CUDA build. A container's python runs only where its runtime does,
on the nodes: a job on a node of inference.system asks it instead (rules/int8.smk, int8_engine_check,
part of `snakemake preflight`)."""

import json
import os
import subprocess

from workflow_scripts.cluster import interpreter
from workflow_scripts.int8 import engine_imports
from workflow_scripts.plan.sweep import ConfigProblem

PROBE_S = 300  # an interpreter on a shared file system, cold, takes seconds; a hung one is not waited on


def probe(words, repo, run=subprocess.run):
    """engine_imports' report of the interpreter `words` start ({"ran": True, ...}), or why it did not
    run ({"ran": False, "error": ...})."""
    try:
        out = run(
            [*words, "-m", "workflow_scripts.int8.engine_imports"],
            capture_output=True,
            text=True,
            timeout=PROBE_S,
            env={**os.environ, "PYTHONPATH": interpreter.search_path(repo, os.environ)},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"ran": False, "error": f"{type(exc).__name__}: {exc}"}
    said = (out.stderr or out.stdout).strip().splitlines()
    if out.returncode != 0 or not out.stdout.strip():
        return {"ran": False, "error": said[-1] if said else f"exit status {out.returncode}"}
    return {"ran": True, **json.loads(out.stdout.strip().splitlines()[-1])}


def check(engine, key, value, words, repo, run=subprocess.run, unbuilt=None):
    """None where nothing is to be checked here or the route can run the engine; a ConfigProblem
    naming the key, the interpreter and the fix where it cannot. A container is left to preflight;
    a route not built yet (unbuilt: plan/unbuilt_envs.py's record) is named there, once, with the
    command that builds it, and asked once it is."""
    if engine != "tensorrt" or not isinstance(value, str):
        return None
    if unbuilt is not None and key in unbuilt.missing:
        return None
    r = probe(words, repo, run)
    shown = words[-1]
    if not r["ran"]:
        raise ConfigProblem(
            f"config {key} = {value!r} runs the INT8 stage's TensorRT jobs (inference.engine: tensorrt), but it does "
            f"not run here ({r['error']}): point {key} at the route's python"
        )
    why = engine_imports.missing(r)
    if not why:
        return None
    problem = (
        f"config {key} = {value!r} runs the INT8 stage's TensorRT jobs (inference.engine: tensorrt), but in "
        f"{shown} {why}; {engine_imports.fix(value, r['torch_cuda'])}; or set inference.engine: onnxruntime"
    )
    if unbuilt is None:
        raise ConfigProblem(problem)
    unbuilt.note_lacking(problem)  # a dry run and the price plan on; a run stops at the parse's end
    return None
