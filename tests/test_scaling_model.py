"""The scaling prediction's model (workflow_scripts/predict): the all-reduce's cost, fitted back
exactly from an interconnect table made from a known ring; hierarchical, flat-ring and tree
all-reduces against the ring they reduce to; the overlap fitted and predicted back; leave-one-out
on synthetic runs; and the study on paper, reproduced from its yaml alone, every figure of which
names its source. Plain Python, no subprocess, no pipeline run. What the libraries do (NCCL's
tree, Horovod's fusion, DDP's buckets, the backward pass's bound, misses):
test_scaling_libraries.py."""

import csv
import math
import re
import sys

import pytest
import yaml

from workflow_scripts.interconnect.efficiency_bounds import bounds
from workflow_scripts.predict import brookhaven_busbw as bb
from workflow_scripts.predict import collective_model as cm
from workflow_scripts.predict import link_least_squares as lls
from workflow_scripts.predict import step_messages as msg
from workflow_scripts.predict import step_model as sm
from workflow_scripts.predict import study_on_paper as sop

pytestmark = pytest.mark.unit

REPO = sop.YAML.parents[2]
SIZES = [2**k for k in range(10, 31)]  # 1 KiB to 1 GiB, as the interconnect stage sweeps
RING = cm.Link(busbw_GBps=37.5, step_latency_s=7e-6)
NVLINK = cm.Link(busbw_GBps=150.0, step_latency_s=3e-6)
NETWORK = cm.Link(busbw_GBps=12.5, step_latency_s=10e-6)
BACKWARD = 2 / 3


def workload(t1, gradient_bytes, bucket=None, overlaps=True, batch=64):
    """A step_model.Workload whose gradients go out in messages of `bucket` bytes (None: one)."""
    return sm.Workload(t1, batch, msg.fixed(gradient_bytes, bucket, overlaps, "test"), BACKWARD)


def exact_ring(nbytes, n, link):
    """The ring's cost written out by hand, independent of the module."""
    return 2 * (n - 1) / n * nbytes / (link.busbw_GBps * 1e9) + 2 * (n - 1) * link.step_latency_s


def doctored_table(path, n, link, system="known"):
    """An interconnect table (results/interconnect.csv's columns) whose all-reduces follow a ring of
    n ranks on `link` exactly, with broadcasts and nccl-tests rows beside them to be ignored."""
    columns = ["system", "gpus", "nodes", "collective", "bytes", "source", "time_s", "median_s"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, columns)
        w.writeheader()
        for b in SIZES:
            t = exact_ring(b, n, link)
            for collective, source, time_s, median_s in (
                ("all_reduce", "torch.distributed", t, t),
                ("broadcast", "torch.distributed", 9, 9),
                ("all_reduce", "nccl-tests", 9, ""),
            ):
                w.writerow(dict(zip(columns, (system, n, 1, collective, b, source, time_s, median_s))))
    with open(path) as f:
        return list(csv.DictReader(f))


# ---------------------------------------------------------------------------------------------
# The collective


def test_a_doctored_table_gives_back_its_ring_and_the_exact_times(tmp_path):
    table = doctored_table(tmp_path / "interconnect.csv", 4, RING)
    points = lls.points_from_table(table, "known", 4)
    assert [b for b, _ in points] == SIZES
    fit = lls.fit_link(points, 4)
    assert fit.link.busbw_GBps == pytest.approx(RING.busbw_GBps, rel=1e-9)
    assert fit.link.step_latency_s == pytest.approx(RING.step_latency_s, rel=1e-6)
    assert fit.max_rel_error < 1e-9
    # the fitted link predicts the times of any size and count exactly
    system = cm.System(gpus_per_node=8, intra=fit.link)
    for n in (2, 4, 8):
        for b in (3_000_000, 102_228_128):
            assert system.allreduce_s(b, n) == pytest.approx(exact_ring(b, n, RING), rel=1e-9)
    # and the prediction's rows carry exactly those times, bucket by bucket
    buckets = [25 * 2**20] * 3 + [102_228_128 - 3 * 25 * 2**20]
    for row in sm.predict(system, workload(0.2, 102_228_128, 25 * 2**20), max_gpus=8):
        expected = sum(exact_ring(b, row["gpus"], RING) for b in buckets) if row["gpus"] > 1 else 0.0
        assert row["allreduce_s"] == pytest.approx(expected, rel=1e-9)
        assert row["efficiency_no_overlap"] == pytest.approx(0.2 / (0.2 + expected), rel=1e-12)


