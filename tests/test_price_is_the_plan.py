"""The price is the plan: on three clusters (docs/slurm.md's 8 nodes x 8 H100, one drained, its
64-GPU point waiting; 16 nodes x 4 A100 with gres, one drained, nodes_down: skip; the same with
driver R535 and the preset's INT8 alone), `snakemake price
--profile slurm` lists exactly the SLURM jobs `snakemake -n all --profile slurm` would submit: each
job, the runs it holds in turn, its nodes and time limit, whether it holds a GPU. The cluster is
faked only in its commands (helpers/dry_run.py): what is tested is what the plan submits."""

import json

import pytest
from helpers.dry_run import CLUSTERS, cluster, holds_gpus, resource, snakemake_slurm, submitted

pytestmark = pytest.mark.stage


@pytest.mark.parametrize("name", sorted(CLUSTERS))
def test_the_price_lists_exactly_the_jobs_the_dry_run_would_submit(tmp_path, name):
    env = cluster(tmp_path, name)
    said = snakemake_slurm(tmp_path, env, "price", "--slurm-init-seconds-before-status-checks", "1")
    priced = json.loads((tmp_path / "results" / "price.json").read_text())["jobs"]
    planned = submitted(snakemake_slurm(tmp_path, env, "-n", "all"))
    assert len(priced) == len(planned), (len(priced), len(planned), said[-3000:])
    where = {out: (n, k) for n, group in enumerate(planned) for k, job in enumerate(group) for out in job["outputs"]}
    matched = set()
    for p in priced:
        members = {where.get(out) for out in p["outputs"]}
        assert None not in members, (p["name"], p["outputs"])
        (n,) = {n for n, _ in members}
        group = planned[n]
        assert len(members) == len(group) and {j["rule"] for j in group} == {p["rule"]}, (p["name"], group)
        runtime = sum(int(resource(j, "runtime")) for j in group) * p.get("up_to_jobs", 1)
        nodes = int(resource(group[0], "nodes") or 1)
        assert (p["time_min"], p["nodes"], p["gpu_job"]) == (runtime, nodes, holds_gpus(group[0])), (p, group[0])
        matched.add(n)
    assert len(matched) == len(planned)
    stages = {p["stage"] for p in priced}
    assert {"training", "preflight", "interconnect", "INT8", "data"} <= stages
    int8_gpu = [p for p in priced if p["stage"] == "INT8" and p["gpu_job"]]
    # the engine builds and evaluations at the profile's default runtime; Fig. 9 one job for minutes
    (timing,) = [p for p in int8_gpu if p["rule"] == "int8_throughput_run"]
    assert timing["exclusive"] and timing["time_min"] == 9, timing
    assert len(int8_gpu) > 1 and all(p["time_min"] == 120 for p in int8_gpu if p is not timing)
    if name == "a100_r535":  # the preset's INT8 alone: Table III's 7 networks and Fig. 9, each job on a GPU
        rules = [p["rule"] for p in int8_gpu]
        assert sorted(rules) == ["int8_engine"] * 14 + ["int8_evaluate"] * 14 + ["int8_throughput_run"], rules
    # nodes_down skip: the 64-GPU point is no job of the plan, and no allocation of the price
    largest = json.loads((tmp_path / "results" / "price.json").read_text())["summary"]["largest"]
    assert (largest["nodes"], largest["gpus"]) == ((8, 64) if name == "h100" else (8, 32)), largest
