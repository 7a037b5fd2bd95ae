"""Which transport NCCL used (issue 39, part 3): NCCL falls back to TCP sockets between nodes when it
cannot load libibverbs and says so only at INFO level. The launcher has every rank write NCCL's
initialisation lines to a folder, cluster/nccl_log.py reads them back, preflight fails on sockets
between nodes that have InfiniBand, the interconnect stage records what NCCL used, and a prediction
says when its all-reduce was measured with another collective library than the run used.

The logs below are written here in the formats of NCCL's own sources (src/init.cc, src/transport/
{p2p,shm,net}.cc, src/transport/net_ib, src/misc/ibvsymbols.cc, src/graph/search.cc, src/debug.cc's
"host:pid:tid [dev] NCCL INFO" prefix) of the releases each case names."""

import json
import os
import shlex
import subprocess

import pytest
from helpers import REPO, interpreter, snakemake, write_config

from workflow_scripts.cluster import nccl_log, provenance
from workflow_scripts.interconnect import bandwidth_rows as ic_rows
from workflow_scripts.interconnect.efficiency_bounds import library_note
from workflow_scripts.preflight import gate, node, preflight_job
from workflow_scripts.preflight.check_rows import FAILED, NA, OK


def info(host, pid, dev, *messages):
    return "".join(f"{host}:{pid}:{pid} [{dev}] NCCL INFO {m}\n" for m in messages)


# 2 nodes x 2 GPUs over InfiniBand with GPUDirect RDMA, NCCL 2.21.5 (its NET/IB line: "Using%s %s;
# OOB %s:%s"; NET channels "[send] via NET/%s/%d%s").
def ib_logs(folder):
    for host, ranks, addr in (("gpu01", (0, 1), "10.2.0.5"), ("gpu02", (2, 3), "10.2.0.6")):
        for local, rank in enumerate(ranks):
            peer = ranks[1 - local]
            remote = (rank + 2) % 4
            (folder / f"nccl.{host}.{4100 + rank}.log").write_text(
                info(
                    host,
                    4100 + rank,
                    local,
                    f"Bootstrap : Using ib0:{addr}<0>",
                    "NCCL version 2.21.5+cuda12.4",
                    "NET/Plugin: No plugin found (libnccl-net.so)",
                    f"NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB ib0:{addr}<0>",
                    "Using non-device net plugin version 0",
                    "Using network IB",
                    f"comm 0x55d0c0 rank {rank} nRanks 4 nNodes 2 localRanks 2 localRank {local} MNNVL 0",
                    "Pattern 4, crossNic 0, nChannels 2, bw 40.000000/20.000000, type NVL/PIX, sameChannels 1",
                    f"Channel 00/0 : {rank}[{local}] -> {peer}[{1 - local}] via P2P/CUMEM/read",
                    f"Channel 01/0 : {rank}[{local}] -> {peer}[{1 - local}] via P2P/CUMEM/read",
                    f"Channel 00/0 : {remote}[{local}] -> {rank}[{local}] [receive] via NET/IB/{local}/GDRDMA",
                    f"Channel 00/0 : {rank}[{local}] -> {remote}[{local}] [send] via NET/IB/{local}/GDRDMA",
                )
            )


# 2 nodes x 1 GPU where libibverbs is missing, NCCL 2.21.5 (ibvsymbols.cc: "Failed to open
# libibverbs.so[.1]", then NET/Socket's "Using%s" with " [%d]%s:%s").
FAILED_IBVERBS = "Failed to open libibverbs.so[.1]"


def socket_logs(folder, ibverbs_line=FAILED_IBVERBS, version="2.21.5+cuda12.4", extra=()):
    for rank, (host, addr) in enumerate((("gpu01", "10.1.0.5"), ("gpu02", "10.1.0.6"))):
        other = 1 - rank
        (folder / f"nccl.{host}.{5100 + rank}.log").write_text(
            info(
                host,
                5100 + rank,
                0,
                *extra,
                f"Bootstrap : Using eth0:{addr}<0>",
                f"NCCL version {version}",
                ibverbs_line,
                f"NET/Socket : Using [0]eth0:{addr}<0>",
                "Using network Socket",
                f"comm 0x55e0a0 rank {rank} nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
                "Pattern 4, crossNic 0, nChannels 2, bw 1.200000/1.200000, type LOC/PHB, sameChannels 1",
                f"Channel 00/0 : {other}[0] -> {rank}[0] [receive] via NET/Socket/0",
                f"Channel 00/0 : {rank}[0] -> {other}[0] [send] via NET/Socket/0",
            )
        )


