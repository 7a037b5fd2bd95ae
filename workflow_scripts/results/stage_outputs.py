"""The tables and figures of the stages after training (INT8, the interconnect, the scaling
prediction, the long test and the verdict), each named once, as training_outputs.py names the
training stage's: the rules (int8_results.smk, interconnect.smk, predict.smk, results.smk) declare
<name>.csv / .md and figures/<name>.png by these names, each a report item with its caption
report/<name>.rst; the writers that choose their own file names and the verdict table's readers use
the same. Plain Python, no pandas: the rules import it when the workflow is parsed."""

from .training_outputs import caption

TABLES = (
    INT8_ACCURACY := "int8_accuracy",
    INT8_THROUGHPUT := "int8_throughput",
    INT8_VS_STUDY := "int8_vs_study",
    INTERCONNECT := "interconnect",
    SCALING_PREDICTION := "scaling_prediction",
    STUDY_ON_PAPER := "study_on_paper",
    TIME_TO_ACCURACY := "time_to_accuracy",
    CONCLUSIONS := "conclusions",
)
FIGURES = (
    FIG9 := "fig9_int8_throughput",
    FIG_INTERCONNECT := "interconnect_busbw",
    FIG_SCALING_PREDICTION := "scaling_prediction",
    FIG35 := "fig35_time_to_accuracy",
)
# a figure named as its table has a caption of its own
FIGURE_CAPTIONS = {FIG_SCALING_PREDICTION: "fig_scaling_prediction"}


def figure_caption(name):
    """The report's caption of a figure, relative to the rules' folder."""
    return caption(FIGURE_CAPTIONS.get(name, name))
