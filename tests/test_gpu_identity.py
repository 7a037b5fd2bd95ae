"""NVML is asked about the GPU CUDA numbers i by its identity, not by i, and a GPU's near CPUs are
read from NVML, else sysfs (cluster/gpu_identity.py). No GPU here: the made-up DGX of
helpers/gpu_layout.py, a fake pynvml and a fake CUDA driver."""

import sys
import types

import pytest
from helpers.gpu_layout import BUS, NEAR, SOCKET0, SOCKET1, UUID, block, launch, no_driver

from workflow_scripts.cluster import gpu_choice, gpu_identity, kernel_check

pytestmark = pytest.mark.unit


def nvml_list(hidden=()):
    return [
        {"index": i, "error": "Insufficient Permissions"}
        if i in hidden
        else {"index": i, "uuid": UUID[i], "bus_id": BUS[i], "cpus": NEAR[i], "mig": [f"MIG-{i}{i}-a", f"MIG-{i}{i}-b"]}
        for i in range(8)
    ]


@pytest.mark.parametrize(
    "value, hidden, want",
    [
        (None, (), list(range(8))),  # unset: every GPU, in NVML's (PCI bus) order
        ("3,1", (), [3, 1]),  # indices, reordered
        (f"{UUID[6]},{UUID[2][:12]}", (), [6, 2]),  # UUIDs, and a unique prefix
        ("MIG-55-b", (), [5]),  # a MIG device: its GPU
        (f"MIG-{UUID[4]}/1/0", (), [4]),  # the old MIG-GPU-<uuid>/<gi>/<ci> form
        ("0,1", (0, 1, 2, 3, 4, 5), [6, 7]),  # a device cgroup: positions among the GPUs it lets through
        ("2,9,0", (), [2]),  # CUDA stops at the first entry that names no GPU
        ("1,1", (), [1]),  # ... or one already named
        ("", (), []),
    ],
)
def test_cuda_visible_devices_maps_to_the_right_nvml_gpu(value, hidden, want):
    got = gpu_identity.map_visible(gpu_identity.parse_visible(value), nvml_list(hidden))
    assert [g["index"] for g in got] == want


@pytest.fixture(autouse=True)
def node_of_224_cpus(monkeypatch):
    """NVML's affinity masks sized for the DGX-like node, not this machine."""
    monkeypatch.setattr(gpu_identity, "_mask_words", lambda: 4)


def fake_pynvml(hidden=()):
    """NVML of the DGX-like node: GPUs a device cgroup hides cannot be opened."""
    m = types.ModuleType("pynvml")
    m.NVMLError = type("NVMLError", (Exception,), {})
    m.NVML_AFFINITY_SCOPE_NODE = 0
    m.nvmlInit = m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: 8

    def handle(i):
        if i in hidden:
            raise m.NVMLError("Insufficient Permissions")
        return i

    def by_bus(bus):
        return handle(BUS.index(gpu_identity.normalize_bus_id(bus)))

    def by_uuid(u):
        return handle(UUID.index(u))

    def affinity(h, words, scope):
        out = [0] * words
        for c in NEAR[h]:
            out[c // 64] |= 1 << (c % 64)
        return out

    def no_mig(h):
        raise m.NVMLError("Not Supported")

    m.nvmlDeviceGetHandleByIndex = handle
    m.nvmlDeviceGetHandleByPciBusId = by_bus
    m.nvmlDeviceGetHandleByUUID = by_uuid
    m.nvmlDeviceGetUUID = lambda h: UUID[h]
    m.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=("0000" + BUS[h].upper()).encode())
    m.nvmlDeviceGetName = lambda h: f"NVIDIA H100 #{h}"
    m.nvmlDeviceGetCudaComputeCapability = lambda h: (9, 0)
    m.nvmlDeviceGetCpuAffinityWithinScope = affinity
    m.nvmlDeviceGetMaxMigDeviceCount = no_mig
    return m


