"""The file a (system, framework)'s training and interconnect jobs wait for: written only when
every preflight check of the pair passed; otherwise one line naming the system, framework,
node, check and fix, and exit status 1.

    python -m workflow_scripts.preflight.gate --results R1.json [R2.json] --ok OK_FILE --log LOG

The line goes to the workflow's own output; the log keeps which results were read and the verdict
(not the line again: snakemake prints a failed job's log too).
"""

import argparse
import json
import re
import sys
from pathlib import Path

from .check_rows import FAILED


def first_failure(results):
    for path in results:
        res = json.loads(Path(path).read_text())
        for r in res["rows"]:
            if r["status"] == FAILED:
                return (
                    f"preflight failed: system {res['system']}, framework {res['framework']} "
                    f"({res['nodes']} node(s), {res['tasks']} task(s)), node {r['node'] or '?'}, check "
                    f"{r['check']}: {r['cause']}. Fix: {r['fix'] or 'see ' + res['log']}"
                )
    return None


def unreturned(results, logs):
    """One line per preflight check that was started and wrote no result (its job failed before it
    could, or lost its node): the gates waiting for it are its own system's only. `results` are the
    checks' result files, `logs` the workflow's log folder (rules/preflight.smk's log names). A
    check that ran and failed has a result, and its gate names the cause."""
    lines = []
    for result in results:
        where = re.search(r"preflight/([^/]+)/([^/]+)/(\d+)gpu(\.\w+)?\.json$", str(result))
        if where is None or Path(result).exists():
            continue
        system, framework, tasks, kind = where.groups()
        log = Path(logs, "preflight", system, f"{framework}_{tasks}gpu{kind or ''}.log")
        if log.exists():
            what = f"{kind[1:]} check" if kind else "check"
            lines.append(
                f"preflight: system {system}, framework {framework}, {tasks} task(s): its {what} returned "
                f"no result (its job failed or lost its node: {log}). Only system {system}'s gates wait "
                "for it; run the workflow again to check it again."
            )
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", nargs="+", required=True)
    ap.add_argument("--ok", required=True)
    ap.add_argument("--log", required=True)
    a = ap.parse_args()
    message = first_failure(a.results)
    verdict = "failed: its one line is in the workflow's output" if message else "passed"
    Path(a.log).write_text(f"gate: read {', '.join(a.results)}: {verdict}\n")
    if message:
        print(message, file=sys.stderr)
        sys.exit(1)
    Path(a.ok).write_text("passed\n")


if __name__ == "__main__":
    main()
