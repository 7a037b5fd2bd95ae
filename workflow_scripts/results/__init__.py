"""The study's tables and figures from the pipeline's run outputs."""