def test_fitting_needs_two_sizes_and_times_that_grow():
    with pytest.raises(cm.StageError, match="two message sizes"):
        lls.fit_link([(1024, 1e-5)], 2)
    with pytest.raises(cm.StageError, match="do not grow"):
        lls.fit_link([(1024, 2e-5), (2048, 1e-5)], 2)


def test_a_link_fitted_at_other_counts_predicts_the_one_left_out():
    points = [(n, b, exact_ring(b, n, RING)) for n in (2, 4, 8) for b in SIZES]
    errors = lls.leave_one_out_links(points)
    assert len(errors) == len(points)
    assert max(abs(e.rel_error) for e in errors) < 1e-9
    assert lls.leave_one_out_links([p for p in points if p[0] == 2]) == []


@pytest.mark.parametrize("g", [1, 2, 4, 8])
def test_hierarchical_on_one_node_is_the_ring(g):
    for b in (4096, 102_228_128):
        assert cm.hierarchical_allreduce_s(b, g, 1, RING, None) == pytest.approx(exact_ring(b, g, RING), rel=1e-12)
        assert cm.flat_ring_allreduce_s(b, g, 1, RING, None) == pytest.approx(exact_ring(b, g, RING), rel=1e-12)


def test_hierarchical_across_nodes_is_a_ring_within_and_one_across():
    b, g, m = 102_228_128, 4, 8
    expected = exact_ring(b, g, NVLINK) + exact_ring(b, m, NETWORK)
    assert cm.hierarchical_allreduce_s(b, g, m, NVLINK, NETWORK) == pytest.approx(expected, rel=1e-12)
    # one GPU per node (the tests' 2-node cluster): the network's ring alone
    assert cm.hierarchical_allreduce_s(b, 1, m, NVLINK, NETWORK) == pytest.approx(exact_ring(b, m, NETWORK), rel=1e-12)
    with pytest.raises(cm.StageError, match="no inter-node link"):
        cm.hierarchical_allreduce_s(b, g, m, NVLINK, None)


def test_horovods_hierarchical_all_reduce_costs_its_copies_to_host_memory_and_back():
    """Issue 61 item 7, Horovod 0.28.1's NCCLHierarchicalAllreduce::Execute: an NCCL reduce-scatter,
    each GPU's S/g copied to host memory, an MPI all-reduce of it across nodes, the copy back, an
    NCCL all-gather. With the copies' link given both copies are costed; without it the cost is that
    of the bytes the other phases move, and the rows say it is a lower bound. On one node Horovod runs
    no hierarchy, so no copy."""
    b, g, m = 102_228_128, 4, 8
    host = cm.Link(busbw_GBps=10.0, step_latency_s=5e-6)
    copies = 2 * (b / g / 10e9 + 5e-6)
    expected = exact_ring(b, g, NVLINK) + copies + exact_ring(b, m, NETWORK)
    assert cm.hierarchical_allreduce_s(b, g, m, NVLINK, NETWORK, "ring", host) == pytest.approx(expected, rel=1e-12)
    costed = cm.System(g, NVLINK, NETWORK, "hierarchical", host=host)
    bare = cm.System(g, NVLINK, NETWORK, "hierarchical")
    assert costed.allreduce_s(b, g * m) - bare.allreduce_s(b, g * m) == pytest.approx(copies, rel=1e-12)
    assert costed.allreduce_s(b, g) == bare.allreduce_s(b, g) == pytest.approx(exact_ring(b, g, NVLINK), rel=1e-12)
    assert "lower bound" in cm.uncosted(bare, m) and cm.uncosted(costed, m) == cm.uncosted(bare, 1) == ""
    assert cm.uncosted(cm.System(g, NVLINK, NETWORK, "nccl"), m) == ""
    said = " ".join(cm.hierarchical_notes(None))
    assert "only with MPI" in said and "Gloo controller" in said and "cannot run it" in said, said
    assert "lower bound" in said and "lower bound" not in " ".join(cm.hierarchical_notes(host))


def test_a_flat_ring_runs_at_its_slowest_link_and_pays_the_network_per_crossing():
    b, g, m = 102_228_128, 4, 8
    n = g * m
    bandwidth = 2 * (n - 1) / n * b / (NETWORK.busbw_GBps * 1e9)
    latency = (2 * (n - 1) - 2 * (m - 1)) * NVLINK.step_latency_s + 2 * (m - 1) * NETWORK.step_latency_s
    assert cm.flat_ring_allreduce_s(b, g, m, NVLINK, NETWORK) == pytest.approx(bandwidth + latency, rel=1e-12)


