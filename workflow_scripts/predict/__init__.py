"""Predicted scaling past the largest machine measured: the all-reduce cost model and its checks
(rules/predict.smk).

    `collective_model`      the cost of one all-reduce: NCCL's ring and tree, Horovod's
                            hierarchical all-reduce
    `step_messages`         the messages a training step's gradients go out in, per library
    `step_model`            what the backward pass hides of them, and the model's checks on the runs
    `link_fit`              the links fitted to the interconnect table
    `link_least_squares`    a link's bandwidth and latency by least squares, and leave-one-out
    `sweep_runs`            the sweep's runs as the prediction reads them
    `scaling_prediction`    what is predicted past the largest machine run
    `prediction_settings`   its settings: config.yaml's prediction section as flags
    `prediction_figure`     its figure
    `study_on_paper`        the model on the study's own hardware, beside its measured speedups
    `paper_entries`         an entry of `paper_figures.yaml` (the source documents' figures)
    `brookhaven_busbw`      the model's bus bandwidth against the Brookhaven paper's measured one
"""
