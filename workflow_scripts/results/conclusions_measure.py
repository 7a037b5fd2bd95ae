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

from . import stage_outputs as stage
from . import training_outputs as training
from .measure_inference import int8_accuracy, int8_speedup
from .measure_nodes import send_doubling, send_fp16, storage_doubling
from .measure_training import best_scaling, fp16_gain, scaling, stability, system_gap, time_to_accuracy
from .verdict_rules import Unmeasured

__all__ = ["MEASURE", "Unmeasured"]

# quantity -> (its function, the table it reads)
MEASURE = {
    "scaling": (scaling, training.SCALING),
    "best_scaling": (best_scaling, training.SCALING),
    "stability": (stability, training.THROUGHPUT),
    "system_gap": (system_gap, training.SYSTEMS),
    "fp16_gain": (fp16_gain, training.FP16_VS_FP32),
    "storage_doubling": (storage_doubling, training.STORAGE),
    "send_doubling": (send_doubling, training.NETWORK),
    "send_fp16": (send_fp16, training.NETWORK),
    "int8_speedup": (int8_speedup, stage.INT8_THROUGHPUT),
    "int8_accuracy": (int8_accuracy, stage.INT8_ACCURACY),
    "time_to_accuracy": (time_to_accuracy, stage.TIME_TO_ACCURACY),
}
