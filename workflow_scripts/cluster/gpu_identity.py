"""Which GPU CUDA numbers i in this process, and which CPUs are near it.

Under a device cgroup or with CUDA_VISIBLE_DEVICES set, NVML's index of a GPU is not its CUDA
index. The GPU CUDA numbers i is identified by its PCI bus id from the CUDA driver itself
(cuDeviceGetPCIBusId through libcuda, which applies CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER and
the cgroup exactly as the frameworks see them), and NVML is asked by that id; where the driver
cannot be asked, CUDA_VISIBLE_DEVICES (indices, GPU-/MIG- UUIDs) is read against NVML's list
(map_visible).

A GPU's near CPUs are its NUMA node's, as NVML says (nvmlDeviceGetCpuAffinityWithinScope,
NUMA-node scope), else as the kernel does (/sys/bus/pci/devices/<bus id>/local_cpulist): the
ranks of a node are paired with GPUs by them (gpu_choice.py).

parse_visible and map_visible take plain data, so they are tested with made-up layouts
(tests/test_gpu_identity.py); cuda_devices, nvml_gpus and sysfs_affinity are the thin readers.
"""

import ctypes
import os
import re
from pathlib import Path

from .affinity import parse_cpu_list

PCI_ROOT = Path("/sys/bus/pci/devices")


# ---- plain data: formats ---------------------------------------------------------------------------


def cpu_text(cpus):
    """[0, 1, 2, 3, 8] -> '0-3,8' (the kernel's list format); '' for none."""
    out, run = [], []
    for c in sorted(set(cpus)):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def mask_cpus(words, bits=64):
    """NVML's affinity mask (unsigned 64-bit words, CPU 0 in bit 0 of the first) -> sorted CPU ids."""
    return [w * bits + b for w, word in enumerate(words) for b in range(bits) if int(word) >> b & 1]


def normalize_bus_id(text):
    """A PCI bus id as NVML ('00000000:07:00.0'), CUDA ('0000:07:00.0') or sysfs write it, in sysfs's
    form ('0000:07:00.0', lower case); None for None."""
    if not text:
        return None
    m = re.fullmatch(r"(?:([0-9a-fA-F]+):)?([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-9a-fA-F]+)", text.strip())
    if not m:
        return text.strip().lower()
    domain, bus, dev, fn = (int(g, 16) if g else 0 for g in m.groups())
    return f"{domain:04x}:{bus:02x}:{dev:02x}.{fn:x}"


def uuid_text(raw):
    """CUDA's 16-byte UUID -> 'GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx' (as nvidia-smi and NVML)."""
    h = bytes(raw).hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


# A memory size in a GPU's marketing name: "-16GB", " 80GB", "-32G"
_MEMORY = re.compile(r"[-_ ]?\d+\s*G(?:i?B)?\b", re.I)


def study_model(name):
    """A GPU's model as the study tells models apart: its name without the memory size, in one
    spelling. The V100-SXM2's 16 GB and 32 GB boards have one chip, clocks and memory bandwidth,
    so their figures are one model's; V100-PCIE against V100-SXM2 (the study's own comparison) or
    A100 against V100 stay two. 'Tesla V100-SXM2-32GB' and 'Tesla V100-SXM2-16GB' ->
    'tesla v100 sxm2'; 'NVIDIA A100 80GB PCIe' and 'NVIDIA A100-PCIE-40GB' -> 'nvidia a100 pcie'."""
    return " ".join(re.split(r"[-_ ]+", _MEMORY.sub("", str(name or "")).strip().lower()))


# ---- plain data: which NVML GPU is CUDA index i ------------------------------------------------------


def parse_visible(value):
    """CUDA_VISIBLE_DEVICES as the list of its entries; None when unset (every GPU visible)."""
    if value is None:
        return None
    return [t.strip() for t in value.split(",") if t.strip()]


