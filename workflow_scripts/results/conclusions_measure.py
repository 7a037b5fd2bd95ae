"""How each kind of the study's findings is measured from this run's tables (conclusions.py
assembles the rows): one function per quantity of study_findings.yaml, given the tables, the
finding and its tolerance; a finding this sweep has no point for raises Unmeasured, naming the
config keys that would add one.

Each result carries the caveats of the figures it rests on (results/guards.py: unstable, not
isolated, impossible; and CPU processes standing in for GPUs, which only accuracy findings may rest
on): a result with caveats gets no verdict. Where the sweep ran a point several times, a figure is
an interval over the runs, and holds is True or False only when the whole interval is on one side
of the study's figure (less its tolerance): None, inconclusive, where it straddles it.

Each measure returns verdict_rules.result(): the measured text and value, the point it was
measured at (same: whether that is the study's), the device, whether the finding holds, a note,
and the caveats. By table: measure_training.py, measure_nodes.py (telemetry), measure_inference.py.
"""

from .measure_inference import int8_accuracy, int8_speedup
from .measure_nodes import send_doubling, send_fp16, storage_doubling
from .measure_training import best_scaling, fp16_gain, scaling, stability, system_gap, time_to_accuracy
from .verdict_rules import Unmeasured

__all__ = ["MEASURE", "Unmeasured"]

# quantity -> (its function, the table it reads)
MEASURE = {
    "scaling": (scaling, "scaling"),
    "best_scaling": (best_scaling, "scaling"),
    "stability": (stability, "training_throughput"),
    "system_gap": (system_gap, "system_comparison"),
    "fp16_gain": (fp16_gain, "fp16_vs_fp32"),
    "storage_doubling": (storage_doubling, "storage_throughput"),
    "send_doubling": (send_doubling, "network_throughput"),
    "send_fp16": (send_fp16, "network_throughput"),
    "int8_speedup": (int8_speedup, "int8_throughput"),
    "int8_accuracy": (int8_accuracy, "int8_accuracy"),
    "time_to_accuracy": (time_to_accuracy, "time_to_accuracy"),
}
