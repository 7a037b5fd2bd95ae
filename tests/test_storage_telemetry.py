"""Fig. 7's storage reads come from the counters of the file system the dataset was read from
(cluster.storage_probe.StorageProbe, cluster.mounts), and Fig. 7/8 say where a node has none or where its
InfiniBand bytes include the dataset's reads (results.telemetry_tables, results.training_figures).

The probe's counter roots (mountinfo, /proc, /sys with its debugfs, mmpmon) point at trees written
here in the formats of the kernel, Lustre and Storage Scale (see StorageProbe's helpers for the
sources of each format)."""

import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from workflow_scripts.cluster.storage_probe import StorageProbe
from workflow_scripts.results import training_figures
from workflow_scripts.results.telemetry_tables import network_notes, storage_notes, telemetry

FSID = "5c2b7a1e-0d1f-4a57-9a3e-2f6b8c9d0e1f"
MOUNTINFO = f"""\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/root rw,discard
60 27 0:52 / /scratch rw,relatime shared:30 - lustre 192.168.1.10@o2ib:/scratch rw,flock,lazystatfs
61 27 0:53 / /home rw,relatime shared:31 - lustre 10.1.0.5@tcp:/home rw,flock
62 27 0:54 / /nfs/data ro,relatime shared:32 - nfs4 srv:/export/data ro,vers=4.2,rsize=1048576,hard,proto=tcp,sec=sys
63 27 0:55 / /nfs/rdma ro,relatime shared:33 - nfs4 srv:/export/rdma ro,vers=4.2,hard,proto=rdma,port=20049
64 27 0:56 / /gpfs/fs1 rw,relatime shared:34 - gpfs fs1 rw
65 27 0:57 / /cephfs rw,relatime shared:35 - ceph admin@{FSID}.cephfs=/ rw,name=admin,secret=<hidden>,acl
66 27 0:58 / /beegfs rw,relatime shared:36 - beegfs beegfs_nodev rw,cfgFile=/etc/beegfs/beegfs-client.conf
67 27 0:59 / /merged rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w
68 27 0:60 / /dev/shm rw,nosuid,nodev - tmpfs tmpfs rw,size=65536k
69 27 0:61 / /mnt/bucket rw,nosuid,nodev,relatime - fuse.gcsfuse bucket rw,user_id=0,group_id=0
70 27 0:62 / /tank rw,relatime - zfs tank/data rw,xattr,noacl
"""
SCRATCH = "scratch-ffff8d2a1b3c4000"  # <fsname>-<client instance>, as llite names it


def lprocfs_stats(read_bytes):
    """A Lustre stats file as lprocfs_stats_seq_show writes it (read_bytes None: no samples yet,
    so no line)."""
    lines = [
        "snapshot_time                       1700000000.123456789 secs.nsecs",
        "start_time                          1699990000.000000000 secs.nsecs",
        "elapsed_time                        10000.123456789 secs.nsecs",
        "open                                12 samples [usecs] 3 41 160 2974",
    ]
    if read_bytes is not None:
        lines.append(f"read_bytes                          17 samples [bytes] 4096 1048576 {read_bytes} 9223372036854")
    lines.append("write_bytes                         2 samples [bytes] 512 512 1024 524288")
    return "\n".join(lines) + "\n"


def tree(tmp_path, files):
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    info = tmp_path / "mountinfo"
    info.write_text(MOUNTINFO)
    return info


# A node's disks that have read plenty, none of them the dataset's: what a fallback to summing disks would report.
BUSY_DISKS = {"vda": SimpleNamespace(read_bytes=10**12), "nvme0n1": SimpleNamespace(read_bytes=10**13)}


def probe(tmp_path, path, **kw):
    """A probe of the tree `tree` wrote: the paths as written (no host's links), the disks BUSY_DISKS."""
    kw = {"resolve": os.path.normpath, "disks": lambda: BUSY_DISKS, **kw}
    return StorageProbe(path, mountinfo=tmp_path / "mountinfo", proc=tmp_path / "proc", sys=tmp_path / "sys", **kw)


