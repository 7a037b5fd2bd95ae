"""A throw-away SLURM cluster on this machine, for the tests and the GPU benchmark
(benchmarks/slurm_gpu.py): slurmctld and one slurmd per node (n1, n2 by default) from Debian's
packages, munge for authentication, no accounting database.

Debian's packages are either installed (the tests: apt-get) or, on a machine without a package
registry, unpacked from carried .debs under a folder of their own (`unpack`, `prefix=`), with only
the libraries the machine lacks on LD_LIBRARY_PATH. A node may hold GPUs (`gres=`): gres.conf lists
its device files, so SLURM sets each task's CUDA_VISIBLE_DEVICES from what the job asked for.

Each slurmd runs in a network namespace of its own (its "host", on a bridge with slurmctld), with
its own hostname and its own /etc/hosts (a bind mount in a private mount namespace), so the jobs
on n1 and n2 see two hosts that reach each other over a network, and the machine's own network
configuration and /etc/hosts are left alone. Nothing is started through systemd (there is none);
everything is stopped by PID. Needs root, unshare/nsenter and `ip netns`.
"""

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PACKAGES = ("munge", "slurmctld", "slurmd", "slurm-client")
SLURM_CONF = Path("/etc/slurm/slurm.conf")  # where srun inside a job step looks (SLURM_CONF is stripped there)
MARK = "# dlscale test cluster"
SUBNET = "10.88.7"
CTL_ADDR = f"{SUBNET}.254"
BRIDGE = "dlsbr0"
PARTITION = "dlscale"
CTL_PORT, NODE_PORT = 16817, 16818


def missing_prerequisites():
    """Why this machine cannot host the cluster, or None."""
    if os.geteuid() != 0:
        return "the SLURM test cluster needs root (network namespaces, daemons, apt-get)"
    for tool in ("unshare", "nsenter", "ip"):
        if not shutil.which(tool):
            return f"the SLURM test cluster needs `{tool}` (util-linux / iproute2)"
    probe = subprocess.run(["ip", "netns", "add", "dls-probe"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"`ip netns add` is not permitted here: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", "dls-probe"], capture_output=True)
    if SLURM_CONF.exists() and MARK not in SLURM_CONF.read_text():
        return f"{SLURM_CONF} belongs to a real SLURM installation; the test cluster will not replace it"
    return None


def _sh(*cmd, check=True, timeout=120, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stdout}{proc.stderr}")
    return proc


def unpack(debs, prefix):
    """Debian's .debs in `debs` unpacked under `prefix` (never into /); -> the environment that runs
    them: PATH, SLURM's and munge's libraries, and only those of their libraries this machine lacks."""
    prefix, extra = Path(prefix), Path(prefix) / "extra"
    shutil.rmtree(prefix, ignore_errors=True)
    extra.mkdir(parents=True)
    for deb in sorted(Path(debs).glob("*.deb")):
        _sh("dpkg", "-x", str(deb), str(prefix))
    sbin = prefix / "usr" / "sbin"
    # Debian names the daemons *-wlm (update-alternatives makes the plain names at install).
    for name in ("slurmd", "slurmctld", "slurmstepd"):
        if (sbin / f"{name}-wlm").exists():
            (sbin / name).unlink(missing_ok=True)
            (sbin / name).symlink_to(f"{name}-wlm")
    binaries = [*sbin.iterdir(), *(prefix / "usr" / "bin").iterdir(), *prefix.glob("usr/lib/*/slurm-wlm/*.so")]
    binaries += [p for d in ("bin", "sbin") if (prefix / d).is_dir() for p in (prefix / d).iterdir()]
    missing = set()
    for b in binaries:
        out = subprocess.run(["ldd", str(b)], capture_output=True, text=True).stdout
        missing |= {line.split()[0] for line in out.splitlines() if "not found" in line}
    for lib in sorted(missing):
        found = next(prefix.rglob(lib), None)
        if found is None:
            raise RuntimeError(f"{lib}, which SLURM or munge needs, is in none of the .debs in {debs}")
        (extra / lib).symlink_to(found)
    return {
        # the machine's own tools first: the .debs fill in only what it lacks (iproute2's `ip`, say)
        "PATH": f"{os.environ.get('PATH', '')}:{prefix}/usr/bin:{sbin}:{prefix}/bin:{prefix}/sbin",
        "LD_LIBRARY_PATH": str(extra),
    }


