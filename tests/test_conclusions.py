"""The verdict table (results/conclusions.csv/.md): each verdict computed from the table it names,
so a doctored figure flips it; a finding whose sweep point is missing stays, as not measured,
naming the config keys; the rule runs on the embedded default's tables and leads the HTML report.

The tables under tests/conclusions_tables/ are the embedded default's, copied from a finished
pipeline run (2 CPU processes, FP32, ONNX Runtime INT8)."""

import re
import shutil
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from conftest import REPO, snakemake, write_config

from workflow_scripts.results import conclusions as mod

SAMPLE = REPO / "tests" / "conclusions_tables"
SPEC = yaml.safe_load(mod.FINDINGS.read_text())


@pytest.fixture
def tables(tmp_path):
    """A writable copy of the sample's tables: doctor one, then read the verdicts."""
    out = tmp_path / "results"
    shutil.copytree(SAMPLE, out)
    return out


def verdicts(directory):
    return mod.conclusions(mod.load_tables(directory), SPEC).set_index("id")


def doctor(directory, name, change):
    path = directory / f"{name}.csv"
    df = change(pd.read_csv(path))
    df.to_csv(path, index=False)


def set_where(df, column, value, **match):
    mask = pd.Series(True, index=df.index)
    for k, v in match.items():
        mask &= df[k] == v
    assert mask.any(), match
    df.loc[mask, column] = value
    return df


def add_rows(df, *rows):
    new = pd.DataFrame(list(rows)).reindex(columns=df.columns)
    return new if df.empty else pd.concat([df, new], ignore_index=True)


def test_every_finding_has_a_row_on_the_sample(tables):
    v = verdicts(tables)
    assert list(v.index) == [f["id"] for f in SPEC["findings"]]
    assert set(v.verdict) <= {mod.HOLDS, mod.FAILS, mod.UNMEASURED}
    # The 2-process scaling rows: measured on the CPU at 2, not the study's 32, and said so.
    tf = v.loc["tensorflow_scaling_fp32"]
    assert tf.verdict == mod.FAILS and not tf.same_point and tf.device.startswith("CPU")
    assert "2 CPU processes" in tf.point and "nearest point" in tf.why
    assert tf.measured_value == pytest.approx(
        pd.read_csv(tables / "scaling.csv").query("framework == 'tensorflow' and gpus == 2").efficiency.iloc[0]
    )
    assert v.loc["caffe2_scaling_node_fp32", "verdict"] == mod.HOLDS  # PyTorch DDP, superlinear on 2 processes
    # The INT8 rows a CPU fills.
    assert v.loc["int8_speedup_small_batches", "verdict"] == mod.FAILS
    assert "CPU" in v.loc["int8_speedup_small_batches", "device"]
    assert v.loc["int8_accuracy_top1", "verdict"] == mod.HOLDS
    assert "inference.models" in v.loc["int8_accuracy_top1", "why"]
    # Every unmeasured row names at least one config key.
    for r in v[v.verdict == mod.UNMEASURED].itertuples():
        assert re.search(r"\b(training|inference|systems|dataset)\.\w", r.why), (r.Index, r.why)


@pytest.mark.parametrize(
    "finding, name, change, before, after",
    [
        # Fig. 2: TensorFlow's 2-process efficiency above the study's 68.6% at 32 GPUs.
        (
            "tensorflow_scaling_fp32",
            "scaling",
            lambda df: set_where(df, "efficiency", 0.70, framework="tensorflow", gpus=2),
            mod.FAILS,
            mod.HOLDS,
        ),
        # Fig. 2: PyTorch DDP (for Caffe2) within a node below 88.8%.
        (
            "caffe2_scaling_node_fp32",
            "scaling",
            lambda df: set_where(df, "efficiency", 0.80, framework="pytorch", gpus=2),
            mod.HOLDS,
            mod.FAILS,
        ),
        # Fig. 2: MXNet scaling best once its efficiency tops PyTorch's.
        (
            "mxnet_scales_best",
            "scaling",
            lambda df: set_where(df, "efficiency", 1.7, framework="mxnet", gpus=2),
            mod.FAILS,
            mod.HOLDS,
        ),
        # Fig. 28 (seed 002): 97% within a node.
        (
            "short_test_efficiency_node",
            "scaling",
            lambda df: set_where(df, "efficiency", 0.96, framework="tensorflow", gpus=2),
            mod.FAILS,
            mod.HOLDS,
        ),
        # Fig. 9: every speedup below batch 64 inside 2.5x-3.5x (the CPU's batch 1 and 32 fall short).
        (
            "int8_speedup_small_batches",
            "int8_throughput",
            lambda df: df.assign(int8_over_fp32=df.int8_over_fp32.clip(lower=2.6)),
            mod.FAILS,
            mod.HOLDS,
        ),
        # Table III: a top-1 loss of one point is beyond 0.18 + one image of 220.
        (
            "int8_accuracy_top1",
            "int8_accuracy",
            lambda df: set_where(df, "diff_top1", 1.0, model="resnet50"),
            mod.HOLDS,
            mod.FAILS,
        ),
        (
            "int8_accuracy_top5",
            "int8_accuracy",
            lambda df: set_where(df, "diff_top5", -0.9, model="resnet50"),
            mod.HOLDS,
            mod.FAILS,
        ),
    ],
)
def test_a_doctored_figure_flips_the_verdict(tables, finding, name, change, before, after):
    assert verdicts(tables).loc[finding, "verdict"] == before
    doctor(tables, name, change)
    assert verdicts(tables).loc[finding, "verdict"] == after