@pytest.mark.unit
def test_lustre_reads_its_llite_counters_and_its_traffic_is_on_infiniband(tmp_path):
    llite = f"sys/kernel/debug/lustre/llite/{SCRATCH}/stats"
    tree(
        tmp_path,
        {
            llite: lprocfs_stats(30_202_405),
            # Another file system's client on the node: not the dataset's.
            "sys/kernel/debug/lustre/llite/home-ffff8d2a1b3c9000/stats": lprocfs_stats(9_999_999_999),
        },
    )
    p = probe(tmp_path, "/scratch/imagenet/lmdb")
    first = p.read_bytes()
    (tmp_path / llite).write_text(lprocfs_stats(30_202_405 + (64 << 20)))
    d = p.describe()
    assert (d["kind"], d["device"], d["fstype"], d["mountpoint"], d["source"]) == (
        "lustre",
        "scratch",
        "lustre",
        "/scratch",
        "192.168.1.10@o2ib:/scratch",
    )
    assert d["supported"] and d["why"] is None
    assert first == 30_202_405 and p.read_bytes() - first == 64 << 20
    assert d["ib"] is True and "o2ib" in d["ib_why"]
    # A client whose read_bytes has no samples yet prints no such line: 0 bytes, not an error.
    (tmp_path / llite).write_text(lprocfs_stats(None))
    assert p.read_bytes() == 0
    # The same file system over TCP: its bytes are not on the IB ports.
    home = probe(tmp_path, "/home/x").describe()
    assert home["kind"] == "lustre" and home["ib"] is False


@pytest.mark.unit
def test_lustre_prefers_the_bytes_its_servers_sent_and_reads_older_clients_under_proc(tmp_path):
    """OSC and MDC stats of the mount's client instance count what the servers sent (LMDB's mmap
    reads too, which llite's read() count misses); an older client keeps them under /proc."""
    instance = SCRATCH.removeprefix("scratch-")
    root = "proc/fs/lustre"
    tree(
        tmp_path,
        {
            f"{root}/llite/{SCRATCH}/stats": lprocfs_stats(1),
            f"{root}/osc/scratch-OST0000-osc-{instance}/stats": lprocfs_stats(3000),
            f"{root}/osc/scratch-OST0001-osc-{instance}/stats": lprocfs_stats(500),
            f"{root}/mdc/scratch-MDT0000-mdc-{instance}/stats": lprocfs_stats(None),
            # Another mount's instance of the same file system: its own reads.
            f"{root}/osc/scratch-OST0000-osc-ffff8d2a1b3c5000/stats": lprocfs_stats(10**9),
        },
    )
    p = probe(tmp_path, "/scratch/imagenet")
    assert p.describe()["supported"] and p.read_bytes() == 3500
    assert "bytes the servers sent" in p.describe()["counter"]


@pytest.mark.unit
def test_lustre_without_readable_counters_is_unsupported(tmp_path):
    tree(tmp_path, {"sys/kernel/debug/lustre/llite/home-ffff8d2a1b3c9000/stats": lprocfs_stats(5)})
    p = probe(tmp_path, "/scratch/imagenet")
    d = p.describe()
    assert not d["supported"] and p.read_bytes() is None
    assert "no instance scratch-<id>" in d["why"] and str(tmp_path / "proc/fs/lustre/llite") in d["why"]
    # Its traffic still travels over InfiniBand, counters or not.
    assert d["ib"] is True


@pytest.mark.unit
def test_nfs_reads_the_mounts_server_bytes(tmp_path):
    mountstats = (
        "device proc mounted on /proc with fstype proc\n"
        "device srv:/export/data mounted on /nfs/data with fstype nfs4 statvers=1.1\n"
        "\topts:\trw,vers=4.2,rsize=1048576\n"
        "\tbytes:\t1000 0 0 0 5000 0 2 0\n"
        "device srv:/export/rdma mounted on /nfs/rdma with fstype nfs4 statvers=1.1\n"
        "\tbytes:\t0 0 0 0 7000 0 0 0\n"
    )
    tree(tmp_path, {"proc/self/mountstats": mountstats})
    p = probe(tmp_path, "/nfs/data/imagenet")
    d = p.describe()
    assert (d["kind"], d["device"], d["supported"], d["ib"]) == ("nfs", "/nfs/data", True, False)
    assert p.read_bytes() == 5000
    rdma = probe(tmp_path, "/nfs/rdma/imagenet")
    assert rdma.read_bytes() == 7000 and rdma.describe()["ib"] is True