def test_the_kernel_checks_gpu_under_a_device_cgroup_is_the_jobs_own(monkeypatch):
    """SLURM's ConstrainDevices lets the job open NVML's GPUs 6 and 7 and numbers them 0 and 1 for
    CUDA: GPU 0 of the task is NVML's 6, which NVML's index 0 (another job's) is not."""
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(hidden=range(6)))
    monkeypatch.setattr(gpu_identity, "cuda_devices", no_driver)
    env = {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert kernel_check.nvml_gpu(0, env) == ("NVIDIA H100 #6", (9, 0))
    assert kernel_check.nvml_gpu(1, env) == ("NVIDIA H100 #7", (9, 0))


def test_the_kernel_checks_gpu_is_asked_by_the_cuda_drivers_bus_id(monkeypatch):
    """With the driver's answer, its PCI bus id decides, whatever CUDA_VISIBLE_DEVICES's numbers say."""
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    monkeypatch.setattr(gpu_identity, "cuda_devices", lambda: [{"cuda_index": 0, "bus_id": BUS[5], "uuid": UUID[5]}])
    assert kernel_check.nvml_gpu(0, {"CUDA_VISIBLE_DEVICES": "0"}) == ("NVIDIA H100 #5", (9, 0))


def test_nvml_affinity_is_read_for_the_gpus_cuda_shows(monkeypatch, tmp_path):
    """CUDA_VISIBLE_DEVICES=5,0 and no driver to ask: CUDA's GPU 0 is NVML's 5, with socket 0's CPUs."""
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    monkeypatch.setattr(gpu_identity, "cuda_devices", no_driver)
    found, notes = gpu_identity.visible_gpus(env={"CUDA_VISIBLE_DEVICES": "5,0"}, root=tmp_path)
    assert [(g["cuda_index"], g["bus_id"], g["uuid"]) for g in found] == [(0, BUS[5], UUID[5]), (1, BUS[0], UUID[0])]
    assert found[0]["cpus"] == sorted(SOCKET0) and found[1]["cpus"] == sorted(SOCKET1)
    assert notes["affinity"] == "NVML" and notes["identity"].startswith("CUDA_VISIBLE_DEVICES against NVML")
    # a rank on socket 0 takes CUDA's GPU 0 (NVML's 5), though its local rank is 1
    rec = gpu_choice.choose(launch(0, 1), tmp_path, seen=2, cpus=block(1), visible=(found, notes), env={})
    assert rec["cuda_index"] == 0 and rec["bus_id"] == BUS[5] and rec["how"] == "affinity"


def test_sysfs_gives_the_affinity_where_nvml_cannot(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(gpu_identity, "cuda_devices", lambda: [{"cuda_index": 0, "bus_id": BUS[2], "uuid": None}])
    dev = tmp_path / BUS[2]
    dev.mkdir()
    (dev / "local_cpulist").write_text("56-111,168-223\n")
    (dev / "numa_node").write_text("1\n")
    found, notes = gpu_identity.visible_gpus(env={}, root=tmp_path)
    assert found[0]["cpus"] == sorted(SOCKET1) and found[0]["numa_node"] == 1
    assert notes["affinity"] == "sysfs local_cpulist" and notes["problem"] is None


def test_nvml_without_a_driver_is_a_fallback_too(monkeypatch, tmp_path):
    fake = types.ModuleType("pynvml")
    fake.NVMLError = type("NVMLError", (Exception,), {})

    def init():
        raise fake.NVMLError("Driver Not Loaded")

    fake.nvmlInit = init
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(
        gpu_identity, "cuda_devices", lambda: [{"cuda_index": 0, "bus_id": BUS[0], "uuid": UUID[0]}] * 2
    )
    found, notes = gpu_identity.visible_gpus(env={}, root=tmp_path)
    assert [g["bus_id"] for g in found] == [BUS[0]] * 2 and notes["affinity"] is None
    assert "Driver Not Loaded" in notes["problem"]
    rec = gpu_choice.choose(launch(0, 1), tmp_path, seen=2, cpus=block(0), visible=(found, notes), env={})
    assert rec["how"] == "local_rank" and rec["cuda_index"] == 0 and "Driver Not Loaded" in rec["why"]


def test_formats():
    assert gpu_identity.cpu_text([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert gpu_identity.mask_cpus([0x3, 0x3]) == [0, 1, 64, 65]
    assert gpu_identity.normalize_bus_id("00000000:1B:00.0") == "0000:1b:00.0"
    assert gpu_identity.uuid_text(bytes(range(16))) == "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"


def test_each_gpus_power_limit_and_application_clocks_are_recorded_from_nvml(monkeypatch):
    """Issue 61 item 6: the node's facts (cluster/provenance.py, written with every run) hold each
    GPU's enforced and default power limits and its application clocks and their defaults, as NVML
    gives them; a GPU a device cgroup hides is recorded with NVML's error, not the end of the run."""
    from workflow_scripts.cluster import provenance

    m = fake_pynvml(hidden=(0,))
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM = 1, 2
    m.NVMLError_NotSupported = type("NVMLError_NotSupported", (m.NVMLError,), {})
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=80 * 2**30)
    # milliwatts, as NVML counts them: GPU 3 capped at 250 W of its 700 W; GPU 5 without power management
    m.nvmlDeviceGetEnforcedPowerLimit = lambda h: {3: 250_000}.get(h, 700_000) if h != 5 else _unsupported(m)
    m.nvmlDeviceGetPowerManagementDefaultLimit = lambda h: 700_000 if h != 5 else _unsupported(m)
    m.nvmlDeviceGetApplicationsClock = lambda h, kind: {1: 1755, 2: 2619}[kind]
    m.nvmlDeviceGetDefaultApplicationsClock = lambda h, kind: {1: 1980, 2: 2619}[kind]
    m.nvmlSystemGetDriverVersion = lambda: b"550.54.15"
    m.nvmlSystemGetCudaDriverVersion = lambda: 12040
    monkeypatch.setitem(sys.modules, "pynvml", m)
    facts = provenance._gpus()
    gpus = {g["index"]: g for g in facts["gpus"]}
    assert gpus[0] == {"index": 0, "error": "Insufficient Permissions"}
    assert gpus[3]["bus_id"] == BUS[3] and gpus[3]["name"] == "NVIDIA H100 #3"
    assert (gpus[3]["power_limit_W"], gpus[3]["default_power_limit_W"]) == (250.0, 700.0)
    assert gpus[3]["app_clocks_MHz"] == {"sm": 1755, "mem": 2619}
    assert gpus[3]["default_app_clocks_MHz"] == {"sm": 1980, "mem": 2619}
    assert gpus[5]["power_limit_W"] is None and gpus[5]["default_power_limit_W"] is None
    assert (facts["driver"], facts["cuda_driver"]) == ("550.54.15", "12.4")


def _unsupported(m):
    raise m.NVMLError_NotSupported("Not Supported")
