"""Per-node telemetry during a run (the study's Fig. 7 and 8; the Brookhaven paper's Fig. 7).

At a fixed interval: read MB/s of the file system the dataset lives on, from its own counters
(Lustre, NFS, GPFS, CephFS or a block device; none where it has none: storage_probe.py), send and
receive MB/s per network interface (and per InfiniBand port, from its counters under
/sys/class/infiniband), CPU utilisation and steal (time a virtual machine's CPUs waited for the
hypervisor), and GPU utilisation, memory, power, SM clock and the
clock's limiters (NVML's bit mask) through NVML where a GPU exists. One CSV per node per run, long format:
time_s, node, metric, device, value.
"""

import csv
import json
import socket
import sys
import threading
import time
import traceback
from pathlib import Path

import psutil

from ..common.atomic import write_json
from .neighbours import NodeSampler
from .storage_probe import StorageProbe

IB_ROOT = Path("/sys/class/infiniband")
NET_ROOT = Path("/sys/class/net")
ARPHRD_INFINIBAND = "32"


def uncounted_nics(root=NET_ROOT):
    """{interface: why} of the interfaces whose bytes another series counts already, so that a
    node's sends are summed once per physical port: virtual ones (a bond, whose slaves are counted,
    a VLAN over its parent, a bridge, loopback) have no device of their own; IPoIB interfaces are
    counted by their HCA's port counters (the ib: series)."""
    out = {}
    for nic in sorted(Path(root).glob("*")):
        try:
            kind = (nic / "type").read_text().strip()
        except OSError:
            continue
        if not (nic / "device").exists():
            out[nic.name] = "virtual (a bond, VLAN, bridge or loopback): its traffic is its ports'"
        elif kind == ARPHRD_INFINIBAND:
            out[nic.name] = "IPoIB: its HCA's port counters (ib:) count its bytes"
    return out


def _ib_counters():
    """{'mlx5_0/1': (xmit bytes, rcv bytes)}; the port counters count 4-byte words."""
    out = {}
    for port in IB_ROOT.glob("*/ports/*"):
        c = port / "counters"
        try:
            out[f"{port.parent.parent.name}/{port.name}"] = (
                int((c / "port_xmit_data").read_text()) * 4,
                int((c / "port_rcv_data").read_text()) * 4,
            )
        except (OSError, ValueError):
            continue
    return out


def _log(message):
    # The ranks' stderr is the run's log (train/training_job.py).
    print(f"telemetry: {message}", file=sys.stderr, flush=True)


class Gpus:
    """GPU rows through NVML. `nvml` is the pynvml module (the default) or any object with its
    functions, constants and NVMLError. Each GPU's handle is opened on its own: on a shared node a
    device cgroup can deny some GPUs, and those are logged and left out while the others are
    sampled. A failed reading loses that reading only."""

    def __init__(self, nvml=None):
        self.handles, self.failed, self._logged = {}, {}, set()
        try:
            if nvml is None:
                import pynvml as nvml
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
            self.nvml, self.unavailable = nvml, None
        except Exception as exc:  # no nvidia-ml-py, NVML library, driver or GPU: nothing to sample
            self.nvml, self.unavailable = None, f"{type(exc).__name__}: {exc}"
            count = 0
        for i in range(count):
            try:
                self.handles[i] = nvml.nvmlDeviceGetHandleByIndex(i)
            except Exception as exc:
                self.failed[i] = f"{type(exc).__name__}: {exc}"
                _log(f"gpu{i}: no NVML handle ({self.failed[i]}); its rows are left out, the other GPUs are sampled")
        self._violations = {}  # (gpu, policy) -> (monotonic s, NVML's cumulative violation ns)

    def _read(self, gpu, metric, read):
        """read() or None; an error other than "not supported" is logged once per GPU, metric and kind."""
        try:
            return read()
        except (self.nvml.NVMLError, AttributeError) as exc:
            # Not supported on this GPU, driver or nvidia-ml-py: expected, and the same every sample.
            not_supported = getattr(self.nvml, "NVMLError_NotSupported", ())
            if isinstance(exc, AttributeError) or (not_supported and isinstance(exc, not_supported)):
                return None
            key = (gpu, metric, type(exc).__name__)
            if key not in self._logged:
                self._logged.add(key)
                _log(f"{gpu}: reading {metric} failed ({type(exc).__name__}: {exc}); that reading is lost")
            return None

    def sample(self):
        """(device, metric, value) rows. Power, clocks, temperatures, the clock's limiters and the
        time spent limited say whether a step ran slower because the GPU lowered its clock (e.g.
        at its power cap, or its memory too hot)."""
        nvml = self.nvml
        for i, h in self.handles.items():
            gpu = f"gpu{i}"
            # nvidia-ml-py 12.535 renamed the limiters' call (throttle reasons -> clocks event reasons)
            limiters = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
                nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
            )
            for metric, read in (
                ("gpu_util_percent", lambda: nvml.nvmlDeviceGetUtilizationRates(h).gpu),
                ("gpu_mem_MB", lambda: nvml.nvmlDeviceGetMemoryInfo(h).used / 2**20),
                ("gpu_power_W", lambda: nvml.nvmlDeviceGetPowerUsage(h) / 1000),
                ("gpu_sm_clock_MHz", lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)),
                ("gpu_mem_clock_MHz", lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM)),
                ("gpu_clock_limiters", lambda: limiters(h) if limiters else None),
                ("gpu_temp_C", lambda: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)),
                ("gpu_mem_temp_C", lambda: self._field(h, nvml.NVML_FI_DEV_MEMORY_TEMP)),
            ):
                value = self._read(gpu, metric, read)
                if value is not None:
                    yield gpu, metric, value
            # NVML counts the time the clocks were held down by the power cap or by heat: a limit
            # shorter than the interval shows here as a share of it, where the sampled clock misses it.
            for name in ("power", "thermal"):
                ns = self._read(
                    gpu,
                    f"gpu_{name}_limited_percent",
                    lambda: (
                        nvml.nvmlDeviceGetViolationStatus(
                            h, getattr(nvml, f"NVML_PERF_POLICY_{name.upper()}")
                        ).violationTime
                    ),
                )
                if ns is None:
                    continue
                now, before = time.monotonic(), self._violations.get((i, name))
                self._violations[(i, name)] = (now, ns)
                if before and now > before[0]:
                    yield gpu, f"gpu_{name}_limited_percent", 100 * (ns - before[1]) / 1e9 / (now - before[0])

    def _field(self, handle, field):
        value = self.nvml.nvmlDeviceGetFieldValues(handle, [field])[0]
        if value.nvmlReturn != 0:
            raise self.nvml.NVMLError(value.nvmlReturn)
        return value.value.uiVal


