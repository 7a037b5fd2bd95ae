"""A stand-in for a GPU route's interpreter where TensorRT cannot be installed: the PyTorch
environment's packages, plus, where asked, a `tensorrt` module that has a version and nothing
else, an empty `pycuda.driver`, and a `torch` whose only content is the version file of a build
for another CUDA (the route torch-cu126's torch is not installed here). It serves only what reads
whether those import and what the version file says (workflow_scripts/int8/engine_imports.py, a
dry run's plan); nothing built, run or timed with it is TensorRT's or torch's."""

import json
import subprocess
from pathlib import Path

from .processes import BASE_AND_SITES, interpreter


def route(where, tensorrt="10.3.0", pycuda=True, torch_cuda=None):
    """The python of a virtual environment at `where` (its bin/python), over the PyTorch
    environment's base Python and site-packages, with stand-in modules: `tensorrt` of that
    version (None: none), `pycuda`, and where torch_cuda is given a torch built for that CUDA."""
    where = Path(where)
    out = subprocess.run(
        [interpreter("pytorch"), "-c", BASE_AND_SITES], capture_output=True, text=True, timeout=120, check=True
    )
    base, sites = json.loads(out.stdout)
    subprocess.run([base, "-m", "venv", "--without-pip", str(where)], capture_output=True, timeout=300, check=True)
    (site,) = (where / "lib").glob("python*/site-packages")
    stubs = where / "stand-in"
    if tensorrt:
        (stubs / "tensorrt").mkdir(parents=True)
        (stubs / "tensorrt" / "__init__.py").write_text(f"__version__ = {tensorrt!r}\n")
    if pycuda:
        (stubs / "pycuda").mkdir(parents=True)
        (stubs / "pycuda" / "__init__.py").write_text("")
        (stubs / "pycuda" / "driver.py").write_text("")
    if torch_cuda:
        (stubs / "torch").mkdir(parents=True)
        (stubs / "torch" / "__init__.py").write_text("")
        (stubs / "torch" / "version.py").write_text(f"cuda = {torch_cuda!r}\n")
    (site / "environment.pth").write_text("".join(f"{s}\n" for s in [str(stubs), *sites]))
    return str(where / "bin" / "python")


def tensorrt_system(work, system="local"):
    """write_config's overrides that give `system` a PyTorch route importing TensorRT 10 and pycuda
    (a stand-in under `work`): what a dry run with inference.engine: tensorrt needs to be planned."""
    return {f"systems__{system}__envs": {"pytorch": route(Path(work) / "trt-route")}}
