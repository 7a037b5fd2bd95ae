"""The interconnect stage: all-reduce and broadcast bus bandwidth by message size (the Brookhaven
paper, section III and Fig. 2), and what it predicts for the training runs' scaling."""