def _run(
    system="local", framework="pytorch", precision="fp32", gpus=8, nodes=2, device="8x Tesla V100-SXM2-16GB", **extra
):
    return {
        "system": system,
        "framework": framework,
        "precision": precision,
        "input": "cpu",
        "nodes": nodes,
        "gpus": gpus,
        "status": "ok",
        "device": device,
        **extra,
    }


@pytest.mark.parametrize("step_cv, verdict", [(0.10, mod.HOLDS), (0.01, mod.FAILS)])
def test_caffe2_stability_across_nodes(tables, step_cv, verdict):
    assert verdicts(tables).loc["caffe2_unstable_across_nodes", "verdict"] == mod.UNMEASURED
    doctor(tables, "training_throughput", lambda df: add_rows(df, _run(step_cv=step_cv)))
    assert verdicts(tables).loc["caffe2_unstable_across_nodes", "verdict"] == verdict


@pytest.mark.parametrize("fp16, verdict", [(18.0, mod.HOLDS), (12.0, mod.FAILS)])
def test_fp16_gain(tables, fp16, verdict):
    assert verdicts(tables).loc["fp16_gain", "verdict"] == mod.UNMEASURED
    doctor(
        tables,
        "fp16_vs_fp32",
        lambda df: add_rows(
            df,
            {
                "system": "local",
                "framework": "tensorflow",
                "input": "cpu",
                "gpus": 1,
                "fp32_images_per_s": 10.0,
                "fp16_images_per_s": fp16,
                "fp16_gain_percent": (fp16 / 10 - 1) * 100,
            },
        ),
    )
    assert verdicts(tables).loc["fp16_gain", "verdict"] == verdict


@pytest.mark.parametrize("sxm2, verdict", [(105.0, mod.HOLDS), (120.0, mod.FAILS)])
def test_sxm2_over_pcie_is_read_from_the_devices(tables, sxm2, verdict):
    """The faster system is the one whose device says SXM, whichever of the pair comes first."""
    doctor(
        tables,
        "training_throughput",
        lambda df: add_rows(
            df,
            _run("pcie", "tensorflow", gpus=1, nodes=1, device="1x Tesla V100-PCIE-16GB"),
            _run("sxm2", "tensorflow", gpus=1, nodes=1, device="1x Tesla V100-SXM2-16GB"),
        ),
    )
    doctor(
        tables,
        "system_comparison",
        lambda df: add_rows(
            df,
            {
                "system_a": "pcie",
                "system_b": "sxm2",
                "framework": "tensorflow",
                "precision": "fp32",
                "input": "cpu",
                "gpus": 1,
                "a_images_per_s": 100.0,
                "b_images_per_s": sxm2,
                "a_over_b_percent": (100 / sxm2 - 1) * 100,
            },
        ),
    )
    v = verdicts(tables)
    assert v.loc["sxm2_over_pcie_1gpu", "verdict"] == verdict
    assert v.loc["sxm2_over_pcie_1gpu", "measured_value"] == pytest.approx(sxm2 / 100)
    assert v.loc["sxm2_over_pcie_2nodes", "verdict"] == mod.UNMEASURED


@pytest.mark.parametrize("peak_2nodes, verdict", [(95.0, mod.HOLDS), (60.0, mod.FAILS)])
def test_disk_read_doubles(tables, peak_2nodes, verdict):
    """Aggregate peak read over the nodes: 1 node at 50 MB/s against 2 nodes at peak_2nodes each half."""
    doctor(
        tables,
        "training_throughput",
        lambda df: add_rows(df, _run(framework="mxnet", gpus=4, nodes=1), _run(framework="mxnet", gpus=8, nodes=2)),
    )
    row = {
        "system": "local",
        "framework": "mxnet",
        "precision": "fp32",
        "input": "cpu",
        "metric": "read_MBps",
        "device": "nfs:/data",
    }
    doctor(
        tables,
        "storage_throughput",
        lambda df: add_rows(
            df,
            {**row, "gpus": 4, "node": "n1", "peak_MBps": 50.0},
            {**row, "gpus": 8, "node": "n1", "peak_MBps": peak_2nodes / 2},
            {**row, "gpus": 8, "node": "n2", "peak_MBps": peak_2nodes / 2},
        ),
    )
    assert verdicts(tables).loc["disk_read_doubles", "verdict"] == verdict


