"""The README's commands are the ones the tests run, its Layout is the tree, and the documentation's
links lead somewhere.

Every ```bash block of README.md must be run by a test exactly as written: the quick start's
second command is what .ci/run runs, the "Changing settings" block is run by
tests/test_faults.py::test_a_second_config_file_overrides_nested_keys. A new block fails here until
a test runs it. Relative links of README.md and docs/ must name an existing file and, with a
#fragment, an existing heading of it (GitHub's anchors). Every name the README's Layout gives is a
file or folder of the checkout, and every module of workflow_scripts/ is named there, so a module
added, renamed or moved fails here until the guide places it."""

import re

import pytest
from helpers import REPO, anchors, bash_blocks, layout_items, links

pytestmark = pytest.mark.unit

DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def ci_test_command():
    commands = [
        ln.strip()
        for ln in (REPO / ".ci/run").read_text().splitlines()
        if ln.strip() and not ln.lstrip().startswith(("#", "set ", "cd "))
    ]
    return commands[-1]


def test_every_readme_command_is_run_by_a_test():
    blocks = bash_blocks((REPO / "README.md").read_text())
    tested = {"Quick start", "Changing settings"}
    untested = [f"## {sec}:\n{body}" for sec, body in blocks if sec not in tested]
    assert not untested, (
        "README.md has ```bash blocks no test runs (run them in a test and name the "
        "section in tests/test_readme.py):\n" + "\n\n".join(untested)
    )
    sections = [sec for sec, _ in blocks]
    assert sorted(sections) == sorted(tested), f"expected one block in each of {sorted(tested)}, found {sections}"
    quick = dict(blocks)["Quick start"]
    commands = [ln.split("#", 1)[0].strip() for ln in quick.splitlines() if ln.strip()]
    assert len(commands) == 2, quick
    assert commands[1] == ci_test_command(), (
        f"README's test command {commands[1]!r} is not what .ci/run runs ({ci_test_command()!r})"
    )


def test_relative_links_resolve():
    broken = []
    for doc in DOCS:
        for lineno, target in links(doc):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, fragment = target.partition("#")
            dest = (doc.parent / file_part).resolve() if file_part else doc
            where = f"{doc.relative_to(REPO)}:{lineno}: {target}"
            if not dest.exists():
                broken.append(f"{where} (no such file)")
            elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
                broken.append(f"{where} (no heading '#{fragment}' in {dest.relative_to(REPO)})")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_ci_prints_the_slowest_tests():
    """CI's log names the slowest tests, so a test that grows shows where the suite's time went."""
    assert "--durations=15" in ci_test_command().split(), ci_test_command()


def layout_problems(items, kind, modules):
    """What the Layout's items get wrong against a tree: `kind(path)` is "file", "dir" or None for
    a path relative to the top, `modules` the paths the Layout must each name. A name `x/` is a
    folder; a name is looked for in its item's folder, then in each folder above it (preflight/'s
    `common/input_bound` is workflow_scripts/common/input_bound.py), as written or as a module."""

    def resolve(folder, name):
        parts = folder.rstrip("/").split("/") if folder else []
        for depth in range(len(parts), -1, -1):
            base = "".join(f"{p}/" for p in parts[:depth]) + name.rstrip("/")
            for path in (base, f"{base}.py"):
                if kind(path) == "dir" or (kind(path) == "file" and not name.endswith("/")):
                    return path
        return None

    missing, named = [], set()
    for path, folder, names in items:
        own = resolve("", path) if kind(path.rstrip("/")) else None
        missing += [] if own == path.rstrip("/") else [f"{path} (an item)"]
        named.add(own)
        for name in names:
            found = resolve(folder, name)
            missing += [] if found else [f"{name} (in {path})"]
            named.add(found)
    return missing, [m for m in modules if m not in named]


def tree_kind(path):
    full = REPO / path
    return "dir" if full.is_dir() else "file" if full.is_file() else None


def product_modules():
    """Every folder and file of workflow_scripts/ but packages' __init__.py and caches."""
    paths = (p for p in sorted((REPO / "workflow_scripts").rglob("*")) if "__pycache__" not in p.parts)
    return [p.relative_to(REPO).as_posix() for p in paths if p.name != "__init__.py" and not p.name.startswith(".")]


def test_the_layout_is_the_tree():
    items = layout_items((REPO / "README.md").read_text())
    modules = product_modules()
    assert len(items) > 10 and len(modules) > 100, (items, modules)
    missing, unlisted = layout_problems(items, tree_kind, modules)
    assert not missing and not unlisted, (
        "README.md's Layout is not the tree:\n"
        + "".join(f"  missing: {m}\n" for m in missing)
        + "".join(f"  unlisted (place it in the Layout): {u}\n" for u in unlisted)
    )


def test_the_layout_check_names_what_is_wrong():
    text = (
        "# x\n## Layout\n\nintro with `not/an/item`\n\n- `top.txt`: a file\n- `pkg/`: a package\n"
        "  - `a/`: `one`, `gone`,\n    `b/two` (`run this`) and `two.yaml`\n  - `b/`: `two`\n"
        "- `lost/`: moved\n\nHouse style\n"
    )
    items = layout_items(text)
    assert [(path, folder) for path, folder, _ in items] == [
        ("top.txt", ""),
        ("pkg/", "pkg/"),
        ("pkg/a/", "pkg/a/"),
        ("pkg/b/", "pkg/b/"),
        ("lost/", "lost/"),
    ]
    assert items[2][2] == ["one", "gone", "b/two", "two.yaml"]
    tree = {"top.txt": "file", "pkg": "dir", "pkg/a": "dir", "pkg/a/one.py": "file", "pkg/a/two.yaml": "file"}
    tree |= {"pkg/b": "dir", "pkg/b/two.py": "file", "pkg/b/new.py": "file"}
    modules = [p for p in tree if p.startswith("pkg/")]
    missing, unlisted = layout_problems(items, tree.get, modules)
    assert missing == ["gone (in pkg/a/)", "lost/ (an item)"]
    assert unlisted == ["pkg/b/new.py"]
