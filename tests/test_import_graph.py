"""The package's import structure: no import circle between modules or between the stage packages,
shared code below the stages that use it, and no two modules with one file name (a traceback or a
`python -m` line names its module unambiguously)."""

import ast

import pytest
from helpers import REPO

pytestmark = pytest.mark.unit

ROOT = REPO / "workflow_scripts"
# Each package may import only those below it: common holds the small shared helpers, cluster (just
# above it) what touches the machine and the scheduler; a stage imports both, the data it reads, and
# the stages whose work it plans or checks.
LAYERS = {
    "common": set(),
    "cluster": {"common"},
    "data": {"common", "cluster"},
    "train": {"common", "cluster", "data"},
    "int8": {"common", "cluster", "data"},
    "interconnect": {"common", "cluster"},
    "plan": {"common", "cluster", "data", "train", "int8", "interconnect"},
    "preflight": {"common", "cluster", "train"},
    "results": {"common", "cluster", "interconnect"},
    "predict": {"common", "cluster", "interconnect"},
}


def modules():
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports(mods):
    """{module: the workflow_scripts modules it imports}."""
    edges = {}
    for mod, path in mods.items():
        pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                for alias in node.names:
                    found.add(f"{src}.{alias.name}" if f"{src}.{alias.name}" in mods else src)
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
        edges[mod] = {m for m in found if m in mods and m != mod}
    return edges


def cycles(edges):
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def package(mod):
    parts = mod.split(".")
    return parts[1] if len(parts) > 2 else None


def test_no_import_circle_between_modules():
    assert cycles(imports(modules())) == []


def test_each_package_imports_only_those_below_it():
    wrong = set()
    for mod, targets in imports(modules()).items():
        a = package(mod)
        for t in targets:
            b = package(t)
            if a and b and a != b and b not in LAYERS.get(a, set()):
                wrong.add(f"{mod} imports {t}")
    assert not wrong, sorted(wrong)
    assert {package(m) for m in modules() if package(m)} <= set(LAYERS), "a new package needs its layer"


def test_no_two_modules_share_a_file_name():
    names = {}
    for mod, path in modules().items():
        if path.name != "__init__.py":
            names.setdefault(path.name, []).append(mod)
    assert {n: m for n, m in names.items() if len(m) > 1} == {}


def test_a_circle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