def fake_mmpmon(tmp_path, fail=False):
    """An mmpmon that answers fs_io_s as Storage Scale's does with -p, _br_ growing by 1 MiB a call;
    it refuses other arguments or requests."""
    script = tmp_path / "mmpmon"
    count = tmp_path / "mmpmon.calls"
    body = (
        "echo 'mmpmon: this command must be run with root authority' >&2; exit 1"
        if fail
        else f"""[ "$*" = "-p -s" ] || {{ echo "unexpected arguments: $*" >&2; exit 2; }}
read request; [ "$request" = fs_io_s ] || {{ echo "unexpected request: $request" >&2; exit 2; }}
n=$(( $(cat {count} 2>/dev/null || echo 0) + 1 )); echo $n > {count}
for fs in fs0 fs1; do
  echo "_fs_io_s_ _n_ 10.0.0.8 _nn_ node1 _rc_ 0 _t_ 1700000000 _tu_ 407431 _cl_ c1.example _fs_ $fs _d_ 2 \\
_br_ $(( n * 1048576 )) _bw_ 314572800 _oc_ 10 _cc_ 16 _rdc_ 101 _wc_ 300 _dir_ 7 _iu_ 2"
done"""
    )
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.mark.stage
def test_gpfs_reads_mmpmon_and_says_why_without_it(tmp_path):
    tree(tmp_path, {})
    p = probe(tmp_path, "/gpfs/fs1/imagenet", mmpmon=fake_mmpmon(tmp_path))
    d = p.describe()
    assert (d["kind"], d["device"], d["supported"], d["ib"]) == ("gpfs", "fs1", True, "may")
    first = p.read_bytes()
    assert p.read_bytes() - first == 1 << 20

    gone = probe(tmp_path, "/gpfs/fs1/imagenet", mmpmon=tmp_path / "no" / "mmpmon").describe()
    assert not gone["supported"] and "mmpmon" in gone["why"] and gone["kind"] == "gpfs"
    (tmp_path / "root-only").mkdir()
    denied = probe(tmp_path, "/gpfs/fs1/imagenet", mmpmon=fake_mmpmon(tmp_path / "root-only", fail=True))
    assert denied.read_bytes() is None and "root authority" in denied.describe()["why"]


@pytest.mark.unit
def test_cephfs_reads_its_clients_debugfs_metrics(tmp_path):
    size = (
        "item          total       avg_sz(bytes)   min_sz(bytes)   max_sz(bytes)  total_sz(bytes)\n"
        "----------------------------------------------------------------------------------------\n"
        "read          12          349525          4096            1048576         4194304\n"
        "write         0           0               0               0               0\n"
        "copyfrom      0           0               0               0               0\n"
    )
    debugfs = "sys/kernel/debug/ceph"
    tree(
        tmp_path,
        {
            f"{debugfs}/{FSID}.client4242/metrics/size": size,
            # Another cluster's client, and an RBD client (no metrics): neither is the mount's.
            f"{debugfs}/0b0e1c2d-0000-4000-8000-000000000000.client7/metrics/size": size.replace("4194304", "1"),
            f"{debugfs}/{FSID}.client99/monc": "have osdmap 12\n",
        },
    )
    p = probe(tmp_path, "/cephfs/imagenet")
    assert (p.describe()["kind"], p.describe()["supported"], p.read_bytes()) == ("cephfs", True, 4194304)


