"""Where a profiled step's GPU time goes, stream by stream, from a torch.profiler trace
(pytorch_ddp --profile-steps K writes OUT/trace.rank0.json.gz).

The step's stream is the one with the most kernel time. For it: the share of the profiled window
its kernels kept the GPU busy, and its idle gaps, split into gaps while another stream (the
input's: DALI's or gpu_input's) ran kernels or copies and gaps with the whole GPU idle (the host
late with the next launch, or a wait for an event). For the other streams: their kernel and copy
time, how much of it ran beside the step's kernels, and their heaviest kernels. And the time in
the CUDA calls that wait, summed over every thread (DALI's own threads wait in them too, so this
is not the training thread's waiting).

    python3 benchmarks/trace_streams.py RUN/trace.rank0.json.gz [...]   -> one JSON line per trace
"""
import gzip
import json
import sys
from collections import defaultdict

GAP_US = 20  # shorter idle time between two kernels is the launch queue's own spacing
WAITS = ("cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize", "cudaStreamWaitEvent",
         "cudaMemcpyAsync", "cudaMemcpy")


def union(intervals):
    """Sorted, merged (start, end) intervals."""
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def length(intervals):
    return sum(e - s for s, e in intervals)


def intersect(a, b):
    """Total length of the intersection of two merged interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, e - s)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def summarize(path):
    with gzip.open(path, "rt") if str(path).endswith(".gz") else open(path) as f:
        events = json.load(f)["traceEvents"]
    gpu = defaultdict(list)  # stream -> (start, end, name, category)
    host = defaultdict(float)
    for ev in events:
        if ev.get("ph") != "X" or "dur" not in ev:
            continue
        cat = ev.get("cat", "")
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            stream = (ev.get("args") or {}).get("stream", ev.get("tid"))
            gpu[stream].append((ev["ts"], ev["ts"] + ev["dur"], ev["name"], cat))
        elif cat == "cuda_runtime" and ev["name"] in WAITS:
            host[ev["name"]] += ev["dur"]
    if not gpu:
        return {"trace": str(path), "error": "no CUDA activity in the trace"}
    kernel_time = {s: sum(e - b for b, e, _, c in evs if c == "kernel") for s, evs in gpu.items()}
    main = max(kernel_time, key=kernel_time.get)
    main_busy = union([(b, e) for b, e, *_ in gpu[main]])
    start, end = main_busy[0][0], main_busy[-1][1]
    window = end - start
    gaps = [(main_busy[k][1], main_busy[k + 1][0]) for k in range(len(main_busy) - 1)
            if main_busy[k + 1][0] - main_busy[k][1] > GAP_US]
    others = union([(b, e) for s, evs in gpu.items() if s != main for b, e, *_ in evs])
    gap_total = length(gaps)
    gap_with_other = intersect(union(gaps), others)
    streams = {}
    for s, evs in gpu.items():
        if s == main:
            continue
        busy = union([(b, e) for b, e, *_ in evs])
        heavy = defaultdict(float)
        for b, e, name, _ in evs:
            heavy[name[:60]] += e - b
        streams[str(s)] = {"kernel_ms": kernel_time[s] / 1e3, "busy_ms": length(busy) / 1e3,
                           "beside_step_ms": intersect(busy, main_busy) / 1e3,
                           "heaviest": sorted(((round(v / 1e3, 2), k) for k, v in heavy.items()), reverse=True)[:4]}
    return {"trace": str(path), "window_ms": window / 1e3, "step_stream": str(main),
            "step_stream_busy": length(main_busy) / window,
            "gaps": len(gaps), "gap_ms": gap_total / 1e3,
            "gap_ms_with_other_stream_busy": gap_with_other / 1e3,
            "gap_ms_gpu_idle": (gap_total - gap_with_other) / 1e3,
            "longest_gaps_ms": sorted((round((e - s) / 1e3, 2) for s, e in gaps), reverse=True)[:8],
            "other_streams": streams, "wait_ms_all_threads": {k: v / 1e3 for k, v in host.items()}}


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(json.dumps(summarize(p)))
