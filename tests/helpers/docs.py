"""Markdown as the tests read it: the ```bash blocks a document holds, its headings' anchors as
GitHub makes them, and its links."""

import re

FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def bash_blocks(text):
    """(section heading, block text) of every ```bash block, outside other fences."""
    blocks, section, lines, i = [], None, text.split("\n"), 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = line[3:].strip()
        if FENCE.match(line):
            lang, j = line[3:].strip(), i + 1
            while j < len(lines) and not lines[j].startswith(line[:3]):
                j += 1
            if lang == "bash":
                blocks.append((section, "\n".join(lines[i + 1 : j])))
            i = j
        i += 1
    return blocks


def slug(heading):
    """GitHub's anchor for a heading: lowercase, punctuation other than '-' and '_' dropped,
    spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path):
    found, counts, fenced = set(), {}, None
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = None if fenced and line.startswith(fenced) else (fenced or line[:3])
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m and not fenced:
            base = slug(m.group(1))
            n = counts.get(base, 0)
            counts[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path):
    fenced, out = None, []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(line):
            fenced = None if fenced and line.startswith(fenced) else (fenced or line[:3])
            continue
        if not fenced:
            out += [(lineno, target) for target in LINK.findall(line)]
    return out
