"""The training stage's tables and figures, each named here once: the writers
(training_tables.py, training_figures.py) write <name>.csv / .md and figures/<name>.png by these
names, and rules/results.smk declares the same files, each a report item with its caption
report/<name>.rst. Plain Python, no pandas: the rules import it when the workflow is parsed."""

TABLES = (
    THROUGHPUT := "training_throughput",
    SCALING := "scaling",
    FP16_VS_FP32 := "fp16_vs_fp32",
    SYSTEMS := "system_comparison",
    INPUT_PATHS := "input_paths",
    STORAGE := "storage_throughput",
    NETWORK := "network_throughput",
)
FIGURES = (
    FIG2 := "fig2_scaling",
    FIG4_6 := "fig4_6_system_comparison",
    FIG5 := "fig5_fp16_vs_fp32",
    FIG_INPUT_PATHS := "fig_input_paths",
    FIG7 := "fig7_storage",
    FIG8 := "fig8_network",
)


def caption(name):
    """The report's caption of an output, relative to the rules' folder (Snakemake's report())."""
    return f"../report/{name}.rst"
