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


LAYOUT_ITEM = re.compile(r"^( *)- `([^`\s]+)`")
NAME = re.compile(r"`([^`\s]+)`")  # one word in code; a command (spaces) is no name


def layout_items(text):
    """The list of a `## Layout` section as (path, folder, names) per item: its own path (its first
    name, inside the folder of the item it hangs from), the folder its other names are in (its
    own path where that is a folder, `x/`, else its parent's), and those names as written."""
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    items, parents = [], []  # parents: (indent, folder) of the items above this one
    for line in section.splitlines():
        head = LAYOUT_ITEM.match(line)
        if head:
            indent = len(head.group(1))
            while parents and parents[-1][0] >= indent:
                parents.pop()
            path = (parents[-1][1] if parents else "") + head.group(2)
            folder = path if path.endswith("/") else (parents[-1][1] if parents else "")
            items.append((path, folder, NAME.findall(line[head.end() :])))
            parents.append((indent, folder))
        elif items and line.startswith("  ") and line.strip():
            items[-1][2].extend(NAME.findall(line))
        else:
            parents = [] if not line.startswith(" ") and line.strip() else parents
    return items