def test_tree_and_ring_differ_in_latency_only():
    for n in (2, 3, 8, 100, 1024):
        assert cm.ring_allreduce_s(0, n, 10.0, 1e-6) == pytest.approx(2 * (n - 1) * 1e-6)
        assert cm.tree_allreduce_s(0, n, 10.0, 1e-6) == pytest.approx(2 * math.ceil(math.log2(n)) * 1e-6)
        assert cm.tree_allreduce_s(2**30, n, 10.0, 0) == cm.ring_allreduce_s(2**30, n, 10.0, 0)
    assert cm.ring_allreduce_s(2**30, 1, 10.0, 1e-6) == cm.tree_allreduce_s(2**30, 1, 10.0, 1e-6) == 0.0
    # at 1,024 GPUs the ring pays 2,046 steps and the tree 20
    assert cm.ring_allreduce_s(0, 1024, 1, 1.0) / cm.tree_allreduce_s(0, 1024, 1, 1.0) == pytest.approx(2046 / 20)


def test_every_bucket_pays_its_latency():
    assert msg.chunks(100, 30) == [30, 30, 30, 10]
    assert msg.chunks(100, None) == msg.chunks(100, 100) == msg.chunks(100, 400) == [100]
    n, b = 8, 102_228_128
    one = exact_ring(b, n, RING)
    system = cm.System(8, RING)
    buckets = sm.allreduce_at(system, workload(0.1, b, 25 * 2**20), n)
    assert len(msg.chunks(b, 25 * 2**20)) == 4
    assert buckets - one == pytest.approx(3 * 2 * (n - 1) * RING.step_latency_s, rel=1e-9)


def test_the_inter_node_link_is_fitted_from_what_the_node_does_not_explain():
    g, m = 4, 4
    for topology in ("hierarchical", "ring"):
        truth = cm.System(g, NVLINK, NETWORK, topology)
        points = [(b, truth.allreduce_s(b, g * m)) for b in SIZES]
        fit = lls.fit_inter_link(points, g, m, NVLINK, topology)
        assert fit.link.busbw_GBps == pytest.approx(NETWORK.busbw_GBps, rel=1e-9), topology
        assert fit.link.step_latency_s == pytest.approx(NETWORK.step_latency_s, rel=1e-6), topology
        assert fit.max_rel_error < 1e-9


def test_one_gpu_per_node_is_the_network_alone():
    """The tests' 2-node SLURM cluster: one rank per node, no link within a node to know."""
    points = [(b, exact_ring(b, 2, NETWORK)) for b in SIZES]
    for topology in ("hierarchical", "ring"):
        fit = lls.fit_inter_link(points, 1, 2, None, topology)
        assert fit.link.busbw_GBps == pytest.approx(NETWORK.busbw_GBps, rel=1e-9)
        system = cm.System(1, None, fit.link, topology)
        assert system.allreduce_s(10**8, 16) == pytest.approx(exact_ring(10**8, 16, NETWORK), rel=1e-9)
    with pytest.raises(cm.StageError, match="no intra-node link"):
        cm.System(4, None, NETWORK).allreduce_s(10**8, 8)


def test_a_system_without_a_network_predicts_within_its_node_only():
    system = cm.System(gpus_per_node=4, intra={2: RING, 4: NVLINK})
    assert system.intra_link(2) == RING and system.intra_link(4) == NVLINK and system.intra_link(3) == NVLINK
    rows = {r["gpus"]: r for r in sm.predict(system, workload(0.1, 10**8, batch=32), max_gpus=16)}
    assert rows[4]["allreduce_s"] == pytest.approx(exact_ring(10**8, 4, NVLINK))
    assert rows[8]["allreduce_s"] is None and rows[8]["efficiency_no_overlap"] is None
    assert "no link between nodes" in rows[8]["note"]
    assert system.layout(8) == (4, 2) and system.layout(6) == (3, 2) and system.layout(10) == (10 / 3, 3)


# ---------------------------------------------------------------------------------------------
# Overlap


@pytest.mark.parametrize("t1,c", [(0.2, 0.05), (0.05, 0.2), (0.1, 0.1)])
def test_the_no_overlap_bound_is_the_stage_one_and_nothing_to_hide_is_a_point(t1, c):
    """scaling.csv's no-overlap bound is the model's; with nothing to hide the interval is that
    figure alone, and with all of c hideable the model's full overlap is t1 / (t1 + c - c)."""
    assert sm.bounds(t1, c, 0.0) == pytest.approx((bounds(t1, c)[0],) * 2, rel=1e-15)
    assert sm.bounds(t1, c, c)[1] == pytest.approx(1.0, rel=1e-15)