# One node, 2 GPUs over NVLink, NCCL 2.28.9: P2P through cuMem, the IB plugin failing on a host
# without HCAs (plugin/net.cc's "Failed to initialize NET plugin %s"), and a WARN line with the
# timestamp that release may put before the host.
def nvlink_logs(folder):
    for rank in (0, 1):
        (folder / f"nccl.dgx1.{600 + rank}.log").write_text(
            f"[2025-06-01 10:00:00] dgx1:{600 + rank}:{600 + rank} [{rank}] misc/cudawrap.cc:1 NCCL WARN cuDriver\n"
            + info(
                "dgx1",
                600 + rank,
                rank,
                "NCCL version 2.28.9+cuda13.0",
                "NET/IB : No device found.",
                "Failed to initialize NET plugin IB",
                "NET/Socket : Using [0]eth0:192.0.2.2<0>",
                "Using network Socket",
                "NCCL_NVLS_ENABLE set by environment to 0.",
                "Pattern 4, crossNic 0, nChannels 12, bw 30.000000/30.000000, type NVL/PIX, sameChannels 1",
                f"comm 0x4505dfb0 rank {rank} nRanks 2 nNodes 1 localRanks 2 localRank {rank} MNNVL 0",
                *(f"Channel {c:02d}/0 : {rank}[{rank}] -> {1 - rank}[{1 - rank}] via P2P/CUMEM" for c in range(4)),
            )
        )


# One node, 2 GPUs through host memory, NCCL 2.18.3: its communicator line says "nranks" and has no
# nNodes, SHM's channel has no connection index ("Channel %02d : ... via SHM/%s/%s").
def shm_logs(folder):
    for rank in (0, 1):
        (folder / f"nccl.pcie1.{700 + rank}.log").write_text(
            info(
                "pcie1",
                700 + rank,
                rank,
                "NCCL version 2.18.3+cuda12.2",
                "NCCL_P2P_DISABLE set by environment to 1.",
                f"comm 0x1b2c rank {rank} nranks 2 cudaDev {rank} nvmlDev {rank} busId 1b000 commId 0x9a - Init START",
                "Pattern 4, crossNic 0, nChannels 2, bw 10.000000/10.000000, type SYS/PIX, sameChannels 1",
                f"Channel 00 : {rank}[{rank}] -> {1 - rank}[{1 - rank}] via SHM/direct/direct",
                f"Channel 01 : {rank}[{rank}] -> {1 - rank}[{1 - rank}] via SHM/direct/direct",
            )
        )


def case(tmp_path, write, name="logs"):
    folder = tmp_path / name
    folder.mkdir()
    write(folder)
    return folder


def fake_infiniband(root, ports):
    """A /sys/class/infiniband tree: {device: {port: (state, link_layer)}}."""
    for dev, by_port in ports.items():
        for port, (state, layer) in by_port.items():
            d = root / dev / "ports" / str(port)
            d.mkdir(parents=True)
            (d / "state").write_text(state + "\n")
            (d / "link_layer").write_text(layer + "\n")
    return root


HCA = {"mlx5_0": {1: ("4: ACTIVE", "InfiniBand")}, "mlx5_1": {1: ("1: DOWN", "InfiniBand")}}


@pytest.mark.unit
def test_infiniband_with_gpudirect_rdma_is_read_and_is_no_problem(tmp_path):
    parsed = nccl_log.read_logs(case(tmp_path, ib_logs))
    assert parsed["versions"] == ["2.21.5+cuda12.4"] and parsed["files"] == 4
    assert (parsed["ranks"], parsed["nodes"], parsed["hosts"]) == (4, 2, ["gpu01", "gpu02"])
    assert parsed["within_node"] == {"P2P/CUMEM/read": 8}
    assert parsed["between_nodes"] == {"NET/IB": 8} and parsed["gdrdma"] is True
    assert parsed["link_types"] == {"intra": ["NVL"], "inter": ["PIX"]}
    assert parsed["network"] == ["IB"] and parsed["devices"] == {"IB": ["mlx5_0:1/IB", "mlx5_1:1/IB"]}
    assert parsed["oob"] == ["ib0:10.2.0.5<0>", "ib0:10.2.0.6<0>"]
    assert parsed["ibverbs_failed"] is None
    assert any(e.endswith("via NET/IB/0/GDRDMA") for e in parsed["evidence"])
    assert nccl_log.describe(parsed) == "NCCL 2.21.5: P2P/CUMEM/read (NVL) within a node; NET/IB GDRDMA between nodes"
    ports = provenance.infiniband_ports(fake_infiniband(tmp_path / "ib", HCA))
    assert nccl_log.transport_problem(parsed, 2, ports, {}) is None


