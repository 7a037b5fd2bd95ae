"""Which build of each framework runs on which GPU, and with which driver (docs/slurm.md, "Which
route for which GPU"; docs/gpu-environments.md, the route table). Every cell of both tables is
checked against envs/arch_lists.json: the GPU code each route's build reports
(envs/record_arch_lists.py, run with the route's python; no GPU needed) and the minimum driver
NVIDIA's CUDA release notes give each CUDA version. The build of every route installed where the
test runs is read again and compared (here and in CI: .envs/torch), so the record cannot drift from
the pins; DLSCALE_ROUTE_PYTHONS="torch-cu126=/path/bin/python,..." points at routes installed
elsewhere. A system's PyTorch route is what its preflight, training and interconnect jobs run, and
the first-kernel check names the route with code for the GPU as its fix."""

import json
import os
import re
import subprocess

import pytest
from helpers import CONFIG, REPO, interpreter, snakemake, write_config

RECORD = json.loads((REPO / "envs" / "arch_lists.json").read_text())
ROUTES = RECORD["routes"]
DRIVERS = RECORD["cuda_drivers"]
COLUMNS = {"PyTorch": "pytorch", "TensorFlow": "tensorflow", "MXNet": "mxnet"}
INT8_COLUMN = "INT8 (TensorRT)"
# `torch-cu126` + `tensorrt-cu12` ...; driver R525 or newer: TensorRT's build for the route's CUDA
INT8_CLAIM = re.compile(r"`([\w-]+)` \+ `tensorrt-cu(\d+)`[^;]*; driver R(\d+) or newer")
TENSORRT_MIN_SM = 70  # TensorRT 10's support matrix: compute capability 7.0 and higher

# `route`: native code; driver R525 or newer  |  `route`: PTX compute_80, ...; driver R535 or newer
CLAIM = re.compile(r"`([\w-]+)`: (native code|PTX compute_(\d+)[^;]*); driver R(\d+) or newer")
NO_CODE = re.compile(r"`([\w-]+)` has no code for sm_(\d+)")
ONLY_PTX = re.compile(r"`([\w-]+)` has only compute_(\d+) PTX")


def branch(version):
    """'525.60.13' -> 525."""
    return int(version.split(".")[0])


def minimum_driver(entry):
    """The driver branch a route's machine code needs: CUDA minor-version compatibility's minimum."""
    return branch(DRIVERS["minor_compat"][entry["cuda"].split(".")[0]])


def ptx_driver(entry):
    """The driver branch that can JIT-compile a route's PTX: its toolkit's own driver."""
    return branch(DRIVERS["toolkit"][entry["cuda"]])


def table(page, heading):
    """The rows (lists of cells) of the first table under `heading` in docs/<page>."""
    lines = (REPO / "docs" / page).read_text().splitlines()
    start = lines.index(heading)
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
        elif rows:
            break
    assert len(rows) > 2, f"docs/{page}: no table under {heading!r}"
    return rows[0], [r for r in rows[2:]]


def native(entry, sm):
    return f"sm_{sm}" in entry["arch_list"]


def ptx_for(entry, sm):
    """The compute_XX of a route's PTX the driver can compile for sm (XX <= sm), else None."""
    found = [int(a[8:]) for a in entry["arch_list"] if a.startswith("compute_") and int(a[8:]) <= sm]
    return max(found) if found else None


@pytest.mark.unit
def test_route_table_is_the_recorded_builds():
    header, rows = table("gpu-environments.md", "## Which GPU code each route holds, and the driver it needs")
    assert header == ["route", "interpreter", "requirements", "build", "CUDA", "GPU code", "driver"], header
    assert sorted(r[0].strip("`") for r in rows) == sorted(ROUTES)
    for route, python, requirements, build, cuda, code, driver in rows:
        entry = ROUTES[route.strip("`")]
        assert python == f"`{entry['environment']}`" and requirements == f"`{entry['requirements']}`", route
        assert entry["version"] in build and cuda == entry["cuda"] and code.split() == entry["arch_list"], route
        assert driver.startswith(f"R{minimum_driver(entry)} or newer"), (route, driver)
        ptx = [a for a in entry["arch_list"] if a.startswith("compute_")]
        for a in ptx:
            assert f"R{ptx_driver(entry)} or newer for its {a} PTX" in driver, (route, driver)
        assert "PTX" not in driver or ptx, (route, driver)
        # the requirements file pins the recorded version, and a PyTorch route's DALI is a build
        # for the same CUDA major version
        pins = (REPO / entry["requirements"]).read_text()
        assert re.search(rf"^[\w.\[\]-]+=={re.escape(entry['version'].split('+')[0])}\s", pins, re.M), route
        if entry["framework"] == "pytorch":
            assert f"nvidia-dali-cuda{entry['cuda'].split('.')[0]}0==" in pins, route
    # the default GPU environments are the routes of those names
    for route, key in (("torch", "pytorch"), ("tensorflow-gpu", "tensorflow"), ("mxnet-gpu", "mxnet")):
        assert CONFIG["envs_gpu"][key] == ROUTES[route]["environment"], key


