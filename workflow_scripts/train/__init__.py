"""The training stage: ResNet-50 data-parallel training, one module per framework, all writing
the same per-iteration log and summary through harness.py."""