def map_visible(visible, nvml):
    """The NVML GPUs CUDA numbers 0, 1, ..., through CUDA_VISIBLE_DEVICES (parse_visible's list;
    None: unset), where the CUDA driver cannot be asked itself.

    nvml: NVML's GPUs in its own order (PCI bus order), dicts with 'uuid' and optionally 'mig' (the
    UUIDs of its MIG devices) and 'error' (NVML cannot open it: a device cgroup hides it, and so
    does it from CUDA). CUDA numbers the GPUs this process can open in the same order (PCI bus
    order; CUDA_DEVICE_ORDER=FASTEST_FIRST, CUDA's default, orders a node of one GPU model alike),
    so an index entry is a position among the openable GPUs, not NVML's index: under SLURM's
    ConstrainDevices, CUDA_VISIBLE_DEVICES=0 is the job's first GPU whatever NVML numbers it. A
    UUID entry (GPU-..., a unique prefix as CUDA accepts) or a MIG device (MIG-<uuid>, or the old
    MIG-GPU-<uuid>/<gi>/<ci>) names its GPU. As CUDA does, the list ends at the first entry that
    names no GPU (or one already named)."""
    usable = [g for g in nvml if not g.get("error")]
    if visible is None:
        return list(usable)
    out = []
    for token in visible:
        if token.isdigit():
            if int(token) >= len(usable):
                break
            gpu = usable[int(token)]
        else:
            key = token.lower()
            if key.startswith("mig-gpu-"):  # MIG-GPU-<uuid>/<gi>/<ci>: the GPU's own UUID
                key = key[len("mig-") :].split("/")[0]
            found = [
                g
                for g in usable
                if (g.get("uuid") or "").lower().startswith(key)
                or any(m.lower().startswith(key) for m in g.get("mig") or ())
            ]
            if len(found) != 1:
                break
            gpu = found[0]
        if any(gpu is g for g in out):
            break
        out.append(gpu)
    return out


# ---- the readers -------------------------------------------------------------------------------------