@pytest.mark.unit
def test_sockets_after_a_failed_libibverbs_between_infiniband_nodes_are_named(tmp_path):
    parsed = nccl_log.read_logs(case(tmp_path, socket_logs))
    assert parsed["between_nodes"] == {"NET/Socket": 4} and parsed["within_node"] == {}
    assert parsed["gdrdma"] is False and parsed["network"] == ["Socket"]
    assert parsed["devices"] == {"Socket": ["eth0:10.1.0.5<0>", "eth0:10.1.0.6<0>"]}
    assert parsed["ibverbs_failed"] == f"gpu01:5100:5100 [0] NCCL INFO {FAILED_IBVERBS}"
    assert parsed["ibverbs_failed"] in parsed["evidence"]
    assert nccl_log.describe(parsed) == "NCCL 2.21.5: NET/Socket between nodes (libibverbs could not be loaded)"
    ports = provenance.infiniband_ports(fake_infiniband(tmp_path / "ib", HCA))
    problem = nccl_log.transport_problem(parsed, 2, ports, {})
    assert "TCP sockets (NET/Socket) between 2 nodes" in problem and "mlx5_0 port 1 (InfiniBand)" in problem
    assert "mlx5_1" not in problem  # its port is down: not a path NCCL could have taken
    assert "libibverbs could not be loaded" in problem and FAILED_IBVERBS in problem
    # Chosen, not fallen into: NCCL_IB_DISABLE=1 in the ranks' environment, said in the cell
    chosen = {"NCCL_IB_DISABLE": "1"}
    assert nccl_log.transport_problem(parsed, 2, ports, chosen) is None
    assert "InfiniBand off by choice: NCCL_IB_DISABLE=1" in nccl_log.describe(parsed, chosen)
    # Nothing else to use, or one node: sockets are no fallback
    assert nccl_log.transport_problem(parsed, 2, [], {}) is None
    down = provenance.infiniband_ports(fake_infiniband(tmp_path / "down", {"mlx5_0": {1: ("1: DOWN", "InfiniBand")}}))
    assert nccl_log.transport_problem(parsed, 2, down, {}) is None
    assert nccl_log.transport_problem(parsed, 1, ports, {}) is None


@pytest.mark.unit
def test_newer_and_older_release_wording_and_nccls_own_ib_disable_line(tmp_path):
    # 2.30's ibvsymbols.cc logs each library it could not open ("Count not open %s")
    parsed = nccl_log.read_logs(
        case(tmp_path, lambda f: socket_logs(f, "Count not open libibverbs.so", "2.30.3+cuda13.0"), "new")
    )
    assert parsed["ibverbs_failed"].endswith("Count not open libibverbs.so")
    assert nccl_log.describe(parsed).startswith("NCCL 2.30.3: NET/Socket between nodes")
    # NCCL_IB_DISABLE from /etc/nccl.conf reaches NCCL but not our environment: NCCL's ENV line says so
    parsed = nccl_log.read_logs(
        case(
            tmp_path,
            lambda f: socket_logs(
                f, "NET/Plugin: No plugin found (libnccl-net.so)", extra=["NCCL_IB_DISABLE set by environment to 1."]
            ),
            "conf",
        )
    )
    assert parsed["ib_disable"] == "1" and parsed["ibverbs_failed"] is None
    ports = provenance.infiniband_ports(fake_infiniband(tmp_path / "ib", HCA))
    assert nccl_log.transport_problem(parsed, 2, ports, {}) is None
    assert "NCCL_IB_DISABLE=1" in nccl_log.describe(parsed)


