"""Each SLURM job's threads come from its own allocation, never from the submitting host: the SLURM
profile is read beside profiles/default's `cores: all`, so Snakemake's {threads} is capped at the
login node's cores (2 here) while sbatch asks for the rule's cpus_per_task. A dry run with the SLURM
profile on such a host: every job whose command sets a thread count carries its --cpus-per-task, and
an INT8 job run inside a SLURM job takes the CPUs of its allocation from it."""

import json
import os
import re
import subprocess

import pytest
from helpers import REPO, interpreter
from helpers.dry_run import cluster, resource, snakemake_slurm, submitted

pytestmark = pytest.mark.stage


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """The SLURM jobs of `snakemake -n -p all --profile slurm --cores 2` on the 16 x 4 A100 cluster,
    its INT8 stage on TensorRT (inference.threads 16: the schema's default)."""
    work = tmp_path_factory.mktemp("threads")
    return submitted(snakemake_slurm(work, cluster(work, "a100"), "-n", "-p", "all", "--cores", "2"))


def threads_words(planned):
    """{rule: (--threads N, --cpus-per-task M or None, the cpus_per_task sbatch gets)} of every job
    whose command sets a thread count."""
    out = {}
    for group in planned:
        for job in group:
            threads = re.search(r" --threads (\d+)", job["shell"])
            if threads:
                words = re.search(r" --cpus-per-task '?(\d+)'?", job["shell"])
                allocation = int(resource(job, "cpus_per_task"))
                out[job["rule"]] = (int(threads.group(1)), int(words.group(1)) if words else None, allocation)
    return out


def allocation_missing(found):
    """The rules whose command's thread count is the host's: neither --threads nor --cpus-per-task is
    the allocation's."""
    return {rule for rule, (threads, words, allocation) in found.items() if allocation not in (threads, words)}


def test_every_job_that_sets_threads_carries_its_allocation(planned):
    found = threads_words(planned)
    assert {"int8_export", "int8_calibrate", "int8_engine", "int8_evaluate", "int8_throughput_run"} <= set(found)
    assert found["int8_export"][2] == 16 and found["int8_export"][0] == 2  # the host's cap, what Snakemake gives
    assert "data_check" in found and allocation_missing(found) == set(), found


def test_an_int8_job_in_a_slurm_job_runs_on_its_allocations_cpus(tmp_path):
    """The timed runs' own record: 1 thread inside a SLURM job of one CPU however many the host's
    --threads said, and those --threads outside one (a local run, capped at --cores)."""
    model = tmp_path / "tiny.onnx"
    _tiny_model(model)
    argv = [interpreter("pytorch"), "-m", "workflow_scripts.int8.throughput", "--engine", "onnxruntime"]
    argv += ["--network", "resnet50", "--fp32", model, "--int8", model, "--image-size", "8", "--batch-size", "1"]
    argv += ["--warmup", "0", "--repeats", "2", "--threads", "2", "--cpus-per-task", "1"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    for slurm, threads in ((True, 1), (False, 2)):
        out = tmp_path / f"bs1.{slurm}.json"
        job = dict(env, SLURM_JOB_ID="7") if slurm else env
        subprocess.run([*map(str, argv), "--out", str(out)], cwd=REPO, env=job, check=True, capture_output=True)
        record = json.loads(out.read_text())
        assert record["threads"] == threads and record["precisions"]["fp32"]["device"].endswith(f", {threads} threads")


TINY_MODEL = """
import sys
import numpy as np, onnx
from onnx import TensorProto, helper, numpy_helper
w = numpy_helper.from_array(np.ones((3 * 8 * 8, 4), np.float32), "w")
nodes = [helper.make_node("Flatten", ["input"], ["flat"]), helper.make_node("MatMul", ["flat", "w"], ["output"])]
graph = helper.make_graph(
    nodes, "tiny", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 3, 8, 8])],
    [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["n", 4])], [w])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.save(model, sys.argv[1])
"""


def _tiny_model(path):
    """An ONNX model of 4 classes on 3 x 8 x 8 images, which ONNX Runtime runs as any network's."""
    subprocess.run([interpreter("pytorch"), "-c", TINY_MODEL, str(path)], check=True, capture_output=True)