def cuda_devices(libraries=("libcuda.so.1", "libcuda.so")):
    """The GPUs CUDA numbers 0, 1, ... in this process, from the driver's API (the numbering the
    frameworks get: CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER and a device cgroup applied), each
    {'cuda_index', 'bus_id', 'uuid'}. Raises OSError (no driver library) or RuntimeError (a CUDA
    error, e.g. no device). cuInit creates no context and takes no GPU memory."""
    lib, error = None, None
    for name in libraries:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError as exc:
            error = exc
    if lib is None:
        raise OSError(f"no CUDA driver library ({error})")

    def check(rc, what):
        if rc != 0:
            raise RuntimeError(f"CUDA driver: {what} returned error {rc}")

    check(lib.cuInit(0), "cuInit")
    count = ctypes.c_int()
    check(lib.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
    out = []
    for i in range(count.value):
        dev = ctypes.c_int()
        check(lib.cuDeviceGet(ctypes.byref(dev), i), "cuDeviceGet")
        buf = ctypes.create_string_buffer(64)
        check(lib.cuDeviceGetPCIBusId(buf, 64, dev), "cuDeviceGetPCIBusId")
        raw = (ctypes.c_ubyte * 16)()
        try:
            ident = uuid_text(bytes(raw)) if lib.cuDeviceGetUuid(raw, dev) == 0 else None
        except AttributeError:  # a driver older than CUDA 9.2's
            ident = None
        out.append({"cuda_index": i, "bus_id": normalize_bus_id(buf.value.decode()), "uuid": ident})
    return out


def _mask_words():
    try:
        top = max(os.sched_getaffinity(0))
    except (AttributeError, OSError, ValueError):
        top = 0
    return max(os.cpu_count() or 1, top + 1) // 64 + 1


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def nvml_gpus():
    """NVML's GPUs in its own order: {'index', 'uuid', 'bus_id', 'cpus' (near CPUs, NUMA-node scope;
    None where NVML cannot say), 'mig' (its MIG devices' UUIDs)}, or {'index', 'error'} for one NVML
    cannot open (a device cgroup). Raises ImportError (no nvidia-ml-py) or NVMLError (no driver)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        words, out = _mask_words(), []
        for i in range(pynvml.nvmlDeviceGetCount()):
            try:
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                gpu = {
                    "index": i,
                    "uuid": _text(pynvml.nvmlDeviceGetUUID(h)),
                    "bus_id": normalize_bus_id(_text(pynvml.nvmlDeviceGetPciInfo(h).busId)),
                }
            except pynvml.NVMLError as exc:
                out.append({"index": i, "error": str(exc)})
                continue
            try:
                if hasattr(pynvml, "nvmlDeviceGetCpuAffinityWithinScope"):
                    mask = pynvml.nvmlDeviceGetCpuAffinityWithinScope(h, words, pynvml.NVML_AFFINITY_SCOPE_NODE)
                else:
                    mask = pynvml.nvmlDeviceGetCpuAffinity(h, words)
                gpu["cpus"] = mask_cpus(list(mask)) or None
            except pynvml.NVMLError as exc:
                gpu["cpus"], gpu["affinity_error"] = None, str(exc)
            gpu["mig"] = _mig_uuids(pynvml, h)
            out.append(gpu)
        return out
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _mig_uuids(pynvml, handle):
    try:
        n = pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)
    except pynvml.NVMLError:  # not a MIG-capable GPU
        return []
    out = []
    for j in range(n):
        try:
            out.append(_text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, j))))
        except pynvml.NVMLError:
            continue
    return out


def sysfs_affinity(bus_id, root=PCI_ROOT):
    """(CPUs near the PCI device, its NUMA node) from the kernel; (None, None) where it does not say."""
    base = Path(root) / (bus_id or "?")
    try:
        cpus = parse_cpu_list(Path(base, "local_cpulist").read_text()) or None
    except (OSError, ValueError):
        cpus = None
    try:
        node = int(Path(base, "numa_node").read_text())
    except (OSError, ValueError):
        node = None
    return cpus, (node if node is not None and node >= 0 else None)


def visible_gpus(env=None, root=PCI_ROOT, cuda=None, nvml=None):
    """The GPUs CUDA numbers 0, 1, ... here, each {'cuda_index', 'bus_id', 'uuid', 'cpus' (near
    CPUs), 'numa_node'}, with how they were found: (gpus or None, {'identity', 'affinity',
    'problem'}). cuda, nvml: the readers (cuda_devices, nvml_gpus), replaceable for tests."""
    env = os.environ if env is None else env
    notes = {"identity": None, "affinity": None, "problem": None}
    try:
        found = (cuda or cuda_devices)()
        notes["identity"] = "CUDA driver (PCI bus id)"
    except Exception as exc:  # no libcuda, no device, an old driver: NVML's list with CUDA_VISIBLE_DEVICES
        found, cuda_error = None, f"{type(exc).__name__}: {exc}"
    try:
        listed = (nvml or nvml_gpus)()
        nvml_error = None
    except Exception as exc:  # ImportError (no nvidia-ml-py), NVMLError (no driver or library)
        listed, nvml_error = None, f"NVML unavailable ({type(exc).__name__}: {exc})"
    if found is None:
        if listed is None:
            notes["problem"] = f"which GPU is which is unknown: CUDA driver: {cuda_error}; {nvml_error}"
            return None, notes
        found = [
            {"cuda_index": i, "bus_id": g.get("bus_id"), "uuid": g.get("uuid")}
            for i, g in enumerate(map_visible(parse_visible(env.get("CUDA_VISIBLE_DEVICES")), listed))
        ]
        notes["identity"] = "CUDA_VISIBLE_DEVICES against NVML's order (CUDA driver: " + cuda_error + ")"
    by_bus = {g.get("bus_id"): g for g in listed or () if not g.get("error")}
    sources = set()
    for g in found:
        near, node = sysfs_affinity(g["bus_id"], root)
        from_nvml = (by_bus.get(g["bus_id"]) or {}).get("cpus")
        g["cpus"], g["numa_node"] = from_nvml or near, node
        if g["cpus"]:
            sources.add("NVML" if from_nvml else "sysfs local_cpulist")
    notes["affinity"] = " + ".join(sorted(sources)) or None
    if not sources:
        notes["problem"] = "no GPU's CPU affinity is known" + (
            f" ({nvml_error}; no sysfs local_cpulist)" if nvml_error else ""
        )
    return found, notes


def identify(cuda_index, env=None, cuda=None, nvml=None):
    """{'bus_id', 'uuid'} of the GPU CUDA numbers `cuda_index` in this process, from the CUDA driver,
    else from CUDA_VISIBLE_DEVICES read against NVML's list; None where neither can say."""
    env = os.environ if env is None else env
    try:
        return (cuda or cuda_devices)()[cuda_index]
    except Exception:  # no driver library, an index CUDA does not have: NVML's list
        pass
    try:
        return map_visible(parse_visible(env.get("CUDA_VISIBLE_DEVICES")), (nvml or nvml_gpus)())[cuda_index]
    except Exception:
        return None


# ---- plain data: one GPU model for a run -------------------------------------------------------------


def _said(records):
    """'Tesla V100-SXM2-16GB (compute capability 7.0, 898 GB/s) on v1, v2; ...', one part per GPU."""
    kinds = {}
    for r in records:
        bw = r.get("memory_GBps")
        kinds.setdefault((r["gpu"], tuple(r["capability"] or ()), bw), set()).add(r["node"])
    return "; ".join(
        f"{name} (compute capability {'.'.join(map(str, cc)) or '?'}{f', {bw:.0f} GB/s' if bw else ''}) on "
        f"{', '.join(sorted(nodes))}"
        for (name, cc, bw), nodes in sorted(kinds.items(), key=lambda k: (k[0][0], k[0][1], k[0][2] or 0))
    )


def gpu_mix(records):
    """(why a run's GPUs are not one model for the study, a warning where they are one though their
    names differ), either None. records: each rank's {node, gpu (name), capability, memory_GBps}.

    Refused: two compute capabilities (each rank would pick its own precision and loss scaling), two
    models apart from memory (study_model), or one chip whose memory bandwidth differs (A100 40 GB
    and 80 GB: 1.6 and 2.0 TB/s), which paces every step. Warned: memory sizes alone (V100-SXM2 16 GB
    beside 32 GB, or where NVML gave no bandwidth to compare): a batch that fits the larger may not
    fit the smaller, which the run would show by failing, not by a slower figure."""
    records = list(records)
    kinds = {(study_model(r["gpu"]), tuple(r["capability"] or ())) for r in records}
    if len(kinds) > 1:
        return f"the run's ranks have different GPUs: {_said(records)}", None
    if len({r["gpu"] for r in records}) < 2:
        return None, None
    bandwidths = {round(r["memory_GBps"]) for r in records if r.get("memory_GBps")}
    if len(bandwidths) > 1:
        return f"the run's ranks have one chip with different memory bandwidths: {_said(records)}", None
    everyone = all(r.get("memory_GBps") for r in records)
    known = "the same memory bandwidth" if everyone else "their memory bandwidth not known: NVML did not say"
    return None, (
        f"the run's GPUs differ in memory size only ({_said(records)}; {known}): one model for the study, run "
        "as one; a batch that fits the larger may not fit the smaller"
    )


def memory_GBps(bus_id, nvml=None):
    """The peak memory bandwidth of the GPU at PCI `bus_id` from NVML (bus width x the highest
    memory clock x 2, double data rate: 898 GB/s for a V100's HBM2), None where NVML cannot say.
    nvml: the pynvml module (the default) or an object with its functions."""
    try:
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
    except Exception:  # no nvidia-ml-py, no driver
        return None
    try:
        h = nvml.nvmlDeviceGetHandleByPciBusId(bus_id)
        return nvml.nvmlDeviceGetMemoryBusWidth(h) * nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_MEM) * 2 / 8e3
    except Exception:  # a GPU NVML cannot open, a call this GPU or driver lacks
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
