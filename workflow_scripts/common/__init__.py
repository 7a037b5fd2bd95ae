"""What every stage and every framework shares:

`frameworks`      the framework registry: one record per framework, which the rest reads
`atomic`          outputs that appear whole or not at all
`errors`          StageError (one line, not a traceback), PermanentError, run_main
`output`          a table as CSV and as markdown, with its notes and footnotes
`plotting`        what the figure modules share: headless matplotlib, whole-file PNGs
`parallel`        an ordered, bounded parallel map with a progress bar
`schema`          schemas/config.schema.yaml as the one definition of a config-backed flag
                  (argv, add_arguments, default)
`options_table`   the docs' option tables, made from the schema
`metrics`         a run's per-iteration timing log and its summary (images/s, stability)
`timing`          per-call timings of a repeated operation, warm-up excluded
`input_bound`     whether a point's input can feed its GPUs (real against synthetic data)
`chance_level`    whether a classifier's score is what guessing gets
`failed_runs`     the sweep's failed runs, and how to run only them again
`workflow_lock`   one workflow at a time in a working directory
`written_without` the points a table was written without while they wait for their nodes
"""
