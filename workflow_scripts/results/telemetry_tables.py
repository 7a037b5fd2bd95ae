"""The storage and network figures of the study (seed 000 Fig. 7, 8) from the runs' telemetry:
per run, node and device, the peak, mean and total of a MB/s series (training_tables.py writes them)."""

from pathlib import Path

import pandas as pd

# Which series a row is (run, node, metric, device), and its figures.
SERIES = ["system", "framework", "precision", "gpus", "input", "node", "metric", "device"]
FIGURES = ["peak_MBps", "mean_MBps", "total_MB"]
TELEMETRY_SHOWN = SERIES + FIGURES
COLUMNS = SERIES + ["samples", "seconds"] + FIGURES


def telemetry(runs, metrics):
    """Per run, node and device: peak, mean and total of a MB/s series (total = integral over
    the sampled time)."""
    rows = []
    for r in runs[runs.status == "ok"].itertuples():
        for csv in sorted(Path(r.run_dir).glob("telemetry.*.csv")):
            t = pd.read_csv(csv)
            t = t[t.metric.isin(metrics)]
            for (node, metric, device), g in t.groupby(["node", "metric", "device"]):
                g = g.sort_values("time_s")
                dt = g.time_s.diff().fillna(g.time_s.iloc[0])
                rows.append(
                    {
                        "system": r.system,
                        "framework": r.framework,
                        "precision": r.precision,
                        "gpus": r.gpus,
                        "input": r.input,
                        "node": node,
                        "metric": metric,
                        "device": device,
                        "samples": len(g),
                        "seconds": g.time_s.iloc[-1],
                        "peak_MBps": g.value.max(),
                        "mean_MBps": g.value.mean(),
                        "total_MB": float((g.value * dt).sum()),
                    }
                )
    return pd.DataFrame(
        rows,
        columns=COLUMNS,
    )