@pytest.mark.unit
def test_no_local_disk_stands_in_for_a_file_system_without_counters(tmp_path):
    """An overlay, tmpfs, FUSE, BeeGFS, ZFS: unsupported with why, and no bytes at all, where the
    node's disks (BUSY_DISKS) have read plenty."""
    tree(tmp_path, {})
    for path, fstype, says in (
        ("/merged/imagenet", "overlay", "overlay"),
        ("/dev/shm/imagenet", "tmpfs", "memory"),
        ("/mnt/bucket/imagenet", "fuse.gcsfuse", "FUSE"),
        ("/beegfs/imagenet", "beegfs", "no byte counters"),
        ("/tank/imagenet", "zfs", "no counters of zfs"),
    ):
        p = probe(tmp_path, path)
        d = p.describe()
        assert p.read_bytes() is None and not d["supported"], d
        assert d["fstype"] == fstype and says in d["why"] and d["kind"] == "none", d
    beegfs = probe(tmp_path, "/beegfs/imagenet").describe()
    assert beegfs["ib"] == "may"
    none = StorageProbe(None).describe()
    assert not none["supported"] and none["why"]


@pytest.mark.unit
def test_a_local_file_system_reads_its_own_block_device(tmp_path):
    """/dev/root names no disk: the mount's device number does (/sys/dev/block/<major:minor>)."""
    tree(tmp_path, {})
    block = tmp_path / "sys/dev/block"
    block.mkdir(parents=True)
    (block / "254:0").symlink_to("../../devices/pci0000:00/0000:00:02.0/virtio1/block/vdz")
    disks = {"vdz": SimpleNamespace(read_bytes=123), "vdy": SimpleNamespace(read_bytes=10**12)}
    p = probe(tmp_path, "/var/data/imagenet", disks=lambda: disks)
    assert (p.kind, p.device, p.read_bytes()) == ("block", "vdz", 123)


def write_run(root, name, storage, rows=(), nodes=("n1",)):
    """A run directory as Telemetry leaves it: telemetry.<node>.csv (and .json where `storage` is
    given: a probe's describe(); None: a run from before the JSON)."""
    run = root / "local" / name
    run.mkdir(parents=True)
    for node in nodes:
        lines = ["time_s,node,metric,device,value", f"1.0,{node},cpu_percent,all,50", f"2.0,{node},cpu_percent,all,50"]
        lines += [f"{t},{node},{metric},{device},{value}" for t, metric, device, value in rows]
        (run / f"telemetry.{node}.csv").write_text("\n".join(lines) + "\n")
        if storage is not None:
            meta = {"node": node, "wall_origin": 0.0, "interval": 1.0, "storage": storage}
            (run / f"telemetry.{node}.json").write_text(json.dumps(meta))
    return run


def runs_of(*dirs):
    return pd.DataFrame(
        [
            {
                "system": "local",
                "framework": Path(d).name.split("_")[0],
                "precision": "fp32",
                "gpus": int(Path(d).name.split("_")[2].removesuffix("gpu")),
                "input": "auto",
                "run_dir": str(d),
                "status": "ok",
            }
            for d in dirs
        ]
    )


