"""The README's commands are the ones the tests run, its Layout is the tree, each package of
workflow_scripts/ is mapped by its own docstring, and the documentation's links lead somewhere.

Every ```bash block of README.md must be run by a test exactly as written: the quick start's
second command is what .ci/run runs, the "Changing settings" block is run by
tests/test_faults.py::test_a_second_config_file_overrides_nested_keys. A new block fails here until
a test runs it. Relative links of README.md and docs/ must name an existing file and, with a
#fragment, an existing heading of it (GitHub's anchors). Every name the README's Layout gives is a
file or folder of the checkout, and it names every package (folder) of workflow_scripts/, one line
each, not their modules: those are each package's own map, its `__init__.py` docstring, which must
name every module, data file and subpackage of the package in backticks (`sweep`,
`study_v100_figures.yaml`). So a package added fails here until the README places it, and a module
added, renamed or moved fails until its package's docstring does."""

import ast
import re

import pytest
from helpers import REPO, anchors, bash_blocks, layout_items, links
from helpers.docs import NAME

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


def layout_problems(items, kind, required):
    """What the Layout's items get wrong against a tree: `kind(path)` is "file", "dir" or None for
    a path relative to the top, `required` the paths the Layout must each name (the packages of
    workflow_scripts/). -> (names that are not in the tree, required paths not named). A name `x/` is a
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
    return missing, [m for m in required if m not in named]


def tree_kind(path):
    full = REPO / path
    return "dir" if full.is_dir() else "file" if full.is_file() else None


def packages():
    """Every package (folder, at any depth) of workflow_scripts/, as the Layout must name it."""
    found = (p for p in sorted((REPO / "workflow_scripts").rglob("*")) if p.is_dir())
    return [p.relative_to(REPO).as_posix() for p in found if "__pycache__" not in p.parts]


def package_files(package):
    """What a package holds: its modules and data files (every file but __init__.py and hidden
    ones) and its subpackages, as `sub/`."""
    entries = (p for p in sorted((REPO / package).iterdir()) if p.name != "__init__.py" and p.name[0] != ".")
    return [f"{p.name}/" if p.is_dir() else p.name for p in entries if p.name != "__pycache__"]


def unplaced(docstring, files):
    """The entries of a package its docstring does not name: a module `x.py` is named as `x` or
    `x.py`, a subpackage `x/` as `x/` or `x`, any other file by its whole name, each in backticks."""
    named = set(NAME.findall(docstring or ""))
    short = {f: f[:-3] if f.endswith(".py") else f[:-1] if f.endswith("/") else f for f in files}
    return [f for f in files if f not in named and short[f] not in named]


def package_docstring(package):
    init = REPO / package / "__init__.py"
    return ast.get_docstring(ast.parse(init.read_text())) if init.exists() else None


def test_the_layout_is_the_tree():
    items = layout_items((REPO / "README.md").read_text())
    names = packages()
    assert len(items) > 10 and len(names) > 5, (items, names)
    missing, unlisted = layout_problems(items, tree_kind, names)
    assert not missing and not unlisted, (
        "README.md's Layout is not the tree:\n"
        + "".join(f"  missing: {m}\n" for m in missing)
        + "".join(f"  unlisted (place the package in the Layout, one line): {u}\n" for u in unlisted)
    )


def test_every_package_maps_its_modules():
    problems = []
    for package in packages():
        doc = package_docstring(package)
        if not doc:
            problems.append(f"{package}/__init__.py has no docstring (the package's map)")
            continue
        problems += [
            f"{package}/{f} (name it in {package}/__init__.py's docstring)"
            for f in unplaced(doc, package_files(package))
        ]
    assert not problems, "a package's docstring does not map it:\n" + "\n".join(f"  {p}" for p in problems)


def test_the_docstring_check_names_what_is_missing():
    doc = "The stage.\n\n    `one`   the first\n    `two.py` the second, beside `data.yaml`\n    three, unquoted\n"
    files = ["one.py", "two.py", "three.py", "data.yaml", "other.yaml"]
    assert unplaced(doc, files) == ["three.py", "other.yaml"]  # unquoted is not named
    assert unplaced(None, ["a.py"]) == ["a.py"]
    assert unplaced(doc.replace("`one`", "one"), ["one.py"]) == ["one.py"]
    assert unplaced("`data`", ["data.yaml"]) == ["data.yaml"]  # a data file by its whole name
    assert unplaced("`sub/` and `other`", ["sub/", "other/", "gone/"]) == ["gone/"]


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
    tree |= {"pkg/b": "dir", "pkg/b/two.py": "file", "pkg/new": "dir", "pkg/new/x.py": "file"}
    packages = [p for p, kind in tree.items() if p.startswith("pkg/") and kind == "dir"]
    missing, unlisted = layout_problems(items, tree.get, packages)
    assert missing == ["gone (in pkg/a/)", "lost/ (an item)"]
    assert unlisted == ["pkg/new"]  # a package the Layout has no line for
