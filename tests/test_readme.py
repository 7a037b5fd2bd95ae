"""The README's commands are the ones the tests run, and the documentation's links lead somewhere.

Every ```bash block of README.md must be run by a test exactly as written: the quick start's
second command is what .ci/run runs, the "Changing settings" block is run by
tests/test_faults.py::test_a_second_config_file_overrides_nested_keys. A new block fails here until
a test runs it. Relative links of README.md and docs/ must name an existing file and, with a
#fragment, an existing heading of it (GitHub's anchors)."""

import re

import pytest
from helpers import REPO, anchors, bash_blocks, links

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