@pytest.mark.parametrize("t1,c,h", [(0.2, 0.05, 0.04), (0.05, 0.2, 0.03)])
@pytest.mark.parametrize("f", [0.0, 0.3, 0.7, 1.0])
def test_the_overlap_fit_round_trips(t1, c, h, f):
    fit = sm.fit_overlap_points(t1, [(c, h, sm.efficiency(t1, c, f, h))])
    assert fit.fraction == pytest.approx(f, abs=1e-12) and fit.position == sm.WITHIN


def test_a_measurement_outside_the_bounds_is_clipped_and_said():
    t1, c, h = 0.2, 0.05, 0.03
    no, full = sm.bounds(t1, c, h)
    below = sm.fit_overlap_points(t1, [(c, h, no * 0.9)])
    assert below.fraction == 0.0 and below.unclipped < 0 and below.position == sm.BELOW
    above = sm.fit_overlap_points(t1, [(c, h, min(1.0, full) * 1.01)])
    assert above.fraction == 1.0 and above.unclipped > 1 and above.position == sm.ABOVE
    assert sm.fit_overlap_points(t1, [(0.0, 0.0, 1.0)]).fraction is None
    assert sm.fit_overlap_points(t1, [(c, 0.0, no)]).position == sm.NOTHING  # nothing could hide