@pytest.mark.unit
def test_notes_say_where_storage_is_unsupported_and_where_ib_carries_it(tmp_path):
    tree(tmp_path, {f"sys/kernel/debug/lustre/llite/{SCRATCH}/stats": lprocfs_stats(1)})
    lustre = probe(tmp_path, "/scratch/imagenet").describe()
    overlay = probe(tmp_path, "/merged/imagenet").describe()
    gpfs = probe(tmp_path, "/gpfs/fs1/imagenet", mmpmon=tmp_path / "no" / "mmpmon").describe()
    runs = tmp_path / "runs"
    dirs = [
        write_run(runs, "pytorch_fp32_1gpu", lustre, [(1.0, "read_MBps", "lustre:scratch", 5.0)]),
        write_run(runs, "pytorch_fp32_2gpu", overlay, nodes=("n1", "n2")),
        write_run(runs, "mxnet_fp32_2gpu", overlay),
        write_run(runs, "tensorflow_fp32_2gpu", None, [(1.0, "read_MBps", "disks:all", 0.1)]),
        write_run(runs, "tensorflow_fp32_4gpu", gpfs, nodes=("g1",)),
    ]
    notes = storage_notes(runs_of(*dirs))
    why = overlay["why"]
    assert f"unsupported on overlay (n1, local/pytorch_fp32_2gpu, local/mxnet_fp32_2gpu): {why}" in notes
    assert f"unsupported on overlay (n2, local/pytorch_fp32_2gpu): {why}" in notes
    assert f"unsupported on gpfs (g1, local/tensorflow_fp32_4gpu): {gpfs['why']}" in notes
    (old,) = [n for n in notes if "local/tensorflow_fp32_2gpu" in n]
    assert "not recorded" in old and "telemetry.n1.json" in old
    assert not any("pytorch_fp32_1gpu" in n for n in notes) and len(notes) == 4

    net = network_notes(runs_of(*dirs))
    assert net == [
        "IB bytes on n1 include storage traffic: /scratch is Lustre over o2ib",
        f"IB bytes on g1 may include storage traffic: {gpfs['ib_why']}",
    ]


@pytest.mark.unit
def test_fig7_says_unsupported_instead_of_plotting_zeros_and_fig8_carries_the_ib_note(tmp_path):
    tree(tmp_path, {f"sys/kernel/debug/lustre/llite/{SCRATCH}/stats": lprocfs_stats(1)})
    lustre = probe(tmp_path, "/scratch/imagenet").describe()
    overlay = probe(tmp_path, "/merged/imagenet").describe()
    runs = tmp_path / "runs"
    ib = [(t, m, "ib:mlx5_0/1", 900.0) for t in (1.0, 2.0) for m in ("send_MBps", "recv_MBps")]
    dirs = [
        write_run(runs, "pytorch_fp32_1gpu", lustre, [(t, "read_MBps", "lustre:scratch", 5.0) for t in (1, 2)] + ib),
        write_run(runs, "pytorch_fp32_2gpu", overlay, [(t, "send_MBps", "eth0", 1.0) for t in (1, 2)]),
    ]
    frame = runs_of(*dirs)
    fig = training_figures._series(
        frame,
        telemetry(frame, ["read_MBps"]),
        ["read_MBps"],
        tmp_path / "fig7.png",
        "Fig. 7",
        "read MB/s",
        training_figures.storage_panel_note,
    )
    lustre_ax, overlay_ax = fig.axes[:2]
    assert len(lustre_ax.lines) == 1 and lustre_ax.get_title() == "local/pytorch_fp32_1gpu"
    assert not overlay_ax.lines
    (text,) = overlay_ax.texts
    assert "unsupported on overlay" in text.get_text().replace("\n", " ")
    assert (tmp_path / "fig7.png").stat().st_size > 0

    fig = training_figures._series(
        frame,
        telemetry(frame, ["send_MBps", "recv_MBps"]),
        ["send_MBps", "recv_MBps"],
        tmp_path / "fig8.png",
        "Fig. 8",
        "MB/s",
        training_figures.network_panel_note,
    )
    lustre_ax, overlay_ax = fig.axes[:2]
    assert "IB bytes on n1 include storage traffic" in lustre_ax.get_title().replace("\n", " ")
    assert len(overlay_ax.lines) == 2 and overlay_ax.get_title() == "local/pytorch_fp32_2gpu"
    assert os.path.getsize(tmp_path / "fig8.png") > 0


@pytest.mark.stage
def test_telemetry_writes_no_read_rows_where_the_storage_probe_is_unsupported(tmp_path):
    """A node whose storage has no counter still writes its other rows every interval (this
    machine's CPU and network, sampled: a stage test)."""
    import time

    from workflow_scripts.cluster.telemetry import Telemetry

    tel = Telemetry(tmp_path / "telemetry.n1.csv", None, interval=0.01)
    assert not tel.storage.supported and tel.storage.describe()["why"]
    prev = tel._snapshot()
    time.sleep(0.02)
    metrics = {row[2] for row in tel._rows(prev, tel._snapshot(), prev[0])}
    assert "read_MBps" not in metrics and "cpu_percent" in metrics


