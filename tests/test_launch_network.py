"""How the ranks of a run reach each other (issue 27, items 5 and 6): one network interface,
chosen once by the launcher, never the loopback across nodes even where a node's name resolves to
127.0.1.1 (Debian's /etc/hosts); Horovod's Gloo timeout; the MPI controller; config nccl_env given
identically to training runs and the interconnect stage and recorded by both; the interconnect
stage in the system's training environment."""

import json
import os
import re
import shlex
import shutil
import subprocess

import pytest
from helpers import REPO, SNAKEMAKE, interpreter, snakemake, trainer_command, write_config

from workflow_scripts.cluster import interpreter as interpreter_words
from workflow_scripts.cluster import launcher, netif
from workflow_scripts.cluster.rank_env import Launch, setup_horovod

# A node of a cluster: Ethernet, InfiniBand (IPoIB), a docker bridge without an address.
ADDRS = {"lo": "127.0.0.1", "eth0": "10.1.0.5", "ib0": "10.2.0.5", "docker0": None}


def route(ip):
    """The kernel's choice on that node: the IPoIB subnet via ib0, the rest via the default route."""
    if ip.startswith("127."):
        return "127.0.0.1"
    return "10.2.0.5" if ip.startswith("10.2.") else "10.1.0.5"


@pytest.mark.unit
def test_a_name_that_resolves_to_loopback_never_gives_lo_across_nodes():
    # Node 0's own name is 127.0.1.1 here (main's iface_towards(node 0's name) gave 'lo'); the
    # choice follows the route to another node of the run.
    names = {"n0": ["127.0.1.1"], "n1": ["10.2.0.6"]}
    assert netif.choose(["n1"], addrs=ADDRS, resolve=names.get, route=route)[:2] == ("ib0", "10.2.0.5")
    # Every name resolves to the loopback on this node: the default route's interface, not lo.
    iface, addr, why = netif.choose(["n1", "n2"], addrs=ADDRS, resolve=lambda h: ["127.0.1.1"], route=route)
    assert (iface, addr, why) == ("eth0", "10.1.0.5", "the default route")
    # No route off the node at all: an error that names the key, not a hang.
    with pytest.raises(netif.InterfaceError, match="training.network_interface"):
        netif.choose(["n1"], addrs=ADDRS, resolve=lambda h: ["127.0.1.1"], route=lambda ip: "127.0.0.1")
    # One node: the loopback reaches every rank.
    assert netif.choose([], addrs=ADDRS)[:2] == ("lo", "127.0.0.1")
    # The key overrides, and a name this node does not have is refused, naming the key.
    assert netif.choose(["n1"], "eth0", addrs=ADDRS)[:2] == ("eth0", "10.1.0.5")
    for bad in ("eth9", "docker0"):
        with pytest.raises(netif.InterfaceError, match="config training.network_interface"):
            netif.choose(["n1"], bad, addrs=ADDRS)


# Node 0's networks, ADDRS with their prefixes.
NETS = {"lo": "127.0.0.1/8", "eth0": "10.1.0.5/16", "ib0": "10.2.0.5/24"}


@pytest.mark.unit
def test_nccl_and_gloo_bootstraps_get_the_interface_across_nodes_unless_set(monkeypatch):
    monkeypatch.setattr(netif, "interfaces", lambda: ADDRS)
    monkeypatch.setattr(netif, "networks", lambda: NETS)
    monkeypatch.setattr(netif, "resolve", {"n1": ["10.2.0.6"]}.get)
    monkeypatch.setattr(netif, "route_source", route)
    a = launcher.argparse.Namespace(network_interface="auto")
    first = {netif.FIRST_IFACE: "ib0", netif.FIRST_NET: "10.2.0.5/24"}
    assert launcher.network_env(a, ["n0", "n1"], {}) == (
        "ib0",
        "10.2.0.5",
        {
            "NCCL_SOCKET_IFNAME": "=ib0",
            "GLOO_SOCKET_IFNAME": "ib0",
            **first,
            netif.NAMED: "NCCL_SOCKET_IFNAME,GLOO_SOCKET_IFNAME",
        },
    )
    # a site's own NCCL_SOCKET_IFNAME is kept on every node: only what the launcher set is each node's own
    assert launcher.network_env(a, ["n0", "n1"], {"NCCL_SOCKET_IFNAME": "mlx"})[2] == {
        "GLOO_SOCKET_IFNAME": "ib0",
        **first,
        netif.NAMED: "GLOO_SOCKET_IFNAME",
    }
    assert launcher.network_env(a, ["n0"], {}) == ("lo", "127.0.0.1", {})  # NCCL's own choice on one node


