"""The frameworks the workflow trains, one record each: everything that differs between them and is
not their adapter's code (train/<trainer>.py) is read from here: the plan's maps, the rules'
wildcard constraints, the argparse choices, the preflight module, the thread rule, the container a
fix names. Adding a framework is a record here, its adapter, its preflight module (preflight/fw_*),
its thread rule and its requirements file (docs/architecture.md#add-a-framework); the schema's enums
and the rules' constraints are checked against REGISTRY by tests/test_frameworks.py.

Nothing here imports a framework: every environment, the workflow's own included, reads it.
"""

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Framework:
    name: str  # config's (training.frameworks, envs.<name>) and the run directories'
    title: str  # as tables and messages name it; also its adapter's class in its trainer module
    package: str  # what a rank imports, and the name its version is recorded under
    data_format: str  # the data stage's copy it reads: data_dir/<format> (rules/data.smk)
    trainer: str  # its trainer: workflow_scripts.train.<trainer>
    preflight: str  # its per-task checks: workflow_scripts.preflight.<preflight>
    inputs: tuple  # its input paths (training.inputs) besides auto; synthetic always among them
    gpu_input: str  # what input auto is on a GPU (on a CPU: cpu, for all)
    collective: str  # "horovod" (over Gloo or NCCL, built with the framework) or "torch.distributed"
    fp16_gradient_bytes: int  # bytes a gradient element all-reduces in an fp16 run (its mixed precision's)
    conda: str  # its environment's conda file, as the rules name it
    container: str  # NVIDIA's image with code for current GPUs, named by a fix (cluster/kernel_check.py)
    threads: str  # the module of its thread rule: counts(), decode(), SPARE_ON_GPU (preflight/owners.py)

    @property
    def horovod(self):
        return self.collective == "horovod"

    def thread_rule(self):
        """Its thread rule's module, imported where it is called (PyTorch's imports torch: only in
        its own environment)."""
        return importlib.import_module(self.threads)


# The study's three (paper section III): TensorFlow and MXNet on Horovod, Caffe2 then (its LMDB is
# PyTorch's now) on the framework's own collectives.
REGISTRY = {
    f.name: f
    for f in (
        Framework(
            name="tensorflow",
            title="TensorFlow",
            package="tensorflow",
            data_format="tfrecord",
            trainer="tensorflow_horovod",
            preflight="fw_tensorflow",
            inputs=("cpu", "synthetic"),
            gpu_input="cpu",
            collective="horovod",
            fp16_gradient_bytes=4,  # Keras' mixed precision keeps float32 variables
            conda="../envs/tf-mxnet.yaml",
            container="nvcr.io/nvidia/tensorflow:<yy.mm>-tf2-py3 (ships Horovod)",
            threads="workflow_scripts.cluster.threads_tensorflow",
        ),
        Framework(
            name="mxnet",
            title="MXNet",
            package="mxnet",
            data_format="recordio",
            trainer="mxnet_horovod",
            preflight="fw_mxnet",
            inputs=("cpu", "synthetic"),
            gpu_input="cpu",
            collective="horovod",
            fp16_gradient_bytes=2,  # its fp16 casts the model itself to float16
            conda="../envs/tf-mxnet.yaml",
            # CUDA 12 and Hopper kernels, the one NVIDIA's MLPerf v4.0 ResNet-50 used (later ones
            # exist: docs/slurm.md, "The last MXNet container")
            container="nvcr.io/nvidia/mxnet:24.04-py3",
            threads="workflow_scripts.cluster.threads_mxnet",
        ),
        Framework(
            name="pytorch",
            title="PyTorch",
            package="torch",
            data_format="lmdb",
            trainer="pytorch_ddp",
            preflight="fw_pytorch",
            inputs=("cpu", "gpu", "dali", "synthetic"),
            gpu_input="dali",  # docs/decisions.md#input
            collective="torch.distributed",
            fp16_gradient_bytes=4,  # autocast keeps float32 parameters
            conda="../envs/torch.yaml",
            container="nvcr.io/nvidia/pytorch:<yy.mm>-py3",
            threads="workflow_scripts.train.pytorch_threads",
        ),
    )
}
NAMES = tuple(REGISTRY)


def of(name):
    return REGISTRY[name]


def reading(data_format):
    """The frameworks that read the data stage's copy `data_format`, in registry order."""
    return [f for f in REGISTRY.values() if f.data_format == data_format]


def wildcard():
    """The rules' constraint on a {framework} wildcard."""
    return "|".join(NAMES)
