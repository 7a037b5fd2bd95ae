"""Words a newcomer can read. The source documents go by the short names docs/glossary.md defines
once (never by the number the project's early history gave them), the code's docstrings and
comments cite no numbered runs of the benchmark's history (what a run decided is in
docs/decisions.md, the runs themselves in docs/benchmarks.md and docs/history/; code links there),
and the README leads to the glossary.

Read in this process, without git: the files are the working tree's, less the hidden folders (the
environments, git's own) and what the top-level .gitignore leaves out (the pipeline's outputs)."""

import ast
import io
import os
import re
import tokenize
from fnmatch import fnmatch
from pathlib import Path

import pytest
from helpers import links

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
GLOSSARY = REPO / "docs" / "glossary.md"
# A source document by its number: the word, then 00 and a digit, also across a line break or in
# an identifier.
NUMBERED = re.compile(rb"(?i)(?<![a-z])seeds?[\s_]+00\d")
# A numbered run of the benchmark's history cited in prose: the word run or runs, a number or a
# range, then a possessive, a bracket or punctuation; not a count or a duration, which a unit or a
# noun follows.
RUN_NUMBER = re.compile(r"\bruns?\s+\d+(?:-\d+)?(?=['’]s\b|-\d|[),;:]|\.(?!\d)|[ \t]*$|\s+\()", re.I | re.M)
CODE = ["workflow_scripts", "benchmarks", "envs", "tests"]
DOCUMENTS = ["The study", "The slides", "The Dell EMC guide", "The scale-out whitepaper", "The Brookhaven paper"]


def ignore_patterns():
    lines = (REPO / ".gitignore").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def ignored(rel, is_dir, patterns):
    """Whether a path (relative, with /) matches one of .gitignore's patterns, as git reads them."""
    for pattern in patterns:
        if pattern.endswith("/") and not is_dir:
            continue
        p = pattern.strip("/")
        if "/" in pattern.rstrip("/"):  # anchored at the top
            if fnmatch(rel, p):
                return True
        elif fnmatch(rel.rsplit("/", 1)[-1], p):
            return True
    return False


def repository_files():
    patterns = ignore_patterns()
    for root, dirs, files in os.walk(REPO):
        base = Path(root).relative_to(REPO).as_posix()
        rel = (lambda name: name) if base == "." else (lambda name: f"{base}/{name}")
        dirs[:] = [d for d in dirs if not (d.startswith(".") and d != ".ci") and not ignored(rel(d), True, patterns)]
        for name in files:
            if not ignored(rel(name), False, patterns):
                yield REPO / rel(name)


def section(text, heading):
    """The text under a `## heading`, up to the next heading of that level."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def docstrings_and_comments(path):
    """(where, text) of every docstring and comment of a Python file."""
    source = path.read_text()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                yield f"docstring of {getattr(node, 'name', 'the module')}", doc
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield f"comment on line {token.start[0]}", token.string


def test_the_patterns_tell_a_reference_from_a_count():
    assert NUMBERED.search(("seed" + " 002's long test").encode())
    assert NUMBERED.search(("Seed" + "\n004, section III").encode())
    assert NUMBERED.search(("is_" + "seed_" + "002s_schedule").encode())
    assert not NUMBERED.search(b"seed 0, batch 256") and not NUMBERED.search(b"shuffle_seed: 0")
    for cited in (
        "run" + " 18's trace",
        "(run" + " 7)",
        "runs" + " 11-23 showed",
        "before run" + " 40\n",
        "run" + " 40 (x",
    ):
        assert RUN_NUMBER.search(cited), cited
    for count in ("runs 2 processes", "once it has\nrun 20 s (past", "runs 2-process jobs", "runs of 1-4 epochs"):
        assert not RUN_NUMBER.search(count), count


def test_source_documents_go_by_their_short_names():
    text = GLOSSARY.read_text()
    defined = section(text, "The source documents")
    for name in DOCUMENTS:
        assert f"\n### {name}\n" in defined, f"docs/glossary.md defines no {name!r}"
    found = []
    for path in repository_files():
        data = path.read_bytes()
        if path == GLOSSARY:  # its definitions name the old numbers, once
            data = (text.replace(defined, "")).encode()
        for m in NUMBERED.finditer(data):
            line = data.count(b"\n", 0, m.start()) + 1
            found.append(f"{path.relative_to(REPO)}:{line}: {m.group().decode()!r}")
    assert not found, "a source document by its number; use its short name (docs/glossary.md):\n" + "\n".join(found)


def test_docstrings_and_comments_cite_no_numbered_runs():
    found = []
    for folder in CODE:
        for path in sorted((REPO / folder).rglob("*.py")):
            for where, text in docstrings_and_comments(path):
                found += [f"{path.relative_to(REPO)}, {where}: {m.group()!r}" for m in RUN_NUMBER.finditer(text)]
    assert not found, (
        "a numbered run in code; say why in a word and link docs/decisions.md (or docs/benchmarks.md):\n"
        + "\n".join(found)
    )


def test_the_readme_links_the_glossary():
    targets = [target.partition("#")[0] for _, target in links(REPO / "README.md")]
    assert "docs/glossary.md" in targets, "README.md does not link docs/glossary.md"
