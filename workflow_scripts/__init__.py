"""dlscale: the stages of the pipeline, one module per stage, run by the rules in rules/."""