@pytest.mark.unit
def test_nvlink_within_a_node(tmp_path):
    parsed = nccl_log.read_logs(case(tmp_path, nvlink_logs))
    assert parsed["within_node"] == {"P2P/CUMEM": 8} and parsed["between_nodes"] == {}
    assert (parsed["nodes"], parsed["nccl_nodes"], parsed["ranks"]) == (1, 1, 2)
    assert parsed["net_failed"] == ["IB"] and parsed["ib_no_device"].endswith("NET/IB : No device found.")
    assert parsed["lines"] == 2 * 12  # the WARN line is not an INFO line
    assert nccl_log.describe(parsed) == "NCCL 2.28.9: P2P/CUMEM (NVL) within a node"
    assert nccl_log.transport_problem(parsed, 1, [{"name": "mlx5_0", "port": 1, "state": "4: ACTIVE"}], {}) is None


@pytest.mark.unit
def test_shared_memory_within_a_node_in_an_older_release(tmp_path):
    parsed = nccl_log.read_logs(case(tmp_path, shm_logs))
    assert parsed["within_node"] == {"SHM/direct/direct": 4}
    assert (parsed["ranks"], parsed["nodes"], parsed["nccl_nodes"]) == (2, 1, None)
    assert nccl_log.describe(parsed) == "NCCL 2.18.3: SHM/direct/direct (SYS) within a node"


@pytest.mark.unit
def test_nothing_recorded(tmp_path):
    assert nccl_log.read_logs(tmp_path) is None and nccl_log.read_logs(tmp_path / "absent") is None
    assert nccl_log.describe(None).startswith("not recorded")
    (tmp_path / "nccl.h.1.log").write_text("h:1:1 [0] some/file.cc:1 NCCL WARN only a warning\n")
    parsed = nccl_log.read_logs(tmp_path)
    assert parsed["lines"] == 0 and "no transport lines" in nccl_log.describe(parsed)


@pytest.mark.unit
def test_node_facts_list_the_infiniband_ports(tmp_path):
    root = fake_infiniband(tmp_path / "ib", {**HCA, "rocep1s0": {1: ("4: ACTIVE", "Ethernet")}})
    assert provenance.infiniband_ports(root) == [
        {"name": "mlx5_0", "port": 1, "state": "4: ACTIVE", "link_layer": "InfiniBand"},
        {"name": "mlx5_1", "port": 1, "state": "1: DOWN", "link_layer": "InfiniBand"},
        {"name": "rocep1s0", "port": 1, "state": "4: ACTIVE", "link_layer": "Ethernet"},
    ]
    assert provenance.infiniband_ports(tmp_path / "none") == []


@pytest.mark.stage
def test_this_nodes_facts_carry_its_infiniband_ports(tmp_path):
    """node_facts reads this machine (its CPU, memory, GPUs), the ports from the tree it is given."""
    root = fake_infiniband(tmp_path / "ib", HCA)
    assert provenance.node_facts(infiniband_root=root)["infiniband"] == provenance.infiniband_ports(root)


@pytest.mark.unit
def test_preflight_fails_on_sockets_between_infiniband_nodes_unless_chosen(tmp_path):
    """The check's work folder as a 2-node job leaves it: both ranks' NCCL logs, each node's
    InfiniBand ports (node.py's file, from a fake sysfs tree); the row, and the gate's line."""
    work = case(tmp_path, socket_logs, "2gpu.d")
    for host in ("gpu01", "gpu02"):
        node.write_infiniband(work, host, root=fake_infiniband(tmp_path / host, HCA))
    failed = preflight_job.nccl_transport_row(work, nodes=2, tasks=2, gpu=True, env={})
    assert failed["status"] == FAILED and failed["check"] == "nccl_transport"
    assert "gpu01:mlx5_0 port 1" in failed["cause"] and FAILED_IBVERBS in failed["cause"]
    assert "rdma-core" in failed["fix"] and 'NCCL_IB_DISABLE: "1" in config nccl_env' in failed["fix"]
    result = tmp_path / "2gpu.json"
    result.write_text(
        json.dumps({"system": "ib", "framework": "pytorch", "nodes": 2, "tasks": 2, "log": "x.log", "rows": [failed]})
    )
    line = gate.first_failure([result])
    assert "check nccl_transport" in line and "libibverbs could not be loaded" in line and "rdma-core" in line
    chosen = preflight_job.nccl_transport_row(work, nodes=2, tasks=2, gpu=True, env={"NCCL_IB_DISABLE": "1"})
    assert chosen["status"] == OK and "NCCL_IB_DISABLE=1" in chosen["figure"]
    # not applicable: a CPU system, one task
    assert preflight_job.nccl_transport_row(work, 2, 2, False, {})["status"] == NA
    assert preflight_job.nccl_transport_row(work, 1, 1, True, {})["status"] == NA
    # no log where one was asked for (a site's NCCL_DEBUG=WARN is raised, so its files should be
    # there): a warning, never "not applicable", and one naming where the log went where it went elsewhere
    quiet = preflight_job.nccl_transport_row(tmp_path / "empty", 2, 2, True, {"NCCL_DEBUG": "WARN"})
    assert quiet["status"] == "warning" and "no NCCL debug file" in quiet["cause"]
    away = preflight_job.nccl_transport_row(tmp_path / "empty", 2, 2, True, {"NCCL_DEBUG_FILE": "/x/nccl.log"})
    assert away["status"] == "warning" and "NCCL_DEBUG_FILE=/x/nccl.log" in away["cause"]