def test_one_overlap_fits_several_counts():
    t1 = 0.15
    points = [(c, c / 2, sm.efficiency(t1, c, 0.4, c / 2)) for c in (0.01, 0.05, 0.3)]
    assert sm.fit_overlap_points(t1, points).fraction == pytest.approx(0.4, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# Predictions and their own errors


def synthetic_runs(t1, f, allreduces, noise=()):
    """Runs whose all-reduce c hides for a share f of half of it (the other half: what cannot hide)."""
    noise = list(noise) + [0.0] * len(allreduces)
    return [
        sm.MeasuredPoint(n, c, c / 2, sm.efficiency(t1, c, f, c / 2) * (1 + e))
        for (n, c), e in zip(allreduces.items(), noise)
    ]


def test_leave_one_out_predicts_each_point_from_the_others():
    t1 = 0.2
    allreduces = {2: 0.01, 4: 0.03, 8: 0.08, 16: 0.12}
    exact = sm.leave_one_out(t1, synthetic_runs(t1, 0.4, allreduces))
    assert [r["gpus"] for r in exact] == [2, 4, 8, 16]
    assert all(abs(r["rel_error"]) < 1e-12 and r["overlap_fraction"] == pytest.approx(0.4) for r in exact)
    assert all(r["within_interval"] and r["miss"] is None for r in exact)
    assert sm.judge([r["rel_error"] for r in exact], 0.05)[0] == "within tolerance"
    noisy = sm.leave_one_out(t1, synthetic_runs(t1, 0.4, allreduces, noise=[0.0, 0.0, -0.02, 0.0]))
    errors = {r["gpus"]: r["rel_error"] for r in noisy}
    assert errors[8] > 0.02  # the slow point is predicted from the others, which do not know it
    label, sentence = sm.judge(errors.values(), 0.01)
    assert label == "poor" and "bounds, not forecasts" in sentence


def test_leave_one_out_with_one_point_has_its_interval_only():
    (row,) = sm.leave_one_out(0.2, [sm.MeasuredPoint(1, 0.0, 0.0, 1.0), sm.MeasuredPoint(2, 0.05, 0.03, 0.85)])
    assert row["predicted_efficiency"] is None and row["rel_error"] is None and "interval only" in row["note"]
    assert row["within_interval"] and row["efficiency_no_overlap"] < 0.85 < row["efficiency_full_overlap"]
    assert sm.judge([row["rel_error"]], 0.1)[0] == "untested"


def test_a_measured_point_is_within_its_interval_or_the_row_says_not():
    system = cm.System(gpus_per_node=2, intra=RING, inter=NETWORK)
    w = workload(0.1, 10**8, 10**7, batch=32)
    (c2, h2), (c6, h6) = (
        (c, sm.hideable_at(system, w, n, c)) for n, c in ((n, sm.allreduce_at(system, w, n)) for n in (2, 6))
    )
    ideal = w.one_gpu_images_per_s
    measured = {2: 2 * ideal * sm.efficiency(0.1, c2, 0.5, h2), 6: 6 * ideal * sm.efficiency(0.1, c6, 0.0, h6) * 0.8}
    rows = {r["gpus"]: r for r in sm.predict(system, w, max_gpus=64, measured=measured)}
    assert sorted(rows) == [1, 2, 4, 6, 8, 16, 32, 64]  # powers of two and the measured count
    inside, outside = rows[2], rows[6]
    assert inside["measured_within_interval"] and inside["measured_position"].startswith("closer to")
    assert inside["efficiency_no_overlap"] <= inside["measured_efficiency"] <= inside["efficiency_full_overlap"]
    assert not outside["measured_within_interval"] and outside["measured_position"] == "below no overlap"
    assert "something else" in outside["note"]
    # the overlap fitted over both points lies between, and every row carries the interval
    assert 0 <= rows[64]["overlap_fraction"] <= 0.5
    for r in rows.values():
        assert r["efficiency_no_overlap"] <= r["efficiency_fitted"] <= r["efficiency_full_overlap"]
        assert r["images_per_s_full_overlap"] == pytest.approx(r["gpus"] * ideal * r["efficiency_full_overlap"])


# ---------------------------------------------------------------------------------------------
# The study on paper


def pick(table, **match):
    """The rows of a table whose columns have the values given (compared as text)."""
    return [r for r in table if all(str(r[k]) == str(v) for k, v in match.items())]


def short_names():
    """The source documents' short names as docs/glossary.md defines them, as a sentence writes
    them: 'the Brookhaven paper'."""
    text = (REPO / "docs" / "glossary.md").read_text()
    section = text.split("\n## The source documents\n", 1)[1].split("\n## ", 1)[0]
    return {m[0].lower() + m[1:] for m in re.findall(r"^### (.+)$", section, re.M)}


def figures(node, path=""):
    """(path, mapping) of every figure of the yaml: a mapping with a value."""
    if isinstance(node, dict):
        if "value" in node:
            yield path, node
        for k, v in node.items():
            yield from figures(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from figures(v, f"{path}[{i}]")


def refs(node):
    if isinstance(node, dict):
        if "ref" in node:
            yield node
        for v in node.values():
            yield from refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from refs(v)


def test_every_figure_of_the_study_on_paper_names_its_source():
    doc = sop.load()
    names = short_names()
    found = list(figures(doc))
    assert len(found) > 40
    for path, f in found:
        if "assumption" in f:
            assert f.get("source") and "seed" not in f, f"{path}: an assumption needs its public source"
        else:
            assert f.get("seed") in names, f"{path}: seed {f.get('seed')!r} is not one of {sorted(names)}"
            assert {"figure", "table", "section"} & set(f), f"{path}: no figure, table or section"
        if f["value"] is None:
            assert f.get("note") or f.get("assumption"), f"{path}: a figure without a value says why"
    for r in refs(doc):
        assert "value" in sop.resolve(doc, r), r["ref"]


def test_the_study_on_paper_has_the_32_gpu_speedups_of_the_results_yaml():
    published = yaml.safe_load((REPO / "workflow_scripts" / "results" / "study_v100_figures.yaml").read_text())
    ours = {
        (w["framework"], w["precision"], p["gpus"]): p["value"]
        for w in sop.load()["setups"]["study_fig2"]["workloads"]
        for p in w["speedup"]
        if p["value"] is not None
    }
    assert ours == {(s["framework"], s["precision"], s["gpus"]): s["speedup"] for s in published["speedup"]}


def test_the_study_on_paper_is_reproduced_from_the_yaml_alone(tmp_path, monkeypatch):
    out_csv, out_md = tmp_path / "study.csv", tmp_path / "study.md"
    monkeypatch.setattr(sys, "argv", ["study_on_paper", "--out-csv", str(out_csv), "--out-md", str(out_md)])
    sop.main()
    with open(out_csv) as f:
        table = list(csv.DictReader(f))
    doc = sop.load()
    fig2 = doc["setups"]["study_fig2"]
    for w in fig2["workloads"]:
        for system in fig2["systems"]:
            mine = pick(table, setup="study_fig2", system=system, framework=w["framework"], precision=w["precision"])
            assert [int(r["gpus"]) for r in mine] == [2, 4, 8, 16, 32]
            assert all(float(r["allreduce_s"]) > 0 for r in mine)
            for p in w["speedup"]:
                (row,) = [r for r in mine if int(r["gpus"]) == p["gpus"]]
                assert row["measured_from"].startswith("the study, ")
                if p["value"] is not None:
                    assert float(row["measured_speedup"]) == pytest.approx(p["value"])
                    assert float(row["breakeven_one_gpu_images_per_s"]) > 0
    # one row by hand: TensorFlow FP32, 32 GPUs, PCIe behind a switch: a flat ring of 32 GPUs on
    # 8 nodes at the network's 12.5 GB/s, in Horovod's 64 MB buffers
    (row,) = pick(table, system="c4140_v100_pcie_switch", framework="tensorflow", precision="fp32", gpus=32)
    b = 25_557_032 * 4
    n, m = 32, 8
    expected = 0.0
    for size in (2**26, b - 2**26):
        expected += 2 * (n - 1) / n * size / 12.5e9 + (2 * (n - 1) - 2 * (m - 1)) * 5.7e-6 + 2 * (m - 1) * 9.6e-6
    assert float(row["allreduce_s"]) == pytest.approx(expected, rel=1e-12)
    eff = 21.95 / 32
    assert float(row["breakeven_one_gpu_images_per_s"]) == pytest.approx(128 * (1 - eff) / (expected * eff), rel=1e-12)
    # the scale-out whitepaper's points carry the model's interval and where they lie in it
    scaleout = {r["gpus"]: r for r in table if r["setup"] == "scaleout_c4140k"}
    assert sorted(scaleout, key=int) == ["2", "4", "8"]
    assert float(scaleout["8"]["measured_efficiency"]) == pytest.approx(4500 / (8 * 626))
    assert scaleout["8"]["measured_position"] and float(scaleout["8"]["communication_share"]) > 0
    text = out_md.read_text()
    for heading in ("## At the measured points", "## What communication explains", "## The Brookhaven paper's"):
        assert heading in text
    assert "python -m workflow_scripts.predict.study_on_paper" in text


def test_a_one_gpu_figure_of_your_own_is_used_and_marked():
    doc = sop.load()
    table = sop.rows(doc, sop.parse_overrides(["tensorflow:fp32=400"]))
    (row,) = pick(table, system="c4140_v100_pcie", framework="tensorflow", precision="fp32", gpus=32)
    assert row["one_gpu_images_per_s"] == 400 and "yours" in row["one_gpu_from"]
    t1 = 128 / 400
    assert row["efficiency_no_overlap"] == pytest.approx(t1 / (t1 + row["allreduce_s"]))
    assert row["communication_share"] == pytest.approx((1 - row["efficiency_no_overlap"]) / (1 - 21.95 / 32))
    with pytest.raises(sop.StageError, match="FRAMEWORK:PRECISION"):
        sop.parse_overrides(["tensorflow=400"])


def test_the_brookhaven_rows_set_measured_against_stated():
    rows = {(r["system"], r["gpus"]): r for r in bb.brookhaven_rows(sop.load())}
    dgx2 = rows[("DGX-2", 16)]
    assert dgx2["measured_over_nominal"] == pytest.approx(120 / 150)
    assert dgx2["model_busbw_ring_GBps"] == pytest.approx(150)
    p3 = rows[("AWS P3 (DGX-1V)", 16)]
    # across nodes a flat ring runs at the network's speed; a hierarchical all-reduce moves less
    # over it, so its bus bandwidth exceeds the network's by 2(n-1)/n over 2(m-1)/m
    assert p3["model_busbw_ring_GBps"] == pytest.approx(1.25)
    assert p3["model_busbw_hierarchical_GBps"] == pytest.approx(1.25 * (2 * 15 / 16) / (2 * 1 / 2))
    assert rows[("AWS P3 (DGX-1V)", 4)]["model_busbw_ring_GBps"] is None


@pytest.mark.parametrize("t1,c", [(0.2, 0.05), (0.05, 0.2), (0.1, 0.1)])
def test_scaling_csvs_full_overlap_is_bounded_by_the_backward_pass(t1, c):
    """Issue 52 item 12: scaling.csv's full overlap hides at most the backward pass (2/3 of t1 by
    default), never the forward pass: t1 / max(t1, c) overstated it wherever c > 2/3 t1."""
    no, full = bounds(t1, c)
    assert full == pytest.approx(t1 / (t1 + c - min(2 / 3 * t1, c)), rel=1e-3)
    assert no <= full <= 1.0
    if c > t1:
        assert full < t1 / max(t1, c)
