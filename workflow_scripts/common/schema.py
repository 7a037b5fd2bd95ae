"""The config schema (schemas/config.schema.yaml) as the one definition of a config-backed flag:
its type, default, choices and description give the rules' argv words, a trainer's argparse
flags and the docs' option tables, so adding an option is a schema entry plus its use.

A key `some_key` is the flag `--some-key`; YAML booleans are the words on and off."""

import argparse
import functools
from pathlib import Path

import yaml

# Beside the package in the repository: an editable install, a checkout bound into a container
# and put on its PYTHONPATH, and an image's copy all keep this layout.
SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"


@functools.cache
def schema():
    return yaml.safe_load(SCHEMA.read_text())


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


def argv(values, dotted):
    """The section's values as flag words, every key in schema order (the order is part of a
    rule's params: a changed order would rerun its jobs)."""
    return [w for key in section(dotted) for w in (flag(key), word(values[key]))]


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


def add_arguments(group, dotted):
    """One flag per key of the section: default, choices or type, and help from the schema."""
    for key, spec in section(dotted).items():
        words = choices(spec)
        kind = {"choices": words} if words else {"type": Value(key, spec, f"{dotted}.{key}")}
        # Through the type, as a given word would be: a default of 25 is the 25.0 that --x 25 gives.
        default = word(spec["default"]) if words else kind["type"](word(spec["default"]))
        group.add_argument(flag(key), default=default, help=spec.get("description", ""), **kind)
    return group


def default(dotted):
    """The schema's default of a config key, e.g. "inference.tensorrt.max_batch": the flag of a
    script that takes that key defaults to it, so that the default is written once."""
    *parents, key = dotted.split(".")
    node = section(".".join(parents)) if parents else schema()["properties"]
    return node[key]["default"]