def check_int8_cell(where, cell, sm):
    """Each route an INT8 cell names is a PyTorch route with code for the GPU, beside TensorRT's
    build for that route's CUDA major version, at the driver that CUDA needs; none only below
    TensorRT 10's least compute capability."""
    claims = list(INT8_CLAIM.finditer(cell))
    if cell.startswith("none:"):
        assert sm < TENSORRT_MIN_SM and not claims, where
        return
    assert claims and cell.startswith(claims[0].group(0)[:10]), where
    for m in claims:
        entry, cuda, driver = ROUTES[m.group(1)], m.group(2), int(m.group(3))
        assert entry["framework"] == "pytorch" and native(entry, sm), f"{where}: {entry['arch_list']}"
        assert cuda == entry["cuda"].split(".")[0], f"{where}: {m.group(1)} is CUDA {entry['cuda']}"
        assert driver == minimum_driver(entry), f"{where}: CUDA {entry['cuda']} needs R{minimum_driver(entry)}"


@pytest.mark.unit
def test_every_cell_of_which_route_for_which_gpu_is_true():
    header, rows = table("slurm.md", "## Which route for which GPU")
    assert header[0] == "GPU" and header[-1] == INT8_COLUMN, header
    assert [COLUMNS[h] for h in header[1:-1]] == ["pytorch", "tensorflow", "mxnet"], header
    seen = set()
    for gpu, *cells, int8 in rows:
        sm = int(re.search(r"\(sm_(\d+)\)", gpu).group(1))
        seen.add(sm)
        check_int8_cell(f"docs/slurm.md, {gpu} x INT8: {int8}", int8, sm)
        for framework, cell in zip(header[1:], cells):
            where = f"docs/slurm.md, {gpu} x {framework}: {cell}"
            claims = list(CLAIM.finditer(cell))
            assert cell.startswith("container:") or (claims and cell.startswith(claims[0].group(0))), where
            for m in claims:
                route, how, ptx, driver = m.group(1), m.group(2), m.group(3), int(m.group(4))
                entry = ROUTES[route]
                assert entry["framework"] == COLUMNS[framework], where
                if how == "native code":
                    assert native(entry, sm), f"{where}: {route} has no sm_{sm} code: {entry['arch_list']}"
                    assert driver == minimum_driver(entry), (
                        f"{where}: CUDA {entry['cuda']} needs R{minimum_driver(entry)}"
                    )
                else:
                    assert not native(entry, sm) and ptx_for(entry, sm) == int(ptx), f"{where}: {entry['arch_list']}"
                    assert driver == ptx_driver(entry), f"{where}: {entry['cuda']}'s PTX needs R{ptx_driver(entry)}"
            reasons = list(NO_CODE.finditer(cell)) + list(ONLY_PTX.finditer(cell))
            for m in reasons:
                entry = ROUTES[m.group(1)]
                assert entry["framework"] == COLUMNS[framework] and not native(entry, sm), where
                if m.re is NO_CODE:
                    assert int(m.group(2)) == sm and ptx_for(entry, sm) is None, where
                else:
                    assert ptx_for(entry, sm) == int(m.group(2)), where
            if cell.startswith("container:"):  # says why the framework's own route will not do
                assert reasons, where
    assert {60, 70} <= seen, "the study's GPUs, P100 and V100, must have rows"


def installed_routes():
    given = dict(p.split("=", 1) for p in os.environ.get("DLSCALE_ROUTE_PYTHONS", "").split(",") if "=" in p)
    for route, entry in ROUTES.items():
        if entry["framework"] in ("pytorch", "tensorflow"):
            yield route, given.get(route, str(REPO / entry["environment"]))


