"""The interconnect stage on the embedded default (Gloo, 2 processes on the CPU): its bandwidths
recomputed from every call's time in its raw output, a row for every sweep point, reruns limited
to what an interconnect key feeds, the scaling prediction recomputed from the raw output and the
runs' summaries, and the stand-alone tools a bare GPU host runs."""

import json
import math
import statistics
import subprocess

import pandas as pd
import pytest
from helpers import CONFIG, REPO, interpreter, pipeline_config, planned_jobs, snakemake, write_config
from helpers.hostile import HOSTILE, markers

from workflow_scripts.common.errors import StageError
from workflow_scripts.interconnect import nccl_tests

IC = CONFIG["interconnect"]
CPU_MAX_BYTES = 2**27  # max_bytes auto on a system without GPU requests
SIZES = [IC["min_bytes"] * 2**k for k in range(64) if IC["min_bytes"] * 2**k <= CPU_MAX_BYTES]


def raw_of(work, system="local", gpus=2, source="torch"):
    return json.loads((work / "results" / "interconnect" / system / f"{gpus}gpu" / f"{source}.json").read_text())


def check_bandwidths(raw):
    """Every figure of a raw output, recomputed from its per-rank, per-call times."""
    n = raw["world_size"]
    for r in raw["results"]:
        assert len(r["per_rank_s"]) == n and all(len(t) == raw["iterations"] for t in r["per_rank_s"])
        calls = [max(t) for t in zip(*r["per_rank_s"])]
        assert r["call_s"] == calls
        assert (r["median_s"], r["min_s"], r["max_s"]) == (statistics.median(calls), min(calls), max(calls))
        assert r["algbw_GBps"] == pytest.approx(r["bytes"] / r["median_s"] / 1e9, rel=1e-12)
        factor = 2 * (n - 1) / n if r["collective"] == "all_reduce" else 1
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * factor, rel=1e-12)
        assert r["count"] * 4 == r["bytes"]


@pytest.mark.pipeline
def test_bandwidths_are_the_raw_timings(pipeline_run):
    raw = raw_of(pipeline_run)
    assert (raw["backend"], raw["world_size"], raw["num_nodes"]) == ("gloo", 2, 1)
    assert (raw["warmup"], raw["iterations"]) == (IC["warmup"], IC["iterations"])
    assert raw["device"].startswith("CPU: ") and raw["launch"]["source"] == "env"
    # config nccl_env is empty by default: NCCL's own behaviour, nothing switched off by the stage
    assert "NCCL_NVLS_ENABLE" not in raw["nccl_env"]
    check_bandwidths(raw)
    # The table's figures are the raw output's.
    table = pd.read_csv(pipeline_run / "results" / "interconnect.csv")
    by_key = {(r["collective"], r["bytes"]): r for r in raw["results"]}
    for row in table.itertuples():
        r = by_key[(row.collective, row.bytes)]
        assert (row.time_s, row.median_s, row.min_s, row.max_s) == pytest.approx(
            (r["median_s"], r["median_s"], r["min_s"], r["max_s"])
        )
        assert (row.algbw_GBps, row.busbw_GBps) == pytest.approx((r["algbw_GBps"], r["busbw_GBps"]))