class Telemetry(threading.Thread):
    """Samples every `interval` seconds into `csv_path` until stop()."""

    def __init__(self, csv_path, dataset_path=None, interval=1.0, nvml=None):
        super().__init__(daemon=True)
        self.csv_path, self.interval = Path(csv_path), interval
        self.storage = StorageProbe(dataset_path)
        self.gpus = Gpus(nvml)
        self.node = socket.gethostname()
        # What else used the node meanwhile (cluster/neighbours.py), one JSON line per sample beside the CSV.
        self.neighbours = NodeSampler(gpus=self.gpus)
        node_part = self.csv_path.stem.removeprefix("telemetry.")
        self.neighbours_path = self.csv_path.with_name(f"neighbours.{node_part}.jsonl")
        self._halt = threading.Event()
        self.origin = None  # time.perf_counter() at the samples' time 0: steps' t_end - origin is their time_s

    def _snapshot(self):
        return (time.perf_counter(), self.storage.read_bytes(), psutil.net_io_counters(pernic=True), _ib_counters())

    def meta_path(self):
        """telemetry.<node>.json beside the CSV: what the series measure and where their clock starts."""
        return self.csv_path.with_suffix(".json")

    def run(self):
        self.csv_path.parent.mkdir(parents=True, exist_ok=True)
        t0 = self.origin = time.perf_counter()
        # time_s = 0 as wall-clock time: series of several nodes (each with its own perf_counter) and the
        # steps of rank 0 meet on it.
        meta = {"node": self.node, "wall_origin": time.time(), "interval": self.interval}
        write_json(
            self.meta_path(), {**meta, "storage": self.storage.describe(), "network_not_counted": uncounted_nics()}
        )
        psutil.cpu_percent(None)
        psutil.cpu_times_percent(None)
        with open(self.csv_path, "w", newline="") as f, open(self.neighbours_path, "w") as nf:
            w = csv.writer(f)
            w.writerow(["time_s", "node", "metric", "device", "value"])
            prev, logged = self._snapshot(), set()
            self._neighbours(nf, logged)  # the baseline the first interval is counted from
            while not self._halt.wait(self.interval):
                self._neighbours(nf, logged)
                # A sample that fails is logged and skipped; the next one is taken against the last
                # good snapshot, so the thread outlives an unexpected error.
                try:
                    cur = self._snapshot()
                    rows = self._rows(prev, cur, t0)
                except Exception:
                    self._failed(logged)
                    continue
                w.writerows(rows)
                f.flush()
                prev = cur
            self._neighbours(nf, logged)  # the part of an interval between the last sample and stop()

    def _failed(self, logged):
        exc = sys.exc_info()[1]
        key = (type(exc).__name__, str(exc))
        if key not in logged:
            logged.add(key)
            _log(f"a sample failed and is skipped:\n{traceback.format_exc().rstrip()}")

    def _neighbours(self, f, logged):
        try:
            line = self.neighbours.sample()
        except Exception:
            self._failed(logged)
            return
        f.write(json.dumps(line) + "\n")
        f.flush()

    def _rows(self, prev, cur, t0):
        dt = cur[0] - prev[0]
        t = round(cur[0] - t0, 3)
        rows = [
            # none where the dataset's file system has no counter this can read (storage.describe() says why)
            *(
                [
                    (
                        t,
                        self.node,
                        "read_MBps",
                        f"{self.storage.kind}:{self.storage.device}",
                        (cur[1] - prev[1]) / dt / 1e6,
                    )
                ]
                if cur[1] is not None and prev[1] is not None
                else []
            ),
            (t, self.node, "cpu_percent", "all", psutil.cpu_percent(None)),
            # On a virtual machine: the time its CPUs were ready but the hypervisor ran others.
            (t, self.node, "cpu_steal_percent", "all", getattr(psutil.cpu_times_percent(None), "steal", 0.0)),
        ]
        for nic, c in cur[2].items():
            if nic in prev[2]:
                rows.append((t, self.node, "send_MBps", nic, (c.bytes_sent - prev[2][nic].bytes_sent) / dt / 1e6))
                rows.append((t, self.node, "recv_MBps", nic, (c.bytes_recv - prev[2][nic].bytes_recv) / dt / 1e6))
        for port, (tx, rx) in cur[3].items():
            if port in prev[3]:
                rows.append((t, self.node, "send_MBps", f"ib:{port}", (tx - prev[3][port][0]) / dt / 1e6))
                rows.append((t, self.node, "recv_MBps", f"ib:{port}", (rx - prev[3][port][1]) / dt / 1e6))
        return rows + [(t, self.node, metric, gpu, value) for gpu, metric, value in self.gpus.sample()]

    def stop(self):
        self._halt.set()
        self.join(timeout=10)