@pytest.mark.stage
@pytest.mark.parametrize("route, python", list(installed_routes()))
def test_every_installed_route_is_the_recorded_build(route, python):
    if not os.path.exists(python):
        pytest.skip(f"{python} is not installed here (bash envs/setup.sh --gpu makes it)")
    proc = subprocess.run(
        [python, "envs/record_arch_lists.py", route, "--check"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["arch_list"] == ROUTES[route]["arch_list"]


@pytest.mark.stage
def test_the_check_fails_on_a_build_that_is_not_the_recorded_one(tmp_path):
    changed = json.loads(json.dumps(RECORD))
    changed["routes"]["torch"]["arch_list"] = ["sm_70", *changed["routes"]["torch"]["arch_list"]]
    (tmp_path / "arch_lists.json").write_text(json.dumps(changed))
    proc = subprocess.run(
        [
            interpreter("pytorch"),
            "envs/record_arch_lists.py",
            "torch",
            "--check",
            "--file",
            str(tmp_path / "arch_lists.json"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1 and "torch: arch_list: recorded ['sm_70'" in proc.stderr, proc.stderr


@pytest.mark.stage
def test_setup_builds_every_route():
    setup = (REPO / "envs" / "setup.sh").read_text()
    for route, entry in ROUTES.items():
        assert f"make_env .envs/{route} {entry['requirements']}" in setup, route
        assert entry["environment"] == f".envs/{route}/bin/python", route
    proc = subprocess.run(["bash", "envs/setup.sh", "--no-such-flag"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2 and "--torch-cu126" in proc.stderr, proc.stderr


@pytest.mark.stage
def test_a_systems_pytorch_route_runs_its_preflight_training_and_interconnect(tmp_path):
    """A V100 system that names the CUDA 12 route gets it in every job that runs PyTorch on its
    GPUs; the dry run's commands show it (no GPU is needed to plan them)."""
    route = tmp_path / "envs" / "torch-cu126" / "bin" / "python"
    route.parent.mkdir(parents=True)
    route.symlink_to(interpreter("pytorch"))
    v100 = {"gpus_per_node": 2, "max_nodes": 1, "gpu_request": "gpus-per-node", "cpus_per_task": 1}
    write_config(
        tmp_path,
        systems={"v100": {**v100, "envs": {"pytorch": str(route)}}},
        training__systems=["v100"],
        training__frameworks=["pytorch"],
        training__gpus=[2],
        training__inputs=["synthetic"],
    )
    out = snakemake(tmp_path, "-n", "-p", "preflight", "training", "interconnect").stdout
    jobs = {}
    for block in re.split(r"\n(?=\s*rule \w+:)", out):  # a point's repeats: indented in their group
        m = re.match(r"\s*rule (\w+):", block)
        if m:
            jobs.setdefault(m.group(1), []).append(block)
    default = str(REPO / ROUTES["torch"]["environment"])
    for rule in ("preflight_check", "train", "interconnect_collectives"):
        assert jobs.get(rule), (rule, sorted(jobs))
        for block in jobs[rule]:
            assert str(route) in block and default not in block, (rule, block[-1500:])


V100_KERNEL = "RuntimeError: CUDA error: no kernel image is available for execution on the device"
CU126 = ".envs/torch-cu126/bin/python (torch-cu126: 2.7.1+cu126, CUDA 12.6, code for sm_50 sm_60 sm_70"


@pytest.mark.unit
@pytest.mark.parametrize("gpu", [("Tesla V100-SXM2-16GB", (7, 0)), ("Tesla P100-PCIE-16GB", (6, 0))])
def test_the_first_kernel_check_names_the_route_with_code_for_the_gpu(gpu):
    from workflow_scripts.cluster import kernel_check
    from workflow_scripts.common.errors import PermanentError

    def kernel():
        raise RuntimeError(V100_KERNEL)

    build = "PyTorch 2.14.1+cu130 for CUDA 13.0, code for sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"
    with pytest.raises(PermanentError) as err:
        kernel_check.first_kernel(kernel, "PyTorch", gpu, build, "systems.sxm2.envs.pytorch", host="node1")
    msg = str(err.value)
    assert f"{gpu[0]} ({kernel_check.sm(gpu[1])})" in msg and "no kernel image for this GPU" in msg, msg
    assert f"Fix: point config systems.sxm2.envs.pytorch at {CU126}" in msg and "driver R525 or newer" in msg, msg
    assert ".envs/torch/bin/python (" not in msg, msg  # the CUDA 13 build has no code for it
    # MXNet on an H100 has no route with code for it: the fix is the container alone
    with pytest.raises(PermanentError) as err:
        kernel_check.first_kernel(kernel, "MXNet", ("NVIDIA H100 80GB HBM3", (9, 0)), "b", "envs_gpu.mxnet")
    assert "point config" not in str(err.value) and "nvcr.io/nvidia/mxnet:24.04-py3" in str(err.value)


@pytest.mark.stage
def test_preflights_kernel_row_names_the_other_pytorch_route():
    """In preflight's rank, torch 2.14.1 is the build that failed: the fix names the other route."""
    code = (
        "import torch\nfrom workflow_scripts.preflight.owners import classify\n"
        f"print(classify(RuntimeError({V100_KERNEL!r}), 'pytorch', 'envs_gpu.pytorch')[1])"
    )
    proc = subprocess.run([interpreter("pytorch"), "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"point config envs_gpu.pytorch at {CU126}"), proc.stdout
    assert ".envs/torch/bin/python (" not in proc.stdout, proc.stdout


@pytest.mark.stage
def test_compile_auto_is_eager_where_triton_cannot_compile():
    """P100 (sm_60): Triton, torch.compile's backend, refuses compute capability below 7.0."""
    code = (
        "from workflow_scripts.train.pytorch_options import compile_mode as c\n"
        "print([c('auto', True, 'dali', 'whole', cc) for cc in ((6, 0), (7, 0), (9, 0))], "
        "c('default', True, 'dali', 'whole', (6, 0)), c('auto', False, 'cpu', 'whole'))"
    )
    proc = subprocess.run([interpreter("pytorch"), "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["['',", "'reduce-overhead',", "'reduce-overhead']", "default"], proc.stdout