@pytest.mark.pipeline
def test_every_sweep_point_has_a_row(pipeline_run):
    table = pd.read_csv(pipeline_run / "results" / "interconnect.csv")
    t = CONFIG["training"]
    expected = {
        (s, g, c, b, "torch.distributed")
        for s in t["systems"]
        for g in t["gpus"]
        if g > 1
        for c in IC["collectives"]
        for b in SIZES
    }
    got = list(zip(table.system, table.gpus, table.collective, table.bytes, table.source))
    assert len(got) == len(set(got)) and set(got) == expected
    assert set(table.scope) == {"intra-node"} and set(table.backend) == {"gloo"} and (table.nodes == 1).all()
    md = (pipeline_run / "results" / "interconnect.md").read_text()
    assert md.startswith("# Interconnect") and "warmup calls are excluded" in md and "nccl-tests not run" in md
    png = (pipeline_run / "results" / "figures" / "interconnect_busbw.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


@pytest.mark.pipeline
def test_interconnect_keys_rerun_only_the_interconnect_and_what_reads_it(pipeline_run):
    work = pipeline_run
    reads_allreduce = {
        "interconnect_collectives": 1,
        "interconnect_table": 1,
        "interconnect_figure": 1,
        "training_tables": 1,
        "training_figures": 1,
        "conclusions": 1,  # the verdict table reads scaling.csv
        "scaling_prediction": 1,  # fitted to the interconnect table
    }
    try:
        pipeline_config(work, interconnect__iterations=IC["iterations"] + 1)
        assert planned_jobs(work) == reads_allreduce
        pipeline_config(work, interconnect__max_bytes=2**20)
        assert planned_jobs(work) == reads_allreduce
        pipeline_config(work, interconnect__collectives=["broadcast"])  # scaling then has nothing to read
        assert planned_jobs(work) == reads_allreduce
        pipeline_config(work, systems={"local": {**CONFIG["systems"]["local"], "link_gbps": 12.5}})
        assert planned_jobs(work) == {"interconnect_figure": 1}
    finally:
        pipeline_config(work)
    assert planned_jobs(work) == {}


def log_log(points, nbytes):
    """The all-reduce time at nbytes, straight in log-log between the measured sizes around it."""
    (b0, t0), (b1, t1) = next((p, q) for p, q in zip(points, points[1:]) if p[0] <= nbytes <= q[0])
    return t0 * (t1 / t0) ** (math.log(nbytes / b0) / math.log(b1 / b0))


@pytest.mark.pipeline
def test_scaling_prediction_is_the_raw_allreduce_against_the_runs(pipeline_run):
    runs = pipeline_run / "results" / "runs" / "local"
    points = sorted(
        (r["bytes"], r["median_s"]) for r in raw_of(pipeline_run)["results"] if r["collective"] == "all_reduce"
    )
    scaling = pd.read_csv(pipeline_run / "results" / "scaling.csv")
    md = (pipeline_run / "results" / "scaling.md").read_text()
    multi = scaling[scaling.gpus > 1]
    assert len(multi) == len(CONFIG["training"]["frameworks"]) and multi.allreduce_s.notna().all()
    for r in multi.itertuples():
        base = json.loads((runs / f"{r.framework}_{r.precision}_1gpu" / "summary.json").read_text())
        mine = json.loads((runs / f"{r.framework}_{r.precision}_{r.gpus}gpu" / "summary.json").read_text())
        grads = mine["gradients"]
        assert grads["bytes"] == grads["elements"] * grads["element_bytes"] == r.gradient_bytes
        assert grads["element_bytes"] == 4 and grads["dtype"] == "float32"
        if r.framework == "pytorch":  # torchvision's 25,557,032 less the 984 classes the default lacks
            assert grads["elements"] == 25_557_032 - 2049 * (1000 - 16)
        t1 = base["global_batch"] / base["images_per_s"]
        tn = mine["global_batch"] / mine["images_per_s"]
        t_ar = log_log(points, grads["bytes"])
        assert (r.step_s, r.baseline_step_s, r.allreduce_s) == pytest.approx((tn, t1, t_ar))
        assert r.efficiency == pytest.approx(t1 / tn)
        assert r.efficiency_no_overlap == pytest.approx(t1 / (t1 + t_ar))
        assert r.efficiency_full_overlap == pytest.approx(t1 / max(t1, t_ar))
        e, lo, hi = t1 / tn, t1 / (t1 + t_ar), t1 / max(t1, t_ar)
        label = (
            "above full overlap"
            if e >= hi
            else "below no overlap"
            if e <= lo
            else "closer to no overlap"
            if e - lo < hi - e
            else "closer to full overlap"
        )
        assert r.communication_bound == label
        sentence = next(x for x in md.splitlines() if x.startswith(f"- local/{r.framework}_{r.precision}_{r.gpus}gpu:"))
        assert f"{e:.1%}" in sentence and f"{lo:.1%}" in sentence and f"{hi:.1%}" in sentence
    assert scaling[scaling.gpus == 1].allreduce_s.isna().all()


@pytest.mark.pipeline
def test_scaling_without_the_interconnect_says_so(pipeline_run, tmp_path):
    points = [
        {
            "system": "local",
            "framework": f,
            "precision": "fp32",
            "gpus": g,
            "input": "auto",
            "repeat": 1,
            "nodes": 1,
            "run_dir": str(pipeline_run / "results" / "runs" / "local" / f"{f}_fp32_{g}gpu"),
        }
        for f in CONFIG["training"]["frameworks"]
        for g in CONFIG["training"]["gpus"]
    ]
    proc = subprocess.run(
        [
            interpreter("workflow"),
            "-m",
            "workflow_scripts.results.training_tables",
            "--points",
            json.dumps(points),
            "--out-dir",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    scaling = pd.read_csv(tmp_path / "scaling.csv")
    assert scaling.allreduce_s.isna().all() and scaling.efficiency.notna().all()
    assert (
        "no prediction: the interconnect stage has no all-reduce at 2 GPUs on local"
        in (tmp_path / "scaling.md").read_text()
    )


@pytest.mark.stage
def test_three_ranks_use_the_all_reduce_bus_factor_of_three(tmp_path):
    """busbw/algbw = 2(n-1)/n depends on n: a real 3-process Gloo run, small messages."""
    py = interpreter("pytorch")
    out = tmp_path / "three.json"
    proc = subprocess.run(
        [
            py,
            "-m",
            "workflow_scripts.cluster.launcher",
            "--nproc-per-node",
            "3",
            "--",
            py,
            "-m",
            "workflow_scripts.interconnect.collectives",
            "--max-bytes",
            "4096",
            "--warmup",
            "1",
            "--iterations",
            "3",
            "--out",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    raw = json.loads(out.read_text())
    assert raw["world_size"] == 3 and [r["bytes"] for r in raw["results"]][:3] == [8, 16, 32]
    check_bandwidths(raw)
    assert {round(r["busbw_GBps"] / r["algbw_GBps"], 9) for r in raw["results"] if r["collective"] == "all_reduce"} == {
        round(4 / 3, 9)
    }


@pytest.mark.pipeline
def test_standalone_tools_give_the_pipelines_figures(pipeline_run, tmp_path):
    """What the lead runs on a bare GPU host: rows.py and efficiency_bounds.py on the raw JSON alone."""
    raw = pipeline_run / "results" / "interconnect" / "local" / "2gpu" / "torch.json"
    proc = subprocess.run(
        [
            interpreter("pytorch"),
            "-m",
            "workflow_scripts.interconnect.bandwidth_rows",
            str(raw),
            "--system",
            "local",
            "--csv",
            str(tmp_path / "x.csv"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    mine, pipeline = pd.read_csv(tmp_path / "x.csv"), pd.read_csv(pipeline_run / "results" / "interconnect.csv")
    key = ["collective", "bytes"]
    merged = mine.merge(pipeline, on=key, suffixes=("", "_p"))
    assert len(merged) == len(pipeline) == len(mine)
    assert merged.busbw_GBps.tolist() == pytest.approx(merged.busbw_GBps_p.tolist())
    assert merged.time_s.tolist() == pytest.approx(merged.time_s_p.tolist())
    assert proc.stdout.count("\n| local |") == len(pipeline)
    runs = pipeline_run / "results" / "runs" / "local"
    proc = subprocess.run(
        [
            interpreter("pytorch"),
            "-m",
            "workflow_scripts.interconnect.efficiency_bounds",
            "--raw",
            str(raw),
            "--baseline-summary",
            str(runs / "pytorch_fp32_1gpu" / "summary.json"),
            "--summary",
            str(runs / "pytorch_fp32_2gpu" / "summary.json"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    row = pd.read_csv(pipeline_run / "results" / "scaling.csv").query("framework == 'pytorch' and gpus == 2").iloc[0]
    assert f"no overlap {row.efficiency_no_overlap:.2%}, full overlap {row.efficiency_full_overlap:.2%}" in proc.stdout
    assert f"measured efficiency {row.efficiency:.2%}" in proc.stdout


@pytest.mark.stage
@pytest.mark.parametrize(
    "overrides, named",
    [
        ({"interconnect__max_bytes": 4, "interconnect__min_bytes": 8}, "interconnect.max_bytes"),
        ({"interconnect__min_bytes": 6}, "min_bytes"),
        ({"interconnect__nccl_tests": "/no/such/nccl-tests"}, "interconnect.nccl_tests"),
        ({"interconnect__collectives": ["all_gather"]}, "collectives"),
    ],
)
def test_bad_interconnect_config_stops_at_parse_time_naming_the_key(tmp_path, overrides, named):
    write_config(tmp_path, **overrides)
    proc = snakemake(tmp_path, "-n", check=False)
    assert proc.returncode != 0 and named in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-2000:]


@pytest.mark.pipeline
def test_hostile_paths_reach_the_stage_as_single_arguments(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    # PyTorch alone: the stage waits for the preflight of every framework trained, and the others'
    # preflight under these paths is run by tests/test_shell_safety.py and tests/test_slurm.py.
    write_config(
        work,
        **HOSTILE,
        interconnect__max_bytes=1024,
        interconnect__iterations=2,
        interconnect__warmup=1,
        training__frameworks=["pytorch"],
    )
    snakemake(work, f"{HOSTILE['results_dir']}/interconnect.csv")
    table = pd.read_csv(work / HOSTILE["results_dir"] / "interconnect.csv")
    assert len(table) == len(IC["collectives"]) * 8  # 8 B .. 1 KiB
    assert (work / HOSTILE["log_dir"] / "interconnect" / "local" / "2gpu.torch.log").is_file()
    assert markers(tmp_path) == []


# nccl-tests' printed table as its src/util.cu formats it (preamble "%12li  %12li  %8s  %6s  %6s",
# then per place "  %7s  %6s  %6s  %6g"); the numbers are made up, the parser is what is tested.
def nccl_tests_output(ranks, sizes, prefix=""):
    lines = [
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20",
        "#",
        "# Using devices",
    ]
    lines += [
        f"#  Rank {r:2d} Group  0 Pid {100 + r:6d} on {host:>10s} device {r:2d} [0x{r:02x}] NVIDIA H200"
        for r, host in enumerate(ranks)
    ]
    lines += [
        "#",
        "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
        "   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
    ]
    for size in sizes:
        lines.append(
            "%12li  %12li  %8s  %6s  %6s" % (size, size // 4, "float", "sum", -1)  # noqa: UP031  (nccl-tests' own printf format)
            + "  %7s  %6s  %6s  %6g" % ("20.00", "0.00", "0.00", 0)  # noqa: UP031  (nccl-tests' own printf format)
            + "  %7s  %6s  %6s  %6g" % (f"{size * 10:.2f}", "1.00", "1.00", 0)  # noqa: UP031  (nccl-tests' own printf format)
        )
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 0.5", ""]
    return "\n".join(prefix + line for line in lines)


@pytest.mark.unit
def test_nccl_tests_table_is_parsed_in_place_with_its_ranks():
    ranks, rows = nccl_tests.parse(nccl_tests_output(["n1", "n2"], [8, 16]), "all_reduce")
    assert ranks == {0: {"host": "n1", "device": "NVIDIA H200"}, 1: {"host": "n2", "device": "NVIDIA H200"}}
    assert [(r["bytes"], r["count"], r["time_s"], r["algbw_GBps"]) for r in rows] == [
        (8, 2, pytest.approx(80e-6), 1.0),
        (16, 4, pytest.approx(160e-6), 1.0),
    ]
    assert rows[0]["out_of_place"]["time_us"] == 20.0
    # srun --label prefixes every line with the task number
    labelled, _ = nccl_tests.parse(nccl_tests_output(["n1"], [8], prefix="0: "), "broadcast")
    assert labelled == {0: {"host": "n1", "device": "NVIDIA H200"}}
    with pytest.raises(StageError, match="no result table"):
        nccl_tests.parse("# nThread 1 nGpus 1\n", "all_reduce")


@pytest.mark.unit
def test_missing_nccl_tests_binary_names_the_config_key(tmp_path):
    with pytest.raises(StageError, match="interconnect.nccl_tests.*all_reduce_perf"):
        nccl_tests.binary(tmp_path, "all_reduce")


@pytest.mark.pipeline
def test_the_prediction_reaches_1024_gpus_and_says_how_far_to_trust_itself(pipeline_run):
    """One row per framework x N up to prediction.max_gpus; at the measured 2-process point the
    measured efficiency is scaling.csv's own; where the run lies outside the model's interval by more
    than prediction.tolerance (CPU processes sharing two cores, mostly) the row says the model is
    poor and gives bounds, not a forecast; a poor model never gives a forecast."""
    pred = pd.read_csv(pipeline_run / "results" / "scaling_prediction.csv")
    scaling = pd.read_csv(pipeline_run / "results" / "scaling.csv")
    frameworks = CONFIG["training"]["frameworks"]
    assert set(pred["gpus"]) == {2**k for k in range(11)}
    assert len(pred) == len(frameworks) * 11
    for fw in frameworks:
        at2 = pred[(pred["framework"] == fw) & (pred["gpus"] == 2)].iloc[0]
        measured = scaling[(scaling["framework"] == fw) & (scaling["gpus"] == 2)].iloc[0]
        assert at2["measured_efficiency"] == pytest.approx(measured["efficiency"], rel=1e-9)
        e, no, full = at2["measured_efficiency"], at2["efficiency_no_overlap"], at2["efficiency_full_overlap"]
        miss = no / e - 1 if e < no else full / e - 1 if e > full else 0.0
        if abs(miss) > CONFIG["prediction"]["tolerance"]:
            assert at2["model"] == "poor", at2.to_dict()
        rows = pred[pred["framework"] == fw]
        assert rows[rows["model"] == "poor"]["efficiency_predicted"].isna().all()
    assert pred[pred["gpus"] > 2]["allreduce_s"].isna().all()  # nothing across nodes was timed
    assert (pred["inter_from"] == "no all-reduce across nodes was timed").all()
    assert "## At the measured points" in (pipeline_run / "results" / "study_on_paper.md").read_text()
    verdicts = pd.read_csv(pipeline_run / "results" / "conclusions.csv")
    assert verdicts["predicted"].notna().any()
