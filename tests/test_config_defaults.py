"""config.yaml restates every key for the user to edit, but a default has one home, the schema: every
value config.yaml gives a key with a schema default equals that default, unless the key's comment
says why the embedded default differs ("[embedded, not the schema's <value>: <why>]"), and a key
that says so does differ. A value changed in one file and not the other fails here."""

import re

import pytest
import yaml
from helpers import REPO

from workflow_scripts.common import schema

pytestmark = pytest.mark.unit

MARK = re.compile(r"\[embedded, not the schema's (.+?): ")


def leaves(config, node, path=()):
    """(dotted key, value, schema default) of every value of `config` whose key has a scalar or list
    default in the schema `node`; a mapping the schema leaves open (systems, models) is the user's."""
    for key, value in config.items():
        spec = (node.get("properties") or {}).get(key)
        if spec is None:
            continue
        if isinstance(value, dict) and "properties" in spec:
            yield from leaves(value, spec, (*path, key))
        elif "default" in spec:
            yield ".".join((*path, key)), value, spec["default"]


def comments(text):
    """{dotted key: its line's comment and its continuation lines'} of a YAML file written as
    config.yaml is (two-space indents, one key a line, comments aligned after it)."""
    found, stack, last, indent = {}, [], None, 0
    for line in text.splitlines():
        m = re.match(r"^( *)([A-Za-z_0-9]+):(.*)$", line)
        margin = len(line) - len(line.lstrip())
        if m:
            indent = len(m.group(1))
            stack = [*stack[: indent // 2], m.group(2)]
            last = ".".join(stack)
            found[last] = m.group(3).partition("#")[2]
        elif last and line.strip().startswith("#") and margin > indent + 4:  # aligned under the comment
            found[last] += " " + line.strip()[1:]
        else:
            last = None
    return found


def default_problems(config_text, schema_tree):
    """What ties config.yaml to the schema's defaults wrongly: a value that differs without saying
    so, or a key that says it differs and does not (or names another schema value)."""
    said, problems = comments(config_text), []
    for key, value, default in leaves(yaml.safe_load(config_text), schema_tree):
        mark = MARK.search(" ".join(said.get(key, "").split()))
        if value != default and not mark:
            problems.append(
                f"{key}: {value!r} here, {default!r} in the schema, and no [embedded, not the schema's ...]"
            )
        elif value == default and mark:
            problems.append(f"{key}: says it differs from the schema, but both are {value!r}")
        elif mark and yaml.safe_load(mark.group(1)) != default:
            problems.append(f"{key}: names the schema's value as {mark.group(1)}, the schema's is {default!r}")
    return problems


def test_config_yaml_restates_the_schemas_defaults_or_says_why_not():
    text = (REPO / "config.yaml").read_text()
    differing = [k for k, v, d in leaves(yaml.safe_load(text), schema.schema()) if v != d]
    assert "training.gpus" in differing, differing  # the check reads the keys it should
    assert default_problems(text, schema.schema()) == []


def test_the_check_names_a_silent_difference_and_a_stale_mark():
    tree = {"properties": {"a": {"default": 1}, "s": {"properties": {"b": {"default": [2]}, "c": {"default": None}}}}}
    text = (
        "a: 3               # a key [embedded, not the schema's 1: why]\n"
        "s:\n"
        "  b: [2]           # [embedded, not the schema's [2]: stale]\n"
        "  c: 5             # a key whose reason\n"
        "                   # is on the line below [embedded, not the schema's 4: wrong value]\n"
    )
    assert default_problems(text, tree) == [
        "s.b: says it differs from the schema, but both are [2]",
        "s.c: names the schema's value as 4, the schema's is None",
    ]
    assert default_problems(text.replace("# a key [embedded", "# a key [other"), tree)[0].startswith("a: 3 here, 1")
