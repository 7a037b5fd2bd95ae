"""A table as the pipeline publishes it: CSV for tools, with every column, and a markdown copy for
people, headed by what was measured and how and by any note on the runs behind it, that shows only
the columns a reader compares. What the other columns hold (provenance, settings) is stated once in
a footnote under the table: a value every row shares, or that the rows differ, pointing to the CSV."""

import math
from pathlib import Path

import pandas as pd

from .atomic import atomic_file


def _empty(v):
    if isinstance(v, str):
        return not v.strip()
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def _value(v, floatfmt):
    if isinstance(v, float):
        return f"{v:.0f}" if v.is_integer() else format(v, floatfmt)
    return " ".join(str(v).split())  # one line, whatever the cell held


def footnote(df, shown, csv_name, floatfmt=".4g"):
    """Markdown lines on the columns of df that the table does not show: one line of the values
    every row shares, one naming those that differ between rows, one naming those never recorded."""
    same, differ, empty = [], [], []
    for col in (c for c in df.columns if c not in shown and not str(c).startswith("_")):
        values = [v for v in df[col].tolist() if not _empty(v)]
        distinct = list(dict.fromkeys(values))  # raw: two values one format rounds alike still differ
        if not distinct:
            empty.append(f"`{col}`")
        elif len(distinct) == 1:
            gaps = len(df) - len(values)
            same.append(
                f"`{col}` {_value(distinct[0], floatfmt)}" + (f" (empty in {gaps} of {len(df)} rows)" if gaps else "")
            )
        else:
            differ.append(f"`{col}` ({len(distinct)} values)")
    if not (same or differ or empty):
        return []
    lines = [f"In `{csv_name}` only, not shown above:", ""]
    if same:
        lines.append("- one value throughout: " + "; ".join(same))
    if differ:
        lines.append(f"- different between rows, see `{csv_name}`: " + ", ".join(differ))
    if empty:
        lines.append("- empty in every row: " + ", ".join(empty))
    return lines


def write_table(df, csv_path, title, how, notes=(), floatfmt=".4g", after=(), columns=None):
    """`columns`: those the markdown table shows, in order (None: all); the CSV keeps every column
    of df, and the rest are summarised under the markdown table. `after`: markdown lines that
    follow the table and its footnote (e.g. one sentence per row)."""
    csv_path = Path(csv_path)
    shown = list(df.columns if columns is None else columns)
    missing = [c for c in shown if c not in df.columns]
    if missing:
        raise ValueError(
            f"{csv_path.name}: the markdown columns {missing} are not columns of the table "
            f"({', '.join(map(str, df.columns))})"
        )
    with atomic_file(csv_path) as tmp:
        df.to_csv(tmp, index=False)
    lines = [f"# {title}", "", how, ""]
    lines += [f"> **Note.** {n}" for n in notes] + ([""] if notes else [])
    if len(df):
        table = df[shown].astype(object)
        lines.append(table.where(table.notna(), None).to_markdown(index=False, floatfmt=floatfmt, missingval=""))
        rest = footnote(df, shown, csv_path.name, floatfmt)
        lines += ["", *rest] if rest else []
    else:
        lines.append("_No rows: " + (notes[0] if notes else "nothing to compare in this sweep") + "_")
    if after:
        lines += ["", *after]
    with atomic_file(csv_path.with_suffix(".md")) as tmp:
        Path(tmp).write_text("\n".join(lines) + "\n")