# Three other nodes of that run, their interfaces named otherwise: by the subnet the ranks share, by
# node 0's name where two share it, by the route where the node is on another subnet.
OTHER_NODES = {
    "n1": {"lo": "127.0.0.1/8", "enp1s0": "10.1.0.6/16", "ibp65s0": "10.2.0.6/24", "docker0": "172.17.0.1/16"},
    "n2": {"lo": "127.0.0.1/8", "ib1": "10.2.0.7/24", "ib0": "10.2.0.8/24"},
    "n3": {"lo": "127.0.0.1/8", "eth3": "10.3.0.9/24"},
}


def n3_route(ip):
    return "10.3.0.9" if ip.startswith("10.") else None


@pytest.mark.unit
def test_each_node_takes_its_own_interface_in_node_0s_network():
    """Item 4 of issue 61: node 0's ib0 given to every rank; n1 calls the same network ibp65s0, n2
    has two interfaces on it (ib0, node 0's name, taken), n3 reaches it only through a router."""
    assert netif.node_interface("ib0", "10.2.0.5/24", OTHER_NODES["n1"])[:2] == ("ibp65s0", "10.2.0.6")
    assert netif.node_interface("ib0", "10.2.0.5/24", OTHER_NODES["n2"])[:2] == ("ib0", "10.2.0.8")
    assert netif.node_interface("ib0", "10.2.0.5/24", OTHER_NODES["n3"], route=n3_route) == (
        "eth3",
        "10.3.0.9",
        "the route to the first node's 10.2.0.5",
    )
    assert netif.node_interface("ib0", "10.2.0.5/24", NETS)[:2] == ("ib0", "10.2.0.5")  # node 0 itself
    assert netif.node_interface("ib0", "10.2.0.5/24", {"lo": "127.0.0.1/8"}, route=lambda ip: "127.0.0.1") is None


@pytest.mark.unit
def test_a_rank_puts_its_nodes_interface_where_the_launcher_put_node_0s():
    env = {
        "NCCL_SOCKET_IFNAME": "=ib0",
        "GLOO_SOCKET_IFNAME": "ib0",
        "DLSCALE_GLOO_IFACE": "ib0",
        netif.FIRST_IFACE: "ib0",
        netif.FIRST_NET: "10.2.0.5/24",
        netif.NAMED: "NCCL_SOCKET_IFNAME,GLOO_SOCKET_IFNAME",
    }
    assert netif.own_interface(env, OTHER_NODES["n1"])[0] == "ibp65s0"
    assert (env["NCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"], env["DLSCALE_GLOO_IFACE"]) == (
        "=ibp65s0",
        "ibp65s0",
        "ibp65s0",
    )
    # Horovod's Gloo binds to it too (the launcher's DLSCALE_GLOO_IFACE becomes HOROVOD_GLOO_IFACE)
    hvd = {**env, "DLSCALE_RENDEZVOUS_ADDR": "10.2.0.5", "DLSCALE_RENDEZVOUS_PORT": "4242"}
    setup_horovod(Launch(rank=1, world_size=2), hvd)
    assert hvd["HOROVOD_GLOO_IFACE"] == "ibp65s0"
    site = {**env, "NCCL_SOCKET_IFNAME": "mlx5", netif.NAMED: "GLOO_SOCKET_IFNAME"}
    netif.own_interface(site, OTHER_NODES["n2"])
    assert (site["NCCL_SOCKET_IFNAME"], site["GLOO_SOCKET_IFNAME"]) == ("mlx5", "ib0")
    assert netif.own_interface({"GLOO_SOCKET_IFNAME": "eth0"}, OTHER_NODES["n1"]) is None  # no launcher's word
    with pytest.raises(netif.InterfaceError, match="training.network_interface"):
        netif.own_interface(dict(env), {"lo": "127.0.0.1/8"}, route=lambda ip: None)


