"""One checked item: what was checked, where, its status, the figure measured, the cause and fix.
Statuses: ok, failed, not applicable, and warning (the runs work, with something missing: the gate
passes them, the table says what)."""

import json
from pathlib import Path

OK, FAILED, NA, WARN = "ok", "failed", "not applicable", "warning"
FIELDS = ("check", "status", "figure", "value", "unit", "node", "rank", "cause", "fix")


def row(check, status, figure="", cause="", fix="", node="", rank=None, value=None, unit=""):
    return {
        "check": check,
        "status": status,
        "figure": figure,
        "value": value,
        "unit": unit,
        "node": node,
        "rank": rank,
        "cause": cause,
        "fix": fix,
    }


def read_all(folder, pattern):
    """Rows of every JSON file in `folder` matching `pattern` (each a list of rows)."""
    out = []
    for p in sorted(Path(folder).glob(pattern)):
        out += json.loads(p.read_text())
    return out


def _where(r):
    return f"rank {r['rank']} on {r['node']}" if r["rank"] is not None else r["node"]


def merge(rows):
    """One row per check over all ranks and nodes: failed where any failed (naming where), the
    figures' range where they are numbers."""
    merged = []
    for check in dict.fromkeys(r["check"] for r in rows):
        same = [r for r in rows if r["check"] == check]
        failed = [r for r in same if r["status"] == FAILED]
        if failed:
            first = failed[0]
            others = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
            merged.append(
                row(
                    check,
                    FAILED,
                    first["figure"],
                    f"{_where(first)}: {first['cause']}{others}",
                    first["fix"],
                    first["node"],
                    first["rank"],
                )
            )
            continue
        warned = [r for r in same if r["status"] == WARN]
        if warned:  # a warning of some ranks is not hidden by the others' ok
            more = f" (on {len(warned)} of {len(same)})" if len(warned) < len(same) else ""
            nodes = ",".join(dict.fromkeys(r["node"] for r in warned))
            merged.append({**warned[0], "node": nodes, "rank": None, "cause": warned[0]["cause"] + more})
            continue
        ok = [r for r in same if r["status"] == OK]
        if not ok:
            merged.append({**same[0], "node": ",".join(dict.fromkeys(r["node"] for r in same)), "rank": None})
            continue
        nodes = ",".join(dict.fromkeys(r["node"] for r in ok))
        values = [r["value"] for r in ok]
        figures = list(dict.fromkeys(r["figure"] for r in ok))
        if len(figures) == 1:
            figure = figures[0] + (f" (each of {len(ok)} ranks)" if len(ok) > 1 and ok[0]["rank"] is not None else "")
        elif None not in values:
            figure = (
                f"{min(values):.3g}-{max(values):.3g} {ok[0]['unit']} over {len(ok)} ranks; "
                f"{_where(ok[0])}: {ok[0]['figure']}"
            )
        else:
            figure = "; ".join(f"{_where(r)}: {r['figure']}" for r in ok)
        merged.append(
            row(check, OK, figure, node=nodes, value=max(values) if None not in values else None, unit=ok[0]["unit"])
        )
    return merged
