"""The interconnect stage: all-reduce and broadcast bus bandwidth by message size (seed 004,
section III and Fig. 2), and what it predicts for the training runs' scaling."""