def _ipv4_interface():
    """A non-loopback interface with an IPv4 address here, read from iproute2."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True).stdout
    found = [
        (m.group(1), m.group(2))
        for m in re.finditer(r"^\d+:\s+(\S+)\s+inet\s+([\d.]+)/", out, re.M)
        if not m.group(2).startswith("127.")
    ]
    if not found:
        pytest.skip("no non-loopback IPv4 interface on this machine")
    return found[0]


def _launch_dump(tmp_path, *options):
    """A local 2-rank Horovod launch of a tiny command that records each worker's environment
    after setup_horovod, as the trainers call it."""
    worker = (
        "import json, os, sys; from workflow_scripts.cluster.rank_env import detect, setup_horovod; "
        "setup_horovod(detect()); open(os.path.join(sys.argv[1], 'rank' + os.environ['RANK'] + '.json'), 'w')"
        ".write(json.dumps(dict(os.environ)))"
    )
    proc = subprocess.run(
        [
            interpreter("workflow"),
            "-m",
            "workflow_scripts.cluster.launcher",
            "--nproc-per-node",
            "2",
            "--horovod",
            f"--python={interpreter('tensorflow')}",
            *options,
            "--",
            interpreter("workflow"),
            "-c",
            worker,
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.stage
def test_local_launch_gives_every_worker_the_launchers_interface_and_timeout(tmp_path):
    _, envs = _launch_dump(tmp_path)
    for env in envs:
        assert (env["HOROVOD_GLOO_IFACE"], env["HOROVOD_GLOO_RENDEZVOUS_ADDR"]) == ("lo", "127.0.0.1")
        assert env["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "300"
        assert "NCCL_SOCKET_IFNAME" not in env or env["NCCL_SOCKET_IFNAME"] == os.environ.get("NCCL_SOCKET_IFNAME")
    iface, ip = _ipv4_interface()
    _, envs = _launch_dump(tmp_path, f"--network-interface={iface}", "--gloo-timeout-s=600", "--env=NCCL_NVLS_ENABLE=0")
    for env in envs:
        assert (env["HOROVOD_GLOO_IFACE"], env["HOROVOD_GLOO_RENDEZVOUS_ADDR"]) == (iface, ip)
        assert (env["NCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"]) == (f"={iface}", iface)
        assert (env["HOROVOD_GLOO_TIMEOUT_SECONDS"], env["NCCL_NVLS_ENABLE"]) == ("600", "0")


@pytest.mark.stage
def test_horovod_runs_over_the_chosen_interface(tmp_path):
    """Real Horovod (Gloo controller) of the TensorFlow environment, 2 ranks: the rendezvous is
    reached at the chosen interface's address and Gloo binds to that interface."""
    iface, ip = _ipv4_interface()
    worker = (
        "import os; from workflow_scripts.cluster.rank_env import detect, setup_horovod; setup_horovod(detect()); "
        "import horovod.tensorflow as hvd, tensorflow as tf; hvd.init(); "
        "s = hvd.allreduce(tf.constant([float(hvd.rank() + 1)]), op=hvd.Sum); "
        "iface, addr = os.environ['HOROVOD_GLOO_IFACE'], os.environ['HOROVOD_GLOO_RENDEZVOUS_ADDR']; "
        "os.write(1, f'rank {hvd.rank()} of {hvd.size()} sum {float(s[0])} {iface} {addr}\\n'.encode())"
    )
    # The ranks share one pipe: each line is one write (shorter than PIPE_BUF, so never split by the
    # other rank's), where print may write its pieces one by one.
    py = interpreter("tensorflow")
    proc = subprocess.run(
        [
            interpreter("workflow"),
            "-m",
            "workflow_scripts.cluster.launcher",
            "--nproc-per-node",
            "2",
            "--horovod",
            f"--python={py}",
            f"--network-interface={iface}",
            "--",
            py,
            "-c",
            worker,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in range(2):
        assert f"rank {rank} of 2 sum 3.0 {iface} {ip}" in proc.stdout, proc.stdout


@pytest.mark.stage
def test_mpi_controller_refuses_a_local_launch_naming_the_key(tmp_path):
    proc = subprocess.run(
        [
            interpreter("workflow"),
            "-m",
            "workflow_scripts.cluster.launcher",
            "--nproc-per-node",
            "2",
            "--horovod",
            "--horovod-controller=mpi",
            "--",
            "true",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "config training.horovod_controller = mpi" in proc.stderr, proc.stderr
    # Parsed on a machine without srun (its PATH has the shell Snakemake needs and no srun), the
    # workflow stops at once.
    write_config(tmp_path, training__horovod_controller="mpi")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "sh", "which"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    proc = subprocess.run(
        [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path), "--cores", "1", "-n"],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PATH=str(bin_dir)),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "config training.horovod_controller = mpi" in out and "no srun" in out, out[-2000:]


@pytest.mark.unit
def test_srun_gets_the_mpi_plugin_only_where_asked():
    assert launcher.srun_command(2, 4, 10, "--gpus-per-node=4", "pmix")[-2:] == ["--mpi=pmix", "--gpus-per-node=4"]
    assert not any(w.startswith("--mpi") for w in launcher.srun_command(2, 4, 10))
    with pytest.raises(SystemExit, match="nccl_env"):
        launcher.config_env(["LD_PRELOAD=/tmp/x.so"])


@pytest.mark.unit
def test_every_task_on_every_node_gets_the_launchers_environment():
    """PYTHONPATH with the workflow's folder, the rendezvous, nccl_env: srun exports them all, whatever
    a site's SLURM_EXPORT_ENV says."""
    assert "--export=ALL" in launcher.srun_command(2, 4, 10, "--gpus-per-node=4")


GPU_SYSTEM = {
    "gpu": {"gpus_per_node": 2, "max_nodes": 1, "gpu_request": "gpus-per-node", "srun_mpi": "pmix", "cpus_per_task": 1}
}
NVLS_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


@pytest.mark.stage
def test_interconnect_of_a_gpu_system_runs_in_its_training_environment_with_the_runs_nccl_env(tmp_path):
    """Dry run: the interconnect jobs of a GPU system start their ranks in envs_gpu.pytorch (here
    a container) through the host's launcher, with the same --env words as its training runs."""
    image = tmp_path / "torch-gpu.sif"
    image.write_bytes(b"not a real image: the dry run only checks that it exists")
    build = tmp_path / "nccl-tests"
    build.mkdir()
    for exe in ("all_reduce_perf", "broadcast_perf"):
        (build / exe).write_text("#!/bin/sh\n")
        (build / exe).chmod(0o755)
    write_config(
        tmp_path,
        systems=GPU_SYSTEM,
        training__systems=["gpu"],
        training__frameworks=["pytorch", "mxnet"],
        training__gpus=[2],
        training__long_test__gpus=[],
        inference__models={"resnet50": "torchvision"},
        envs_gpu={"pytorch": {"container": str(image)}, "mxnet": interpreter("mxnet")},
        interconnect__nccl_tests=str(build),
        nccl_env=NVLS_OFF,
    )
    out = snakemake(tmp_path, "-n", "-p", "interconnect", "training").stdout

    def command(marker):
        line = next(x for x in out.splitlines() if marker in x)
        return shlex.split(line.removeprefix("Shell command: ").split(" > ")[0])

    env_words = ["--env=NCCL_NVLS_ENABLE=0", "--env=TORCH_SYMM_MEM_DISABLE_MULTICAST=1"]
    nvml = [f"--bind={f}:{interpreter_words.SITE}/pynvml.py" for f in interpreter_words.pure_modules()]
    path = f"{REPO}:{interpreter_words.SITE}" if nvml else str(REPO)
    container = ["apptainer", "exec", "--nv", f"--bind={REPO}", *nvml, f"--env=PYTHONPATH={path}", str(image)]
    collectives = command("workflow_scripts.interconnect.collectives")
    assert collectives[:3] == [interpreter("workflow"), "-m", "workflow_scripts.cluster.launcher"], collectives
    ranks = collectives[collectives.index("--") + 1 :]
    assert ranks[: len(container) + 3] == [*container, "python3", "-m", "workflow_scripts.interconnect.collectives"]
    assert all(w in collectives[: collectives.index("--")] for w in env_words)
    nccl = command("workflow_scripts.interconnect.nccl_tests")
    assert nccl[0] == interpreter("workflow") and "--srun-mpi=pmix" in nccl and all(w in nccl for w in env_words)
    assert "--exec=" + " ".join(container[:4] + [f"--bind={build}"] + container[4:]) in nccl, nccl
    for trainer in ("pytorch_ddp", "mxnet_horovod"):
        train = command(f"workflow_scripts.train.{trainer}")
        assert all(w in train for w in env_words), train


@pytest.mark.stage
def test_nccl_env_reaches_and_is_recorded_by_the_interconnect_and_training(tmp_path):
    """Real 2-rank runs (Gloo on the CPU): the interconnect JSON and a training summary record
    the config's variables; without them NCCL keeps its own defaults (nothing set)."""
    py = interpreter("pytorch")
    base = [interpreter("workflow"), "-m", "workflow_scripts.cluster.launcher", "--nproc-per-node", "2"]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "TORCH_SYMM_MEM_", "NVSHMEM_"))}
    env = dict(clean, PYTHONPATH=str(REPO))
    ic = [
        py,
        "-m",
        "workflow_scripts.interconnect.collectives",
        "--max-bytes",
        "64",
        "--warmup",
        "1",
        "--iterations",
        "2",
        "--out",
    ]
    proc = subprocess.run(
        [*base, "--", *ic, str(tmp_path / "default.json")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "default.json").read_text())["nccl_env"] == {}
    words = [f"--env={k}={v}" for k, v in NVLS_OFF.items()]
    proc = subprocess.run(
        [*base, *words, "--", *ic, str(tmp_path / "off.json")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "off.json").read_text())["nccl_env"] == NVLS_OFF
    run = tmp_path / "run"
    proc = subprocess.run(
        [
            *base,
            *words,
            "--",
            *trainer_command(data=tmp_path, data_source="synthetic", classes=4, batch_per_gpu=2, steps=1, out=run),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((run / "summary.json").read_text())["nccl_env"] == NVLS_OFF


@pytest.mark.stage
def test_one_rank_runs_horovod_on_gloo_without_a_rendezvous(tmp_path):
    """A 1-GPU TensorFlow/MXNet run (the baseline of every scaling figure): a Horovod built with MPI
    would default to MPI_Init, which aborts in a plain `srun -n1` where MpiDefault=none. One rank
    gets the Gloo controller, needs no rendezvous, and a user's own choice wins."""
    env = {}
    setup_horovod(Launch(world_size=1), env)
    assert (env["HOROVOD_CONTROLLER"], env["HOROVOD_CPU_OPERATIONS"]) == ("gloo", "gloo")
    assert "HOROVOD_GLOO_RENDEZVOUS_ADDR" not in env
    mine = {"HOROVOD_CONTROLLER": "mpi"}
    setup_horovod(Launch(world_size=1), mine)
    assert mine["HOROVOD_CONTROLLER"] == "mpi"
    # The real Horovod of the TensorFlow environment, one process, nothing else set: it runs on Gloo.
    code = (
        "import os; from workflow_scripts.cluster.rank_env import detect, setup_horovod; setup_horovod(detect()); "
        "import horovod.tensorflow as hvd; hvd.init(); "
        "print(hvd.size(), hvd.gloo_enabled(), os.environ['HOROVOD_CONTROLLER'])"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "RANK", "WORLD_SIZE", "SLURM_"))}
    proc = subprocess.run(
        [interpreter("tensorflow"), "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(clean, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert proc.returncode == 0 and proc.stdout.split() == ["1", "True", "gloo"], proc.stderr[-2000:]


def fake_net(tmp_path, links):
    """A /sys/class/net tree: {interface: (operstate, speed file text)}."""
    for name, (state, speed) in links.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "operstate").write_text(state + "\n")
        (tmp_path / name / "speed").write_text(speed + "\n")
    return tmp_path


@pytest.mark.unit
def test_a_faster_interface_up_beside_the_chosen_one_is_a_preflight_warning_and_recorded(tmp_path):
    """Issue 52 item 9: the route to the peers is a 1 GbE management LAN while a 100 Gb/s interface
    is up; a down one, one without an address and one whose speed is unknown are not named."""
    from workflow_scripts.preflight.rank import socket_row
    from workflow_scripts.results.runs import socket_text

    addrs = {**ADDRS, "ens2": "10.3.0.5", "ens3": "10.4.0.5", "ens4": "10.5.0.5"}
    root = fake_net(
        tmp_path,
        {
            "lo": ("unknown", "-1"),
            "eth0": ("up", "1000"),
            "ib0": ("up", "100000"),
            "ens2": ("down", "25000"),
            "ens3": ("up", "-1"),
            "ens4": ("up", "10000"),
            "docker0": ("up", "40000"),
        },
    )
    env = {"NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0"}
    link = netif.describe(env, addrs, root)
    assert link == {"name": "eth0", "speed_mbps": 1000, "faster_up": {"ib0": 100000, "ens4": 10000}}
    r = socket_row(env, addrs, root)
    assert r["status"] == "warning" and r["figure"] == "eth0: 1 Gb/s" and r["value"] == 1000
    assert "while ib0 (100 Gb/s), ens4 (10 Gb/s) are up" in r["cause"] and netif.KEY in r["fix"]
    assert socket_text(link) == "eth0 1 Gb/s; faster up: ib0 100 Gb/s, ens4 10 Gb/s"
    # the fastest chosen: ok, its speed recorded
    fast = {"NCCL_SOCKET_IFNAME": "=ib0"}
    assert (
        socket_row(fast, addrs, root)["status"] == "ok"
        and socket_text(netif.describe(fast, addrs, root)) == "ib0 100 Gb/s"
    )
    # a speed the driver does not report: no comparison, said
    vm = {"NCCL_SOCKET_IFNAME": "=ens3"}
    assert socket_row(vm, addrs, root)["figure"] == "ens3: speed not reported"
    # one node (nothing given), or a site's prefix/exclusion list: no one interface to judge
    for site in ({}, {"NCCL_SOCKET_IFNAME": "^docker,lo"}, {"NCCL_SOCKET_IFNAME": "eth,ib"}):
        assert socket_row(site, addrs, root)["status"] == "not applicable" and netif.describe(site, addrs, root) == {}


@pytest.mark.unit
def test_a_launcher_outside_the_nodes_leaves_each_node_to_route_to_the_others(monkeypatch):
    """salloc on a login node starts the launcher there: its own interface and subnet say nothing of
    the nodes' (a test cluster's host on 192.0.2.0/24, its nodes on 10.88.7.0/24 met that), so the
    ranks are given the nodes instead, and each node takes the interface its route to the others
    leaves from."""
    monkeypatch.setattr(netif, "interfaces", lambda: {"lo": "127.0.0.1", "eth0": "192.0.2.2"})
    monkeypatch.setattr(netif, "networks", lambda: {"lo": "127.0.0.1/8", "eth0": "192.0.2.2/24"})
    monkeypatch.setattr(netif, "resolve", lambda host: [])
    monkeypatch.setattr(netif, "route_source", lambda ip: "192.0.2.2")
    a = launcher.argparse.Namespace(network_interface="auto")
    extra = launcher.network_env(a, ["n1", "n2"], {}, here="login1")[2]
    assert netif.FIRST_NET not in extra and extra[netif.PEERS] == "n1,n2"
    n1 = {"lo": "127.0.0.1/8", "eth0": "10.88.7.1/24"}
    env = dict(extra)
    found = netif.own_interface(
        env,
        n1,
        route=lambda ip: "10.88.7.1" if ip.startswith("10.88.7.") else None,
        resolve=lambda h: {"n2": ["10.88.7.2"]}.get(h, []),
    )
    assert found[:2] == ("eth0", "10.88.7.1") and env["NCCL_SOCKET_IFNAME"] == "=eth0"
    # on the run's first node the launcher's own choice stands for the others, as before
    assert netif.FIRST_NET in launcher.network_env(a, ["login1", "n2"], {}, here="login1")[2]