def run_launcher(tmp_path, *options, env=None):
    """The real launcher, 2 local ranks of a tiny command that writes its environment and what
    comm_env records of it."""
    dump = (
        "import json, os, sys; from workflow_scripts.cluster import comm_env; "
        "open(os.path.join(sys.argv[1], 'rank' + os.environ['RANK'] + '.json'), 'w')"
        ".write(json.dumps({'env': dict(os.environ), 'recorded': comm_env.recorded()}))"
    )
    out = tmp_path / "ranks"
    out.mkdir(exist_ok=True)
    py = interpreter("workflow")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    proc = subprocess.run(
        [
            py,
            "-m",
            "workflow_scripts.cluster.launcher",
            "--nproc-per-node",
            "2",
            *options,
            "--",
            py,
            "-c",
            dump,
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, "PYTHONPATH": str(REPO), **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.stage
def test_the_launcher_gives_every_rank_the_nccl_log_variables_without_overriding_the_users(tmp_path):
    logs = tmp_path / "run dir %x"
    logs.mkdir()
    (logs / "nccl.old.1.log").write_text(info("old", 1, 0, "Using network IB"))  # an earlier run's
    _, ranks = run_launcher(tmp_path, f"--nccl-log-dir={logs}")
    expected = {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,ENV,GRAPH",
        "NCCL_DEBUG_FILE": str(logs.resolve()).replace("%", "%%") + "/nccl.%h.%p.log",
    }
    for r in ranks:
        assert {k: r["env"].get(k) for k in expected} == expected
        assert {k: r["recorded"].get(k) for k in expected} == expected  # what the summary records
    assert not list(logs.glob("nccl.*.log"))
    # The user's own settings win, config nccl_env (--env) included
    _, ranks = run_launcher(
        tmp_path, f"--nccl-log-dir={logs}", "--env=NCCL_DEBUG_SUBSYS=INIT,NET", env={"NCCL_DEBUG": "TRACE"}
    )
    for r in ranks:
        assert (r["env"]["NCCL_DEBUG"], r["env"]["NCCL_DEBUG_SUBSYS"]) == ("TRACE", "INIT,NET")
        assert r["env"]["NCCL_DEBUG_FILE"] == expected["NCCL_DEBUG_FILE"]
    # A site's module set it quieter than INFO: raised, so the transport is still recorded, and said
    proc, ranks = run_launcher(tmp_path, f"--nccl-log-dir={logs}", env={"NCCL_DEBUG": "WARN"})
    for r in ranks:
        assert r["env"]["NCCL_DEBUG"] == "INFO" and r["env"]["NCCL_DEBUG_FILE"] == expected["NCCL_DEBUG_FILE"]
    assert "NCCL's transport: the environment's NCCL_DEBUG=WARN raised to INFO" in proc.stderr
    # Without the option, nothing changes
    _, ranks = run_launcher(tmp_path)
    assert not any(k.startswith("NCCL_DEBUG") for r in ranks for k in r["env"])


@pytest.mark.stage
def test_the_interconnect_records_nccls_transport_beside_its_version(tmp_path):
    """The rule merges read_logs into the raw JSON once the launcher has returned; the table's
    transport column and notes say it."""
    write_config(
        tmp_path,
        systems={"gpu": {"gpus_per_node": 2, "max_nodes": 1, "gpu_request": "gpus-per-node", "cpus_per_task": 1}},
        training__systems=["gpu"],
        training__frameworks=["pytorch"],
        training__gpus=[2],
        training__long_test__gpus=[],
        envs_gpu={"pytorch": interpreter("pytorch")},
    )
    out = snakemake(tmp_path, "-n", "-p", "interconnect").stdout
    line = next(x for x in out.splitlines() if "workflow_scripts.interconnect.collectives" in x)
    launch_words = shlex.split(line.split(" -- ")[0])
    logs = "results/interconnect/gpu/2gpu/nccl_logs/torch"
    assert f"--nccl-log-dir={logs}" in launch_words
    merge = shlex.split(line.split(" && ")[1].split(" >> ")[0])
    assert merge[1:] == [
        "-m",
        "workflow_scripts.cluster.nccl_log",
        logs,
        "--into",
        "results/interconnect/gpu/2gpu/torch.json",
    ]
    # What that merge does, on a raw output and the logs of a 2-node IB run
    folder = case(tmp_path, ib_logs, "torch_logs")
    raw = tmp_path / "torch.json"
    raw.write_text(
        json.dumps(
            {
                "source": "torch.distributed",
                "backend": "nccl",
                "world_size": 4,
                "num_nodes": 2,
                "rank_hosts": ["gpu01", "gpu01", "gpu02", "gpu02"],
                "device": "NVIDIA H100",
                "versions": {"torch": "2.5.1", "nccl": "2.21.5"},
                "nccl_env": {},
                "warmup": 1,
                "iterations": 2,
                "results": [
                    {
                        "collective": "all_reduce",
                        "bytes": 8,
                        "median_s": 1e-5,
                        "min_s": 1e-5,
                        "max_s": 1e-5,
                        "algbw_GBps": 0.0008,
                        "busbw_GBps": 0.0012,
                    }
                ],
            }
        )
    )
    proc = subprocess.run(
        [interpreter("workflow"), "-m", "workflow_scripts.cluster.nccl_log", str(folder), "--into", str(raw)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    merged = json.loads(raw.read_text())
    assert merged["versions"]["nccl"] == "2.21.5" and merged["nccl"] == nccl_log.read_logs(folder)
    [row] = ic_rows.rows(merged, "gpu", 4)
    assert row["transport"] == "NCCL 2.21.5: P2P/CUMEM/read (NVL) within a node; NET/IB GDRDMA between nodes"


MEASURED_NCCL = {
    "backend": "nccl",
    "versions": {"torch": "2.5.1", "nccl": "2.21.5"},
    "nccl": {"versions": ["2.21.5+cuda12.4"]},
}
MEASURED_GLOO = {"backend": "gloo", "versions": {"torch": "2.5.1", "nccl": ""}, "nccl": None}


@pytest.mark.unit
def test_library_note_says_when_the_prediction_measured_another_collective_library():
    same = {"versions": ["2.21.5+cuda12.4"]}
    assert library_note(same, "pytorch", MEASURED_NCCL) is None
    assert library_note(same, "tensorflow", MEASURED_NCCL) is None  # Horovod linking the same NCCL
    note = library_note({"versions": ["2.18.3+cuda12.2"]}, "tensorflow", MEASURED_NCCL)
    assert note == (
        "the interconnect stage measured torch.distributed's NCCL 2.21.5 while this TensorFlow run all-reduced "
        "through Horovod's NCCL 2.18.3"
    )
    assert "version not recorded" in library_note(None, "mxnet", MEASURED_NCCL)
    assert "version unknown" in library_note("2.21.5", "pytorch", {"backend": "nccl", "versions": {}})
    # On the CPU: torch's Gloo for PyTorch, Horovod's own Gloo for TensorFlow and MXNet
    assert library_note(None, "pytorch", MEASURED_GLOO) is None
    for fw, name in (("tensorflow", "TensorFlow"), ("mxnet", "MXNet")):
        note = library_note(None, fw, MEASURED_GLOO)
        assert f"torch.distributed's Gloo while this {name} run all-reduced through Horovod's Gloo" in note
    assert library_note(same, "pytorch", None) is None


@pytest.mark.unit
def test_the_container_image_installs_what_nccl_needs_for_infiniband():
    recipe = (REPO / "envs" / "containers" / "dlscale-gpu.def").read_text()
    post = recipe.split("%post", 1)[1].split("\n%", 1)[0]
    installed = {w for line in post.splitlines() if "apt-get install" in line for w in line.split()}
    assert {"rdma-core", "libibverbs1", "ibverbs-providers", "librdmacm1"} <= installed
