"""A framework is one record (workflow_scripts/common/frameworks.py): the schema's lists of framework
names, the rules' {framework} constraints, the plan's maps and preflight's choices are all the
registry's, so a framework added to it and forgotten in one of them fails here, naming where."""

import re

import pytest
import yaml
from helpers import REPO

from workflow_scripts.common import frameworks, schema
from workflow_scripts.plan import data_plan, sweep

pytestmark = pytest.mark.unit


def framework_name_lists(node, path=""):
    """(where, names) of every list of framework names the schema holds: the enum of
    training.frameworks, and the keys of each object keyed by framework (envs, batch_per_gpu, ...)."""
    if not isinstance(node, dict):
        return
    props = node.get("properties") or {}
    if props and set(props) >= {"tensorflow", "pytorch"}:
        yield path, sorted(k for k in props if k in frameworks.NAMES or k in ("mxnet", "jax"))
    enum = (node.get("items") or {}).get("enum") if isinstance(node.get("items"), dict) else None
    if enum and "pytorch" in enum:
        yield f"{path}.items.enum", sorted(enum)
    for key, child in {**props, **(node.get("$defs") or {})}.items():
        yield from framework_name_lists(child, f"{path}.{key}" if path else key)


def test_the_schemas_framework_lists_are_the_registrys():
    """schema() fills every list from the registry; the file itself names no framework the registry
    lacks (a record removed leaves no key behind)."""
    found = list(framework_name_lists(schema.schema()))
    assert len(found) >= 4, found  # training.frameworks, envs, envs_gpu, framework_envs, batch_per_gpu
    wrong = [(where, names) for where, names in found if names != sorted(frameworks.NAMES)]
    assert wrong == [], f"schema lists whose frameworks are not the registry's {sorted(frameworks.NAMES)}: {wrong}"
    raw = yaml.safe_load(schema.SCHEMA.read_text())
    stale = [(where, names) for where, names in framework_name_lists(raw) if not set(names) <= set(frameworks.NAMES)]
    assert stale == [], f"schemas/config.schema.yaml names frameworks the registry lacks: {stale}"
    assert schema.default("training.frameworks") == list(frameworks.NAMES)


def test_no_rule_spells_out_the_framework_names():
    """A {framework} wildcard's constraint is frameworks.wildcard(), never a list of its own."""
    spelt = []
    for smk in sorted((REPO / "rules").glob("*.smk")):
        for n, line in enumerate(smk.read_text().splitlines(), 1):
            if re.search(r"framework\s*=\s*\"[a-z|]+\"", line):
                spelt.append(f"{smk.name}:{n}: {line.strip()}")
    assert spelt == []


def test_the_plans_maps_come_from_the_records():
    for f in frameworks.REGISTRY.values():
        assert sweep.FORMAT_OF[f.name] == f.data_format and sweep.TRAINER_OF[f.name] == f.trainer
        assert "synthetic" in f.inputs and f.gpu_input in f.inputs
        assert data_plan.conda_env(f.name) == f.conda and (REPO / "envs" / f.conda.removeprefix("../envs/")).is_file()
        assert (REPO / "workflow_scripts" / "train" / f"{f.trainer}.py").is_file()
        assert (REPO / "workflow_scripts" / "preflight" / f"{f.preflight}.py").is_file()
        assert (REPO / (f.threads.replace(".", "/") + ".py")).is_file()
    # a format two frameworks read is converted once, its jobs run in the first one's interpreter
    assert data_plan.FRAMEWORK_OF_FORMAT == {"tfrecord": "tensorflow", "recordio": "mxnet", "lmdb": "pytorch"}


def test_a_registered_framework_joins_every_list():
    """A name the registry adds is in every list of framework names schema() makes from the file."""
    raw = yaml.safe_load(schema.SCHEMA.read_text())
    found = dict(framework_name_lists(schema.with_frameworks(raw, (*frameworks.NAMES, "jax"))))
    assert len(found) >= 4 and all("jax" in names for names in found.values()), found
