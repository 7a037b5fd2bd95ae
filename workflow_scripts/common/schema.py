"""The config schema (schemas/config.schema.yaml) as the one definition of a config-backed flag:
its type, default, choices and description give the rules' argv words, a trainer's argparse
flags and the docs' option tables, so adding an option is a schema entry plus its use.

A key `some_key` is the flag `--some-key`; YAML booleans are the words on and off.

The lists of framework names are the registry's (common/frameworks.py): an object keyed by framework
says `x-each-framework: SPEC`, and gets SPEC for every registered framework it does not spell out;
an enum of framework names says `x-frameworks: true`, and holds the registry's names."""

import argparse
import contextlib
import copy
import functools
import json
import re
import tempfile
from pathlib import Path

import yaml

from . import frameworks

# Beside the package in the repository: an editable install, a checkout bound into a container
# and put on its PYTHONPATH, and an image's copy all keep this layout.
SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"


@functools.cache
def as_written():
    """schemas/config.schema.yaml as the file says it."""
    return yaml.safe_load(SCHEMA.read_text())


@functools.cache
def schema():
    return with_frameworks(as_written(), frameworks.NAMES)


def with_frameworks(node, names):
    """`node` (the schema, or part of it) with its framework lists made the registry's `names`."""
    if isinstance(node, list):
        return [with_frameworks(item, names) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: with_frameworks(value, names) for key, value in node.items()}
    if out.get("x-frameworks"):
        out["enum"] = list(names)
    each = out.get("x-each-framework")
    if each is not None:
        props = out.setdefault("properties", {})
        props.update({name: copy.deepcopy(each) for name in names if name not in props})
    return out


@contextlib.contextmanager
def validation_file():
    """A file of the schema as schema() holds it, for Snakemake's validate(), which reads a file:
    SCHEMA itself where the registry adds nothing to it, else a copy for as long as it is used."""
    if schema() == as_written():
        yield SCHEMA
        return
    with tempfile.NamedTemporaryFile("w", prefix="config.schema.", suffix=".json") as f:
        json.dump(schema(), f)
        f.flush()
        yield Path(f.name)


def section(dotted):
    """{key: spec} of the config object at a dotted path, e.g. "training.pytorch", in schema order."""
    node = schema()
    for part in dotted.split("."):
        node = node["properties"][part]
    return node["properties"]


def flag(key):
    return "--" + key.replace("_", "-")


def word(value):
    """A config value as the word a flag takes."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def argv(values, dotted, keys=None, *, quiet=(), joined=False):
    """The section's values as flag words: every key in schema order, or `keys` in their order (the
    order is part of a rule's params: a changed order would rerun its jobs). A list is its flag and
    one word per item (an empty one the flag alone); None adds no word (such a key's flag defaults
    to None). quiet: keys that add no word at their schema default, so that a key added after runs
    were made reruns none of them. joined: --flag=value, one word, for a value that may start
    with a dash (a command)."""
    specs = section(dotted)
    words = []
    for key in keys or specs:
        value = values[key]
        if value is None or (key in quiet and value == specs[key]["default"]):
            continue
        if isinstance(value, list):
            words += [flag(key), *map(word, value)]
        else:
            words += [f"{flag(key)}={word(value)}"] if joined else [flag(key), word(value)]
    return words


def choices(spec):
    """The words a key takes when it is a closed set (enum, boolean, const or boolean), else None."""
    if "enum" in spec:
        return [word(v) for v in spec["enum"]]
    if spec.get("type") == "boolean":
        return ["on", "off"]
    alternatives = spec.get("oneOf", [])
    if alternatives and all("const" in a or a.get("type") == "boolean" for a in alternatives):
        return [w for a in alternatives for w in ([word(a["const"])] if "const" in a else ["on", "off"])]
    return None


class Value:
    """argparse type of a numeric key: its JSON-schema type and bounds, plus any const
    alternatives (e.g. auto) taken as they are."""

    def __init__(self, key, spec, config_key=None):
        alternatives = spec.get("oneOf", [spec])
        self.key, self.config_key = key, config_key or key
        self.consts = [a["const"] for a in alternatives if "const" in a]
        self.spec = next(a for a in alternatives if "type" in a)
        self.__name__ = self.spec["type"]

    def rule(self):
        s = self.spec
        parts = ["an integer" if s["type"] == "integer" else "a number"]
        parts += [
            f"{w} {s[k]}"
            for k, w in (("minimum", "at least"), ("exclusiveMinimum", "above"), ("maximum", "at most"))
            if k in s
        ]
        return ", ".join(parts) + "".join(f", or {c}" for c in self.consts)

    def __call__(self, text):
        if text in self.consts:
            return text
        s = self.spec
        try:
            value = int(text) if s["type"] == "integer" else float(text)
        except ValueError:
            value = None
        if (
            value is None
            or value < s.get("minimum", value)
            or value > s.get("maximum", value)
            or ("exclusiveMinimum" in s and value <= s["exclusiveMinimum"])
        ):
            raise argparse.ArgumentTypeError(f"{flag(self.key)} {text}: {self.rule()} (config {self.config_key})")
        return value


class Text:
    """argparse type of a string key: its pattern, where the schema gives one."""

    __name__ = "string"

    def __init__(self, key, spec, config_key):
        self.key, self.config_key, self.pattern = key, config_key, spec.get("pattern")

    def __call__(self, text):
        if self.pattern and not re.search(self.pattern, text):
            raise argparse.ArgumentTypeError(
                f"{flag(self.key)} {text!r}: must match {self.pattern} (config {self.config_key})"
            )
        return text


def argument(key, spec, config_key, more_choices=()):
    """add_argument's keywords for one key: its default, choices (with more_choices, words a script
    takes beyond the config's) or type, and help, all from the schema. An array is a flag of
    nargs="*", each word its items' kind."""
    one = spec["items"] if spec.get("type") == "array" else spec
    words = choices(one)
    if words:
        kind = {"choices": [*words, *more_choices]}
    else:
        numeric = any(a.get("type") in ("integer", "number") for a in one.get("oneOf", [one]))
        kind = {"type": (Value if numeric else Text)(key, one, config_key)}
    # Through the type, as a given word would be: a default of 25 is the 25.0 that --x 25 gives.
    given = kind.get("type", str)
    default = spec["default"]
    if spec.get("type") == "array":
        kind["nargs"] = "*"
        default = [given(word(v)) for v in default]
    elif default is not None:
        default = given(word(default))
    return {"default": default, "help": spec.get("description", ""), **kind}


def add_arguments(group, dotted, keys=None, *, more_choices=None):
    """One flag per key of the section (or per one of `keys`): default, choices or type, and help
    from the schema (argument()). more_choices: {key: words} a script takes beyond the config's."""
    specs = section(dotted)
    for key in keys or specs:
        extra = (more_choices or {}).get(key, ())
        group.add_argument(flag(key), **argument(key, specs[key], f"{dotted}.{key}", extra))
    return group


def default(dotted):
    """The schema's default of a config key, e.g. "inference.tensorrt.max_batch": the flag of a
    script that takes that key defaults to it, so that the default is written once."""
    *parents, key = dotted.split(".")
    node = section(".".join(parents)) if parents else schema()["properties"]
    return node[key]["default"]
