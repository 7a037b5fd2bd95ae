"""A table as the pipeline publishes it: CSV for tools, and a markdown copy for people, headed by
what was measured and how, and by any note on the runs behind it."""
from pathlib import Path

from ..common.atomic import atomic_file


def write_table(df, csv_path, title, how, notes=(), floatfmt=".4g", after=()):
    """`after`: markdown lines that follow the table (e.g. one sentence per row)."""
    csv_path = Path(csv_path)
    with atomic_file(csv_path) as tmp:
        df.to_csv(tmp, index=False)
    lines = [f"# {title}", "", how, ""]
    lines += [f"> **Note.** {n}" for n in notes] + ([""] if notes else [])
    lines.append(df.to_markdown(index=False, floatfmt=floatfmt) if len(df) else "_No rows: " + (
        notes[0] if notes else "nothing to compare in this sweep") + "_")
    if after:
        lines += ["", *after]
    with atomic_file(csv_path.with_suffix(".md")) as tmp:
        Path(tmp).write_text("\n".join(lines) + "\n")