@pytest.mark.unit
def test_a_runs_rates_are_over_its_timed_steps_not_its_start_up(tmp_path):
    """NCCL's set-up and compilation at 1,000 MB/s for the run's first 10 s, then 100 MB/s through its
    timed steps (wall clock 1010-1020): the table's mean and total are the timed steps' alone."""
    from workflow_scripts.results import telemetry_tables

    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"isolation": {"window": {"start": 1010.0, "end": 1020.0}}}))
    (run / "telemetry.n1.json").write_text(json.dumps({"wall_origin": 1000.0, "interval": 1.0}))
    rows = ["time_s,node,metric,device,value"]
    rows += [f"{t}.0,n1,send_MBps,ib0,{1000 if t <= 10 else 100}" for t in range(1, 31)]
    (run / "telemetry.n1.csv").write_text("\n".join(rows) + "\n")
    runs = pd.DataFrame(
        [{"status": "ok", "run_dir": str(run), "system": "g", "framework": "pytorch", "precision": "fp32",
          "gpus": 2, "input": "dali", "repeat": 1}]
    )  # fmt: skip
    (row,) = telemetry_tables.telemetry(runs, ["send_MBps"]).itertuples()
    assert (row.samples, row.seconds, row.mean_MBps, row.total_MB) == (10, 10.0, 100.0, 1000.0)


@pytest.mark.unit
def test_a_series_in_another_unit_is_aggregated_in_its_own(tmp_path):
    """GPU memory (gpu_mem_MB, a level, not a rate): its peak and mean over the timed steps in MB and
    no total, which would be MB x s; a table of two units at once is refused, naming them."""
    from workflow_scripts.results import telemetry_tables

    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"isolation": {"window": {"start": 1010.0, "end": 1020.0}}}))
    (run / "telemetry.n1.json").write_text(json.dumps({"wall_origin": 1000.0, "interval": 1.0}))
    rows = ["time_s,node,metric,device,value"] + [f"{t}.0,n1,gpu_mem_MB,gpu0,{100 * t}" for t in range(1, 31)]
    (run / "telemetry.n1.csv").write_text("\n".join(rows) + "\n")
    runs = pd.DataFrame(
        [{"status": "ok", "run_dir": str(run), "system": "g", "framework": "pytorch", "precision": "fp32",
          "gpus": 2, "input": "dali", "repeat": 1}]
    )  # fmt: skip
    table = telemetry_tables.telemetry(runs, ["gpu_mem_MB"])
    assert list(table.columns[-2:]) == ["peak_MB", "mean_MB"]
    (row,) = table.itertuples()
    assert (row.samples, row.peak_MB, row.mean_MB) == (10, 2000, 1550.0)
    with pytest.raises(ValueError, match="MB', 'MBps'"):
        telemetry_tables.telemetry(runs, ["gpu_mem_MB", "read_MBps"])


@pytest.mark.unit
def test_sends_are_counted_once_per_physical_port(tmp_path):
    """A bond over two ports, a VLAN on it, IPoIB on an HCA and loopback: only the ports are
    counted (the bond's and the VLAN's bytes are theirs; IPoIB's, the HCA port counters')."""
    from workflow_scripts.cluster import telemetry as tel

    net = tmp_path / "net"
    for nic, kind, physical in [
        ("eth0", "1", True),
        ("eth1", "1", True),
        ("bond0", "1", False),
        ("bond0.100", "1", False),
        ("ib0", "32", True),
        ("lo", "772", False),
    ]:
        (net / nic).mkdir(parents=True)
        (net / nic / "type").write_text(kind + "\n")
        if physical:
            (net / nic / "device").mkdir()
    said = tel.uncounted_nics(net)
    assert sorted(said) == ["bond0", "bond0.100", "ib0", "lo"] and "IPoIB" in said["ib0"]