@pytest.mark.parametrize("hours, verdict", [(7.0, mod.HOLDS), (9.0, mod.FAILS)])
def test_long_test_counts_only_on_ilsvrc2012(tables, hours, verdict):
    v = verdicts(tables).loc["long_test_time"]
    assert v.verdict == mod.UNMEASURED and "dataset.root" in v.why and "320 val images" in v.why
    doctor(tables, "time_to_accuracy", lambda df: df.assign(val_images=50000, time_to_target_s=hours * 3600))
    assert verdicts(tables).loc["long_test_time", "verdict"] == verdict


def test_int8_large_batches_measured_once_the_sweep_has_them(tables):
    v = verdicts(tables).loc["int8_speedup_large_batches"]
    assert v.verdict == mod.UNMEASURED and "inference.throughput.batch_sizes" in v.why
    doctor(
        tables,
        "int8_throughput",
        lambda df: add_rows(df, {**df.iloc[-1].to_dict(), "batch_size": 64, "int8_over_fp32": 3.6}),
    )
    assert verdicts(tables).loc["int8_speedup_large_batches", "verdict"] == mod.HOLDS


@pytest.mark.parametrize(
    "remove, finding, key",
    [
        # The only point above the baseline gone: the finding stays, naming the GPU counts.
        (lambda df: df[~((df.framework == "tensorflow") & (df.gpus == 2))], "tensorflow_scaling_fp32", "training.gpus"),
        # A framework the sweep did not run.
        (lambda df: df[df.framework != "mxnet"], "mxnet_scaling_fp32", "training.frameworks (add mxnet)"),
    ],
)
def test_a_missing_point_is_not_measured_naming_the_keys(tables, remove, finding, key):
    doctor(tables, "scaling", remove)
    doctor(tables, "training_throughput", remove)
    v = verdicts(tables)
    assert list(v.index) == [f["id"] for f in SPEC["findings"]]
    assert v.loc[finding, "verdict"] == mod.UNMEASURED and key in v.loc[finding, "why"]
    assert v.loc["tensorflow_scaling_fp16", "verdict"] == mod.UNMEASURED
    assert "training.precisions (add fp16)" in v.loc["tensorflow_scaling_fp16", "why"]


def test_a_missing_table_names_its_file(tables):
    (tables / "int8_throughput.csv").unlink()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "workflow_scripts.results.conclusions",
            "--tables",
            str(tables),
            "--out",
            str(tables / "conclusions.csv"),
        ],
        check=False,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 2 and "int8_throughput.csv" in proc.stderr


def test_the_rule_on_the_embedded_defaults_tables(tmp_path):
    """The rule alone (--allowed-rules: the tables it reads are the sample's, not re-made)."""
    write_config(tmp_path)
    shutil.copytree(SAMPLE, tmp_path / "results")
    snakemake(tmp_path, "results/conclusions.csv", "--allowed-rules", "conclusions")
    csv = pd.read_csv(tmp_path / "results" / "conclusions.csv")
    assert list(csv.id) == [f["id"] for f in SPEC["findings"]]
    assert csv.tolerance.notna().all() and csv.tolerance_kind.notna().all()
    md = (tmp_path / "results" / "conclusions.md").read_text()
    assert md.startswith("# The study's conclusions")
    for kind in set(csv.tolerance_kind):  # the tolerance once per kind of finding
        assert md.count(f"**Tolerance ({kind}).**") == 1
    assert md.count("\n| ") == len(csv) + 1  # header + one line per finding
    assert "2 CPU processes" in md and "not measured by this sweep" in md


def test_conclusions_lead_the_report_and_are_part_of_all(tmp_path):
    """Snakemake's report lists its categories sorted by name (localeCompare in the report's menu)."""
    rules = "\n".join(p.read_text() for p in sorted((REPO / "rules").glob("*.smk")))
    categories = set(re.findall(r'category="([^"]+)"', rules))
    assert min(categories, key=str.casefold) == "Conclusions", sorted(categories, key=str.casefold)
    assert re.search(
        r'report\(f"\{RESULTS\}/conclusions.csv", caption="\.\./report/conclusions.rst", '
        r'category="Conclusions"\)',
        rules,
    )
    write_config(tmp_path)
    out = snakemake(tmp_path, "all", "-n", "--quiet", "rules").stdout
    assert re.search(r"^conclusions\s+1$", out, re.MULTILINE), out
