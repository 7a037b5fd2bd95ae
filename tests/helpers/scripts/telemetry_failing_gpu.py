"""Run the node telemetry against an NVML source whose second GPU cannot be opened and whose
readings fail once each way, with nvidia-ml-py's own error classes. Prints JSON: the GPUs left
out, the CSV's rows per sample and what the sampler logged.

Why a stand-in for NVML: what is under test is our handling of a failing handle or reading;
NVML itself needs a driver and a GPU, which this machine lacks (nvmlInit fails here). The source
raises the exceptions pynvml raises for those faults (NVMLError_NoPermission for a device that
a cgroup denies, NVMLError_Unknown for a failed reading), and an error of another kind once, to
reach the sampler loop's own guard.
"""

import contextlib
import csv
import io
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pynvml

from workflow_scripts.cluster.telemetry import Telemetry


class PartlyDeniedNvml:
    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported

    def __init__(self):
        self.calls = defaultdict(int)

    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return 3

    def nvmlDeviceGetHandleByIndex(self, i):
        if i == 1:  # a device cgroup that does not allow this GPU
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
        return f"handle{i}"

    def nvmlDeviceGetUtilizationRates(self, h):
        self.calls["util", h] += 1
        if h == "handle0" and self.calls["util", h] == 2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
        return SimpleNamespace(gpu=50)

    def nvmlDeviceGetMemoryInfo(self, h):
        self.calls["mem", h] += 1
        if h == "handle2" and self.calls["mem", h] == 4:
            raise RuntimeError("an error NVML's bindings do not raise")
        return SimpleNamespace(used=2**30)

    def nvmlDeviceGetPowerUsage(self, h):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)


def samples(path):
    """[{(device, metric)}] per sample time, in order."""
    by_time = defaultdict(set)
    with open(path) as f:
        for row in csv.DictReader(f):
            by_time[float(row["time_s"])].add((row["device"], row["metric"]))
    return [by_time[t] for t in sorted(by_time)]


source = PartlyDeniedNvml()
out = Path(tempfile.mkdtemp()) / "telemetry.csv"
log = io.StringIO()
with contextlib.redirect_stderr(log):
    tel = Telemetry(out, None, interval=0.01, nvml=source)
    tel.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not out.exists() or len(samples(out)) < 8):
        time.sleep(0.05)
    alive = tel.is_alive()
    tel.stop()
got = samples(out)
print(
    json.dumps(
        {
            "failed": tel.gpus.failed,
            "alive_before_stop": alive,
            "mem_calls_gpu2": source.calls["mem", "handle2"],
            "samples": [sorted(f"{d}/{m}" for d, m in s if d.startswith("gpu")) for s in got],
            "log": log.getvalue(),
        }
    )
)
sys.exit(0)
