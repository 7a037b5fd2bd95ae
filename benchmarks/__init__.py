"""Scripts that measure (not tests): docs/benchmarks.md gives each table the command that reruns it."""
