"""A dry run with the SLURM profile on a cluster that is faked only in its commands: sinfo answers as
the partition of a few kinds of GPU node would (its last node drained), squeue (which the executor
plugin looks for) answers nothing. What the plan submits is real: the SLURM jobs of the dry run's
text, as the executor would submit them (submitted)."""

import os
import re
import subprocess
from pathlib import Path

import yaml

from . import stand_in
from .config import REPO
from .processes import interpreter
from .workflow import SNAKEMAKE

ENVS = {fw: interpreter(fw) for fw in ("tensorflow", "mxnet", "pytorch")}
CLUSTERS = {
    "h100": {
        "node": "h{}|224|2000000|gpu:h100:8|{}",
        "nodes": 8,
        "max_time": "12:00:00",
        "system": {"gpus_per_node": 8, "max_nodes": 8, "gpu_request": "gpus-per-node", "gpu_type": "h100"}
        | {"cpus_per_task": 28, "time_min": 60},
        "training": {"long_test": {"gpus": [8], "time_min": 720, "max_jobs": 12}},
        "inference": {"engine": "tensorrt", "models": {"resnet50": "torchvision"}},
        "pytorch_route": ".envs/torch/bin/python",
    },
    "a100": {
        "node": "a{}|128|1000000|gpu:a100:4|{}",
        "nodes": 16,
        "max_time": "2-00:00:00",
        "system": {"gpus_per_node": 4, "max_nodes": 16, "gpu_request": "gres", "gpu_type": "a100"}
        | {"cpus_per_task": 32, "time_min": 60, "nodes_down": "skip"},
        "training": {},
        "inference": {
            "engine": "tensorrt",
            "models": {m: "torchvision" for m in ("resnet50", "resnet101", "vgg16", "googlenet", "alexnet")},
        },
        "pytorch_route": ".envs/torch/bin/python",
    },
    # The issue-62 cluster: 16 x 4 A100-SXM4-80GB, driver R535 (CUDA 12.2), the preset's INT8 alone.
    "a100_r535": {
        "node": "a{}|128|1000000|gpu:a100:4|{}",
        "nodes": 16,
        "max_time": "2-00:00:00",
        "system": {"gpus_per_node": 4, "max_nodes": 16, "gpu_request": "gres", "gpu_type": "a100"}
        | {"cpus_per_task": 32, "time_min": 60, "nodes_down": "skip"},
        "training": {},
        "inference": {},
        # the route the R535 driver needs for PyTorch (docs/slurm.md)
        "pytorch_route": ".envs/torch-cu126/bin/python",
        "torch_cuda": "12.6",
    },
}


def cluster(work, name, pytorch=None, **route):
    """A working directory for `name`'s sweep on the study's preset: its config, a tiny ILSVRC2012
    tree, and sinfo answering for partition gpu with the last node drained. `route`: what the
    system's PyTorch route imports (helpers/stand_in.py route's keywords); `pytorch`: another
    interpreter for it (a container)."""
    from workflow_scripts.data import embedded

    c = CLUSTERS[name]
    envs = dict(ENVS)
    if c.get("pytorch_route"):
        # TensorRT cannot be installed here: a stand-in that imports as the route would (helpers/stand_in.py)
        where = work / Path(c["pytorch_route"]).parents[1]
        envs["pytorch"] = stand_in.route(where, **{"torch_cuda": c.get("torch_cuda"), **route})
    if pytorch:
        envs["pytorch"] = pytorch
    embedded.make(work / "ILSVRC2012", classes=2, train_per_class=1, val_per_class=1, quirks=False)
    config = {
        "dataset": {"root": str(work / "ILSVRC2012")},
        "systems": {name: {**c["system"], "partition": "gpu", "envs": envs}},
        "training": {"systems": [name], "gpus": [1, 2, 4, 8, 16, 32, 64], **c["training"]},
        "inference": c["inference"],
    }
    (work / "cluster.yaml").write_text(yaml.safe_dump(config))
    states = ["idle"] * (c["nodes"] - 1) + ["drained"]
    nodes = "".join(c["node"].format(i, s) + "\\n" for i, s in enumerate(states, 1))
    tools = work / "bin"
    tools.mkdir()
    (tools / "sinfo").write_text(
        "#!/bin/sh\n"
        'case " $* " in *" -p gpu "*) ;; *) exit 0 ;; esac\n'
        f'case " $* " in *"%l"*) printf "{c["max_time"]}\\n" ;; *) printf "{nodes}" ;; esac\n'
    )
    (tools / "squeue").write_text("#!/bin/sh\nexit 0\n")
    for tool in tools.iterdir():
        tool.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return dict(env, PATH=f"{tools}{os.pathsep}{os.path.dirname(SNAKEMAKE)}{os.pathsep}/usr/bin{os.pathsep}/bin")


def snakemake_slurm(work, env, *args, check=True):
    """What `snakemake --profile slurm ARGS` said; with check=False (its exit status, what it said)."""
    configs = [str(REPO / "config.yaml"), str(REPO / "presets" / "study.yaml"), str(work / "cluster.yaml")]
    proc = subprocess.run(
        [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(work)]
        + ["--profile", str(REPO / "profiles" / "slurm"), *args, "--configfile", *configs],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    if not check:
        return proc.returncode, proc.stdout + proc.stderr
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return proc.stdout + proc.stderr


def local_rules():
    """The Snakefile's localrules: they run where snakemake runs, and are never submitted."""
    block = re.search(r"^localrules:\n((?:[ \t]+\w+,\n)+)", (REPO / "Snakefile").read_text(), re.M)
    return set(block.group(1).replace(",", " ").split())


def submitted(text):
    """The SLURM jobs of a dry run: one per Snakemake group (its runs in turn) or per job alone, of the
    rules that are not local and have a command; each [{rule, outputs, resources}] of its jobs."""
    jobs, group, job, local = [], None, None, local_rules()
    for line in text.splitlines():
        head = re.match(r"^\[.*\] Group job (\S+) ", line)
        if head:
            group = []
            jobs.append(group)
            continue
        rule = re.match(r"^(\s*)rule (\w+):$", line)
        if rule:
            job = {"rule": rule.group(2), "outputs": [], "resources": "", "shell": None}
            if not rule.group(1):
                group = None
            if group is None:
                jobs.append([job])
            else:
                group.append(job)
        elif job is not None and line.strip().startswith(("output: ", "resources: ")):
            key, value = line.strip().split(": ", 1)
            job[key + ("s" if key == "output" else "")] = value.split(", ") if key == "output" else value
        elif job is not None and line.startswith("Shell command: "):
            job["shell"] = line.removeprefix("Shell command: ")
    return [g for g in jobs if all(j["rule"] not in local and j["shell"] not in (None, "None") for j in g)]


def resource(job, key):
    found = re.search(rf"(?:^|, ){key}=([^,]*)", job["resources"])
    return found.group(1) if found else None


def holds_gpus(job):
    extra, gres = resource(job, "slurm_extra") or "", resource(job, "gres") or ""
    return (
        "--exclusive" in extra or "--gpus-per-node=" in extra or gres.startswith("gpu:") or bool(resource(job, "gpu"))
    )