def install_packages():
    have = subprocess.run(["dpkg-query", "-W", "-f=${Status}\n", *PACKAGES], capture_output=True, text=True)
    if have.returncode == 0 and have.stdout.count("install ok installed") == len(PACKAGES):
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    _sh("apt-get", "update", "-qq", timeout=600, env=env)
    _sh("apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES, timeout=900, env=env)


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except (ProcessLookupError, TypeError):
        return False


def _stop_pid(pid, timeout=15):
    if not pid or not _alive(pid):
        return
    os.kill(pid, 15)
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            pass
        if not _alive(pid):
            return
        time.sleep(0.2)
    os.kill(pid, 9)


class Cluster:
    def __init__(self, nodes=("n1", "n2"), cpus=2, memory_mb=12000, task_plugin="task/none", prefix=None, gres=None):
        """task_plugin: task/none binds nothing (every task sees the node's CPUs); task/affinity binds
        each task to its --cpus-per-task CPUs, as a production cluster does. prefix: where `unpack`
        put Debian's packages (None: installed with apt-get). gres: {node: (GPU type, [device
        files])}, e.g. {"n1": ("h100", ["/dev/nvidia0"])}."""
        self.nodes, self.cpus, self.memory_mb, self.task_plugin = nodes, cpus, memory_mb, task_plugin
        self.prefix, self.gres = prefix, gres or {}
        self.sbin = f"{prefix}/usr/sbin" if prefix else "/usr/sbin"
        self.base = Path(tempfile.mkdtemp(prefix="dlscale-slurm-", dir="/var/tmp"))
        self.base.chmod(0o755)  # munged runs as user munge and must reach its directory
        self.ctl_host = socket.gethostname().split(".")[0]
        self.started = []  # (name, pid) in start order

    # ------------------------------------------------------------------ layout
    def path(self, *parts):
        p = self.base.joinpath(*parts)
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def addr(self, i):
        return f"{SUBNET}.{i + 1}"

    def slurm_conf(self):
        b = self.base
        lines = [
            MARK,
            "ClusterName=dlscale-test",
            f"SlurmctldHost={self.ctl_host}({CTL_ADDR})",
            f"SlurmctldPort={CTL_PORT}",
            f"SlurmdPort={NODE_PORT}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            f"AuthInfo=socket={b}/munge/munge.socket",
            "CryptoType=crypto/munge",
            # No cgroups here: track processes by parentage; bind tasks to CPUs only where asked.
            "ProctrackType=proctrack/linuxproc",
            f"TaskPlugin={self.task_plugin}",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "SchedulerType=sched/backfill",
            "ReturnToService=2",
            # Finished jobs stay visible to squeue, which the executor plugin polls without slurmdbd.
            "MinJobAge=300",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            f"StateSaveLocation={b}/state/ctld",
            f"SlurmdSpoolDir={b}/state/%n",
            f"SlurmctldPidFile={b}/run/slurmctld.pid",
            f"SlurmdPidFile={b}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={b}/log/slurmctld.log",
            f"SlurmdLogFile={b}/log/slurmd-%n.log",
        ]
        if self.prefix:
            lines.append(f"PluginDir={next(Path(self.prefix).glob('usr/lib/*/slurm-wlm'))}")
        if self.gres:
            lines.append("GresTypes=gpu")
        for i, n in enumerate(self.nodes):
            gres = f" Gres=gpu:{self.gres[n][0]}:{len(self.gres[n][1])}" if n in self.gres else ""
            lines.append(
                f"NodeName={n} NodeAddr={self.addr(i)} CPUs={self.cpus} RealMemory={self.memory_mb}{gres} State=UNKNOWN"
            )
        lines.append(f"PartitionName={PARTITION} Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP")
        return "\n".join(lines) + "\n"

    def gres_conf(self):
        return "".join(
            f"NodeName={n} Name=gpu Type={t} File={f}\n" for n, (t, files) in self.gres.items() for f in files
        )

    # ------------------------------------------------------------------ start
    def start(self):
        if self.prefix:
            self._unpacked()
        else:
            install_packages()
        for d in ("state/ctld", "run", "log", *(f"state/{n}" for n in self.nodes)):
            self.path(d).mkdir(parents=True, exist_ok=True)
        self._network()
        SLURM_CONF.parent.mkdir(parents=True, exist_ok=True)
        SLURM_CONF.write_text(self.slurm_conf())
        if self.gres:
            (SLURM_CONF.parent / "gres.conf").write_text(self.gres_conf())
        self._munge()
        _sh(f"{self.sbin}/slurmctld", "-i")
        self._remember("slurmctld", self.path("run", "slurmctld.pid"))
        hosts = self.path("hosts")
        hosts.write_text(
            "127.0.0.1 localhost\n"
            + "".join(f"{self.addr(i)} {n}\n" for i, n in enumerate(self.nodes))
            + f"{CTL_ADDR} {self.ctl_host}\n"
        )
        for n in self.nodes:
            inner = f"mount --bind {hosts} /etc/hosts && hostname {n} && exec {self.sbin}/slurmd -N {n}"
            _sh(
                "nsenter",
                f"--net=/run/netns/dls-{n}",
                "unshare",
                "--mount",
                "--uts",
                "--propagation",
                "private",
                "sh",
                "-c",
                inner,
            )
            self._remember(f"slurmd-{n}", self.path("run", f"slurmd-{n}.pid"))
        self.wait_idle()
        return self

    def _unpacked(self):
        """What Debian's installed packages would have set up: the munge user, the compiled-in
        /usr/sbin/slurmstepd that slurmd runs, and (slurmd starts its cgroup/v2 plugin whatever the
        task plugin) a cgroup.conf for a machine without systemd."""
        if subprocess.run(["id", "munge"], capture_output=True).returncode:
            _sh("useradd", "-r", "-s", "/usr/sbin/nologin", "munge")
        stepd = Path("/usr/sbin/slurmstepd")
        if not stepd.exists() or MARK in stepd.read_text(errors="replace"):
            lib = os.environ.get("LD_LIBRARY_PATH", "")
            stepd.write_text(f'#!/bin/sh\n{MARK}\nLD_LIBRARY_PATH={lib} exec {self.sbin}/slurmstepd-wlm "$@"\n')
            stepd.chmod(0o755)
        SLURM_CONF.parent.mkdir(parents=True, exist_ok=True)
        (SLURM_CONF.parent / "cgroup.conf").write_text(f"{MARK}\nIgnoreSystemd=yes\nCgroupAutomount=yes\n")
        Path("/sys/fs/cgroup/system.slice").mkdir(exist_ok=True)

    def _remember(self, name, pidfile, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if pidfile.exists() and pidfile.read_text().strip():
                self.started.append((name, int(pidfile.read_text())))
                return
            time.sleep(0.2)
        raise RuntimeError(f"{name} wrote no pid file {pidfile}:\n{self.logs()}")

    def _network(self):
        self._unplug()  # whatever a killed earlier run left behind
        _sh("ip", "link", "add", BRIDGE, "type", "bridge")
        _sh("ip", "addr", "add", f"{CTL_ADDR}/24", "dev", BRIDGE)
        _sh("ip", "link", "set", BRIDGE, "up")
        for i, n in enumerate(self.nodes):
            ns, veth = f"dls-{n}", f"dlsv{i + 1}"
            _sh("ip", "netns", "add", ns)
            _sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _sh("ip", "link", "set", veth, "master", BRIDGE, "up")
            _sh("ip", "-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", "eth0")
            _sh("ip", "-n", ns, "link", "set", "eth0", "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")

    def _munge(self):
        d = self.path("munge")
        d.mkdir(exist_ok=True)
        key = d / "munge.key"
        key.write_bytes(os.urandom(1024))
        shutil.chown(d, "munge", "munge")
        shutil.chown(key, "munge", "munge")
        d.chmod(0o755)  # munged insists that clients can reach its socket
        key.chmod(0o400)
        _sh(
            "runuser",
            "-u",
            "munge",
            "--",
            f"{self.sbin}/munged",
            f"--socket={d}/munge.socket",
            f"--key-file={key}",
            f"--pid-file={d}/munged.pid",
            f"--log-file={d}/munged.log",
            f"--seed-file={d}/munged.seed",
        )
        self._remember("munged", d / "munged.pid")

    def wait_idle(self, timeout=90):
        deadline = time.time() + timeout
        while time.time() < deadline:
            out = _sh("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout.split()
            states = dict(zip(out[::2], out[1::2]))
            if all(states.get(n) == "idle" for n in self.nodes):
                return
            time.sleep(1)
        raise RuntimeError(f"nodes not idle after {timeout}s: {states}\n{self.logs()}")

    def logs(self, tail=30):
        out = []
        for f in sorted(self.base.glob("log/*.log")) + [self.base / "munge" / "munged.log"]:
            if f.exists():
                out.append(f"== {f.name}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-tail:]))
        return "\n".join(out)

    # ------------------------------------------------------------------ stop
    def stop(self):
        """Cancel the jobs, then stop by PID, in reverse order: whatever a job left in a node's
        namespaces, each slurmd, slurmctld, munged; then the namespaces and the bridge."""
        pids = dict(self.started)
        if _alive(pids.get("slurmctld")):
            jobs = _sh("squeue", "-h", "-o", "%i", check=False, timeout=20).stdout.split()
            if jobs:
                _sh("scancel", *jobs, check=False, timeout=20)
                time.sleep(2)
        for name, pid in reversed(self.started):
            if name.startswith("slurmd-") and _alive(pid):
                for stray in self._same_uts(pid):
                    _stop_pid(stray, timeout=5)
            _stop_pid(pid)
        self.started.clear()
        self._unplug()
        if SLURM_CONF.exists() and MARK in SLURM_CONF.read_text():
            SLURM_CONF.unlink()
            for f in ("gres.conf", "cgroup.conf"):
                (SLURM_CONF.parent / f).unlink(missing_ok=True)
        shutil.rmtree(self.base, ignore_errors=True)

    def _unplug(self):
        for i, n in enumerate(self.nodes):
            subprocess.run(["ip", "link", "del", f"dlsv{i + 1}"], capture_output=True)
            subprocess.run(["ip", "netns", "del", f"dls-{n}"], capture_output=True)
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)

    @staticmethod
    def _same_uts(pid):
        """Other processes in the UTS namespace of `pid` (a node's jobs, started by its slurmd)."""
        try:
            ns = os.readlink(f"/proc/{pid}/ns/uts")
        except OSError:
            return []
        if ns == os.readlink("/proc/self/ns/uts"):
            return []
        found = []
        for p in Path("/proc").iterdir():
            if p.name.isdigit() and int(p.name) != pid:
                try:
                    if os.readlink(p / "ns" / "uts") == ns:
                        found.append(int(p.name))
                except OSError:
                    pass
        return found
