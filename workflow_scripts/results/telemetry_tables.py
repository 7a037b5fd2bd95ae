"""The storage and network figures of the study (its Fig. 7, 8) from the runs' telemetry:
per run, node and device, the peak, mean and total of a MB/s series (training_tables.py writes them),
or of any series of cluster/telemetry.py in its own unit (a level, as gpu_mem_MB: peak and mean)."""

import json
from pathlib import Path

import pandas as pd

# Which series a row is (run, node, metric, device), and its figures.
SERIES = ["system", "framework", "precision", "gpus", "input", "repeat", "node", "metric", "device"]


def unit_of(metric):
    """A telemetry metric's unit, the last word of its name (cluster/telemetry.py): read_MBps's MBps."""
    return metric.rsplit("_", 1)[-1]


def figures(unit):
    """A series' figure columns: peak and mean in its unit, and for a rate (…ps) the total it
    integrates to (MBps: total_MB)."""
    shown = [f"peak_{unit}", f"mean_{unit}"]
    return [*shown, f"total_{unit.removesuffix('ps')}"] if unit.endswith("ps") else shown


FIGURES = figures("MBps")
TELEMETRY_SHOWN = SERIES + FIGURES
COLUMNS = SERIES + ["samples", "seconds"] + FIGURES


def timed_window(run_dir):
    """(start, end) wall-clock seconds of the run's timed steps, as its isolation was judged over
    (train/run_evidence.py), or None where the run recorded none."""
    try:
        w = json.loads((Path(run_dir) / "summary.json").read_text())["isolation"]["window"]
        return w["start"], w["end"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def in_window(t, csv, window):
    """(the rows of a node's series inside the run's timed window, on the node's own clock:
    telemetry.<node>.json's wall_origin; a sample covers the interval before it, which its first
    row counts for); all rows from time 0 where either is not recorded."""
    try:
        meta = json.loads(csv.with_suffix(".json").read_text())
        origin, interval = meta["wall_origin"], meta.get("interval", 1.0)
    except (OSError, ValueError, KeyError):
        return t, None
    if window is None:
        return t, None
    wall = t.time_s + origin
    return t[(wall > window[0]) & (wall - interval < window[1])], interval


def not_counted(csv):
    """The node's interfaces another series counts already (cluster/telemetry.py uncounted_nics)."""
    try:
        return list(json.loads(csv.with_suffix(".json").read_text()).get("network_not_counted") or {})
    except (OSError, ValueError):
        return []


def telemetry(runs, metrics):
    """Per run, node and device over the run's timed steps (start-up, compilation and NCCL's set-up
    left out, as its isolation is): peak, mean and, for a rate, total of `metrics`' series (total =
    integral over the sampled time), in their one unit (figures())."""
    units = {unit_of(m) for m in metrics}
    if len(units) != 1:
        raise ValueError(f"telemetry(): one unit a table, not {sorted(units)} ({metrics})")
    (unit,) = units
    peak, mean, *total = figures(unit)
    rows = []
    for r in runs[runs.status == "ok"].itertuples():
        window = timed_window(r.run_dir)
        for csv in sorted(Path(r.run_dir).glob("telemetry.*.csv")):
            t = pd.read_csv(csv)
            t, interval = in_window(t[t.metric.isin(metrics)], csv, window)
            t = t[~t.device.isin(not_counted(csv))]
            for (node, metric, device), g in t.groupby(["node", "metric", "device"]):
                g = g.sort_values("time_s")
                dt = g.time_s.diff().fillna(interval if interval is not None else g.time_s.iloc[0])
                rows.append(
                    {
                        "system": r.system,
                        "framework": r.framework,
                        "precision": r.precision,
                        "gpus": r.gpus,
                        "input": r.input,
                        "repeat": getattr(r, "repeat", 1),
                        "node": node,
                        "metric": metric,
                        "device": device,
                        "samples": len(g),
                        "seconds": float(dt.sum()),
                        peak: g.value.max(),
                        mean: g.value.mean(),
                        **{name: float((g.value * dt).sum()) for name in total},
                    }
                )
    return pd.DataFrame(rows, columns=SERIES + ["samples", "seconds", peak, mean, *total])


def _node_of(path):
    # telemetry.<node>.csv / .json, where a host name may itself hold dots
    return path.name.removeprefix("telemetry.").rsplit(".", 1)[0]


def run_storage(run_dir):
    """{node: what its storage rows measure} for one run: the "storage" object of
    telemetry.<node>.json (cluster.telemetry.StorageProbe.describe()), or None for a node whose
    telemetry.<node>.csv has no JSON beside it (runs from before it was written)."""
    out = {}
    for csv in sorted(Path(run_dir).glob("telemetry.*.csv")):
        out[_node_of(csv)] = None
    for meta in sorted(Path(run_dir).glob("telemetry.*.json")):
        try:
            out[_node_of(meta)] = json.loads(meta.read_text()).get("storage")
        except ValueError as exc:
            raise ValueError(f"{meta}: {exc}") from exc
    return out


def _label(run):
    return f"{run.system}/{Path(run.run_dir).name}"


def _where(node, runs):
    return ", ".join([node, *runs])


def _unsupported(node, storage, runs=()):
    return f"unsupported on {storage.get('fstype') or 'no mount'} ({_where(node, runs)}): {storage.get('why')}"


def _not_recorded(node, runs=()):
    return (
        f"storage probe not recorded ({_where(node, runs)}): the run has no telemetry.{node}.json, so its "
        "read_MBps rows may be every local disk summed (device disks:all), not the file system that was read"
    )


def _ib_note(node, storage):
    if storage.get("ib") is True:
        return f"IB bytes on {node} include storage traffic: {storage.get('ib_why')}"
    if storage.get("ib") == "may":
        return f"IB bytes on {node} may include storage traffic: {storage.get('ib_why')}"
    return None


def _notes(runs, sentence):
    """sentence(node, storage, runs) for each node of the completed runs; runs that give the same
    sentence share one, which names them all."""
    groups = {}
    for r in runs[runs.status == "ok"].itertuples():
        for node, storage in run_storage(r.run_dir).items():
            key = sentence(node, storage, ())
            if key:
                groups.setdefault(key, (node, storage, []))[2].append(_label(r))
    return [sentence(node, storage, labels) for node, storage, labels in groups.values()]


def storage_notes(runs):
    """Fig. 7's notes: "unsupported on <fstype> (<node>, <run>, ...): <why>" where the dataset's
    file system has no counters the node could read (its runs have no read_MBps rows), and "storage
    probe not recorded (<node>, <run>, ...)" for runs from before telemetry.<node>.json."""

    def sentence(node, storage, labels):
        if storage is None:
            return _not_recorded(node, labels)
        return None if storage.get("supported") else _unsupported(node, storage, labels)

    return _notes(runs, sentence)


def network_notes(runs):
    """Fig. 8's notes: "IB bytes on <node> include storage traffic: <mount> is Lustre over o2ib"
    (or NFS over RDMA; "may include" for GPFS and BeeGFS, whose use of RDMA is not visible from
    the node), once per node and mount."""
    return _notes(runs, lambda node, storage, labels: storage and _ib_note(node, storage))


def _panel_node(run_dir, node):
    nodes = run_storage(run_dir)
    node = node if node in nodes else next(iter(nodes), None)
    return node, nodes.get(node)


def storage_panel_note(run_dir, node=None):
    """Fig. 7's text for one run's panel (for `node`, else the run's first): why it has no storage
    series, or that what its series measures was not recorded; None where the series is the file
    system's own."""
    node, storage = _panel_node(run_dir, node)
    if node is None:
        return None
    if storage is None:
        return _not_recorded(node)
    return None if storage.get("supported") else "storage reads not measured: " + _unsupported(node, storage)


def network_panel_note(run_dir, node=None):
    """Fig. 8's text for one run's panel: that its IB bytes include the dataset's reads, where they may."""
    node, storage = _panel_node(run_dir, node)
    return _ib_note(node, storage) if storage else None
