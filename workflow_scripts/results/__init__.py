"""The study's tables, figures and verdicts from the pipeline's run outputs (rules/results.smk).

`runs`                    one record per run, read from its own outputs
`guards`                  the verdict guards: what makes a figure one no verdict rests on
`input_marks`             which runs were input-bound
`training_tables`         the training tables (Fig. 2, 4-8's numbers)
`training_outputs`        the training tables' and figures' names, which the rules declare
`stage_outputs`           the names of the INT8, interconnect, prediction, long-test and verdict
                          outputs, which the rules declare
`point_tables`            the tables that compare points: FP16 vs FP32, systems, input paths
`telemetry_tables`        the storage and network tables, from the runs' telemetry
`training_figures`        the training figures
`time_to_accuracy`        the long test's table
`accuracy_figure`         the long test's figure (the scale-out whitepaper's Fig. 35)
`inference_figures`       Fig. 9 and Table III beside the study's own figures
`study_figures`           reads `study_v100_figures.yaml`, the study's own figures, for the figures
`conclusions`             the verdict table: the findings of `study_findings.yaml`, each decided
`conclusions_measure`     how each kind of finding is measured (MEASURE)
`measure_training`        the measures read from the training tables
`measure_nodes`           the measures read from the runs' telemetry
`measure_inference`       the measures read from the INT8 tables
`verdict_rules`           what every measure shares: its result, intervals, lookups
`conclusions_predicted`   the verdict table's predicted column
"""
