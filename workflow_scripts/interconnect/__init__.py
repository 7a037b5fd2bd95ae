"""The interconnect stage: all-reduce and broadcast bus bandwidth by message size (the Brookhaven
paper, section III and Fig. 2), and what it predicts for the training runs' scaling.

    `collectives`          the measurement: all-reduce and broadcast with torch.distributed
    `nccl_tests`           NVIDIA's nccl-tests run beside it, their table parsed
    `bandwidth`            algorithm and bus bandwidth as nccl-tests define them
    `bandwidth_rows`       the table's rows from the stage's raw JSON
    `interconnect_table`   the stage's table
    `figure`               bus bandwidth by message size, as the Brookhaven paper's Fig. 2
    `efficiency_bounds`    what the all-reduce alone predicts for a training run's scaling
"""
