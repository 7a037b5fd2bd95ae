"""The docs' option tables, made from schemas/config.schema.yaml: each block of a docs/*.md page
between a line `<!-- options: SECTION -->` and a line `<!-- /options -->` is the table of that
config section (e.g. training.pytorch), rewritten here; --check only says which are stale.

    python -m workflow_scripts.common.options_table [--check]
"""

import argparse
import os
import re
import sys

from . import schema

REPO = schema.SCHEMA.parents[1]
BLOCK = re.compile(r"^<!-- options: (?P<section>[\w.]+) -->\n.*?^<!-- /options -->$", re.MULTILINE | re.DOTALL)
DECISION = re.compile(r"docs/decisions\.md#([\w-]+)")


def shown(value):
    """A value as config.yaml spells it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    return str(value)


def values(spec):
    if "enum" in spec:
        return " \\| ".join(f"`{shown(v)}`" for v in spec["enum"])
    alternatives = spec.get("oneOf", [spec])
    out = []
    for a in alternatives:
        if "const" in a:
            out.append(f"`{shown(a['const'])}`")
        elif a.get("type") == "boolean":
            out.append("`true` \\| `false`")
        elif a.get("type") in ("integer", "number"):
            bounds = [
                f"{w} {a[k]}" for k, w in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<=")) if k in a
            ]
            out.append(" ".join([a["type"], ", ".join(bounds)]).strip())
        elif a.get("type") == "array" and "items" in a:
            out.append(f"list of {values(a['items'])}")
        elif "type" in a:
            out.append(a["type"])
    return " \\| ".join(out)


def table(section, page):
    """The Markdown table of a config section, its links to docs/decisions.md relative to `page`."""
    decisions = os.path.relpath(REPO / "docs" / "decisions.md", page.parent)
    rows = ["| key | schema default | values | meaning |", "|---|---|---|---|"]
    for key, spec in schema.section(section).items():
        meaning = spec.get("description", "").replace("|", "\\|")
        meaning = DECISION.sub(lambda m: f"[decisions: {m.group(1)}]({decisions}#{m.group(1)})", meaning)
        default = f"`{shown(spec['default'])}`" if "default" in spec else ""
        rows.append(f"| `{key}` | {default} | {values(spec)} | {meaning} |")
    return "\n".join(rows)


def render(page):
    """The page's text with every options block regenerated."""

    def block(m):
        return (
            f"<!-- options: {m['section']} -->\n<!-- made by python -m workflow_scripts.common.options_table from "
            f"schemas/config.schema.yaml: edit the schema, then run it -->\n{table(m['section'], page)}\n"
            f"<!-- /options -->"
        )

    return BLOCK.sub(block, page.read_text())


def pages():
    return [p for p in sorted((REPO / "docs").rglob("*.md")) if BLOCK.search(p.read_text())]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table is stale")
    args = ap.parse_args(argv)
    stale = [p for p in pages() if render(p) != p.read_text()]
    for p in stale:
        if args.check:
            print(
                f"{p.relative_to(REPO)}: option table stale; run python -m workflow_scripts.common.options_table",
                file=sys.stderr,
            )
        else:
            p.write_text(render(p))
            print(f"{p.relative_to(REPO)}: option table rewritten")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
