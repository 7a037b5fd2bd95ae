# Settings and helpers of the interconnect stage (rules/interconnect.smk): what config.yaml's
# interconnect section means for each sweep point, checked when the workflow is parsed.

IC = config["interconnect"]


def ic_max_bytes(system):
    """auto: 1 GiB where the system requests GPUs (the Brookhaven paper's range); on a CPU, 128 MiB:
    the smallest power of 2 above ResNet-50's 102 MB of fp32 gradients, at a cost the CPU default can
    carry (docs/decisions.md#interconnect_max_bytes)."""
    if IC["max_bytes"] != "auto":
        return IC["max_bytes"]
    return 2**30 if config["systems"][system]["gpu_request"] != "none" else 2**27


for _system in TRAIN["systems"]:
    if ic_max_bytes(_system) < IC["min_bytes"]:
        raise WorkflowError(
            f"config interconnect.max_bytes = {ic_max_bytes(_system)} is below interconnect.min_bytes "
            f"= {IC['min_bytes']} (system {_system!r})"
        )

NCCL_TESTS = IC["nccl_tests"]
if NCCL_TESTS:
    check_path("interconnect.nccl_tests", NCCL_TESTS)
    from workflow_scripts.interconnect import nccl_tests as _nccl_tests  # noqa: E402

    for _collective in IC["collectives"]:
        try:
            _nccl_tests.binary(NCCL_TESTS, _collective)
        except StageError as exc:
            raise WorkflowError(str(exc))


def ic_dir(system, gpus):
    return f"{RESULTS}/interconnect/{system}/{gpus}gpu"


IC_POINTS = [
    {
        "system": s,
        "gpus": g,
        "nodes": placement(s, g)[0],
        "torch": f"{ic_dir(s, g)}/torch.json",
        "nccl_tests": f"{ic_dir(s, g)}/nccl_tests.json" if NCCL_TESTS else "",
    }
    for s in TRAIN["systems"]
    for g in TRAIN["gpus"]
    if g > 1 and not PLAN.skipped(s, g)
]


def ic_python(w):
    """The ranks run in the interpreter (or container) the system's PyTorch training runs use, so
    the stage measures the torch and NCCL that training uses; checked when a job of the stage is
    planned (a sweep without PyTorch runs may never plan one)."""
    return framework_env(w.system, "pytorch")[1]


def ic_exec(w):
    """nccl-tests' binaries run in that environment too: a container's exec line (with the build
    bound inside) before the binary; nothing for an interpreter on the host."""
    return shlex.join(interpreter.exec_words(framework_config(w.system, "pytorch")[1], REPO, [NCCL_TESTS]))


def ic_srun_mpi(w):
    return config["systems"][w.system]["srun_mpi"]


def ic_args(w):
    """The measurement's settings, one list item per argument: only interconnect keys and the
    system's GPU request, so no other config edit reruns it."""
    return [
        "--collectives",
        *IC["collectives"],
        "--min-bytes",
        str(IC["min_bytes"]),
        "--max-bytes",
        str(ic_max_bytes(w.system)),
        "--warmup",
        str(IC["warmup"]),
        "--iterations",
        str(IC["iterations"]),
    ]


def ic_device(w):
    """A system that requests GPUs must measure them: no silent fall-back to the CPU."""
    return "cuda" if config["systems"][w.system]["gpu_request"] != "none" else "auto"


# The measurements scaling.csv's predictions read: the all-reduces at each system and GPU count > 1.
IC_ALLREDUCE = [
    {"system": p["system"], "gpus": p["gpus"], "raw": p["torch"]}
    for p in IC_POINTS
    if "all_reduce" in IC["collectives"]
]
