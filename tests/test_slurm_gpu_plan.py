"""benchmarks/slurm_gpu.py without a GPU: each part's config overlay is one the workflow takes
(`snakemake -n` of the part's targets plans the jobs it is meant to), and the cluster it starts
describes its GPUs to SLURM (slurm.conf's Gres, gres.conf's device files, one GPU per node on two
nodes). Its --dry-run is run by tests/test_benchmarks.py from docs/benchmarks.md's command."""

import os
import re
import shutil
import subprocess
import sys
import tarfile

import pytest
import yaml
from helpers import REPO, SNAKEMAKE

from benchmarks import slurm_cluster, slurm_gpu

PLAN = slurm_gpu.plan(2, "", 32, "dali", 100)  # "": no gpu_type, which sinfo would be asked about


@pytest.mark.stage
@pytest.mark.parametrize("part", [p for p in slurm_gpu.PARTS if PLAN[p]["config"]])
def test_each_part_plans_its_points(part, tmp_path):
    (tmp_path / "overlay.yaml").write_text(yaml.safe_dump(PLAN[part]["config"]))
    targets = [t for stage in PLAN[part]["targets"] for t in stage]
    # No SLURM tools on the PATH: the parse-time checks ask no cluster (the tests' may be up).
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("which", "sh", "bash", "git", "nproc"):
        if shutil.which(tool):
            (tools / tool).symlink_to(shutil.which(tool))
    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}:{tools}")
    proc = subprocess.run(
        [SNAKEMAKE, "-n", "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path), "--configfile"]
        + [str(REPO / "config.yaml"), str(tmp_path / "overlay.yaml"), "--cores", "2", *targets],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    system = PLAN[part]["config"]["training"]["systems"]
    runs = set(re.findall(r"results/runs/([\w/]+)/summary\.json", out))
    if part in ("one", "local"):
        want = {f"{system[0]}/pytorch_fp16_{g}gpu{v}" for g in (1, 2) for v in ("", "_synthetic")}
        assert want <= runs, runs
    if part == "two":
        assert runs == {"slurm2/pytorch_fp16_2gpu_synthetic"}, runs
    if part == "faults":
        assert {f"{s}/pytorch_fp16_{g}gpu_synthetic" for s in ("limit1", "slurm1") for g in (1, 2)} <= runs, runs
    if part == "long":
        assert "slurm1/accuracy/pytorch_fp16_2gpu" in runs, runs


@pytest.mark.unit
def test_the_gpu_counts_asked_reach_the_sweep_and_its_data_holds_a_global_batch():
    four = slurm_gpu.plan(4, "", 64, "dali", 100, counts=[1, 2, 4])
    assert four["one"]["config"]["training"]["gpus"] == [1, 2, 4]
    assert four["local"]["config"]["training"]["gpus"] == [1, 2, 4]
    assert PLAN["one"]["config"]["training"]["gpus"] == [1, 2]  # default: 1 and every GPU
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    for n in (2, 4, 8):
        images = slurm_gpu.plan(n, "", 64, "dali", 100)["long"]["config"]["dataset"]["embedded"]["train_per_class"]
        global_batch = slurm_gpu.BATCH * config["training"]["fp16_batch_factor"] * n
        assert images * config["dataset"]["embedded"]["classes"] >= global_batch, n
    with pytest.raises(ValueError, match="has 2 GPU"):
        slurm_gpu.plan(2, "", 32, "dali", 100, counts=[1, 4])


@pytest.mark.unit
def test_the_cluster_tells_slurm_of_each_nodes_gpus():
    one = slurm_cluster.Cluster(("n1",), cpus=32, gres={"n1": ("h100", ["/dev/nvidia0", "/dev/nvidia1"])})
    two = slurm_cluster.Cluster(
        ("n1", "n2"), cpus=16, gres={"n1": ("h100", ["/dev/nvidia0"]), "n2": ("h100", ["/dev/nvidia1"])}
    )
    plain = slurm_cluster.Cluster()
    try:
        assert "GresTypes=gpu" in one.slurm_conf() and "NodeName=n1 NodeAddr=10.88.7.1 CPUs=32 " in one.slurm_conf()
        assert " Gres=gpu:h100:2 " in one.slurm_conf()
        assert one.gres_conf().splitlines() == [
            "NodeName=n1 Name=gpu Type=h100 File=/dev/nvidia0",
            "NodeName=n1 Name=gpu Type=h100 File=/dev/nvidia1",
        ]
        assert [ln for ln in two.slurm_conf().splitlines() if ln.startswith("NodeName")] == [
            "NodeName=n1 NodeAddr=10.88.7.1 CPUs=16 RealMemory=12000 Gres=gpu:h100:1 State=UNKNOWN",
            "NodeName=n2 NodeAddr=10.88.7.2 CPUs=16 RealMemory=12000 Gres=gpu:h100:1 State=UNKNOWN",
        ]
        assert two.gres_conf().splitlines()[1] == "NodeName=n2 Name=gpu Type=h100 File=/dev/nvidia1"
        # The tests' CPU cluster: no GPUs, nothing of gres
        assert "Gres" not in plain.slurm_conf()
    finally:
        for c in (one, two, plain):
            c.base.rmdir()


@pytest.mark.unit
def test_what_comes_back_leaves_models_out_and_keeps_every_table(tmp_path):
    """A call returns files of at most 16 MiB: the archive holds no ONNX model, engine or weights
    (the long part's INT8 models made it too large to return), and the tables come back beside it."""
    work = tmp_path / "work"
    for rel, size in {
        "long/results/conclusions.md": 10,
        "long/results/int8/resnet50/onnxruntime/fp32.onnx": 1000,
        "long/results/int8/resnet50/onnxruntime/int8.engine": 1000,
        "long/results/runs/slurm1/accuracy/pytorch_fp16_2gpu/checkpoint.pt": 1000,
        "long/results/runs/slurm1/accuracy/pytorch_fp16_2gpu/summary.json": 10,
        "one/results/scaling.md": 10,
    }.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text("x" * size)
    slurm_gpu.tables(tmp_path / "tables.md", work, ["long", "one"])
    text = (tmp_path / "tables.md").read_text()
    assert "# long/results/conclusions.md" in text and "# one/results/scaling.md" in text
    with tarfile.open(tmp_path / "a.tgz", "w:gz") as tar:
        tar.add(work / "long" / "results", arcname="long/results", filter=slurm_gpu._small)
    with tarfile.open(tmp_path / "a.tgz") as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
    assert sorted(names) == [
        "long/results/conclusions.md",
        "long/results/runs/slurm1/accuracy/pytorch_fp16_2gpu/summary.json",
    ]
