"""A config key's default is written once, in schemas/config.schema.yaml: a script's flag named for a
key with a default takes it from there (common/schema.py's default()), not as a literal of its
own. The few flags below share a key's name without being that key, or keep a default of their own
by design, each with why. Every key a script names through default() exists."""

import ast

import pytest
from helpers import REPO

from workflow_scripts.common import schema

pytestmark = pytest.mark.unit

# (file, flag): why its literal default is not the config key's written again
OWN_DEFAULT = {
    ("data/tfrecord.py", "--train-shards"): "auto (the schema's) is resolved by the rules, embedded or real",
    ("data/tfrecord.py", "--val-shards"): "auto (the schema's) is resolved by the rules, embedded or real",
    ("data/index.py", "--settle-s"): "a tree indexed by hand is not refused; the rule passes dataset.settle_s",
    ("int8/export.py", "--classes"): "a random network's outputs, not the embedded set's classes",
    ("int8/export.py", "--seed"): "a random network's weights, not a training or dataset seed",
    ("int8/throughput.py", "--duration-s"): "0 times by count (ONNX Runtime); TensorRT's duration is passed",
    ("interconnect/bandwidth_rows.py", "--system"): "the name put on the rows, not inference.system",
    ("train/harness.py", "--classes"): "synthetic data's classes (0: 1000), not the embedded set's",
}


def keys_with_defaults(node=None, path=()):
    """{leaf name: [dotted keys]} of every key with a scalar default."""
    out = {}
    for key, spec in ((node or schema.schema()).get("properties") or {}).items():
        if "default" in spec and not isinstance(spec["default"], (dict, list)):
            out.setdefault(key, []).append(".".join((*path, key)))
        for name, dotted in keys_with_defaults(spec, (*path, key)).items():
            out.setdefault(name, []).extend(dotted)
    return out


def flags():
    """(file, flag, default node or None) of every add_argument in workflow_scripts/."""
    root = REPO / "workflow_scripts"
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument" and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and str(first.value).startswith("--"):
                    default = next((k.value for k in node.keywords if k.arg == "default"), None)
                    yield str(path.relative_to(root)), first.value, default


def test_no_flag_writes_a_config_keys_default_again():
    keys = keys_with_defaults()
    twice = [
        f"{file} {flag} = {ast.unparse(default)} (config {', '.join(keys[name])})"
        for file, flag, default in flags()
        if (name := flag[2:].replace("-", "_")) in keys
        and isinstance(default, ast.Constant)
        and (file, flag) not in OWN_DEFAULT
    ]
    assert not twice, "defaults written again; take them with common.schema.default():\n" + "\n".join(twice)


def test_every_own_default_is_still_a_flag_with_a_literal():
    """The list above shrinks as flags are fixed: an entry whose flag no longer keeps its own
    default is stale."""
    literal = {(f, flag) for f, flag, d in flags() if isinstance(d, ast.Constant)}
    assert not set(OWN_DEFAULT) - literal, set(OWN_DEFAULT) - literal


def test_every_key_a_script_takes_its_default_from_exists():
    named = []
    for path in sorted((REPO / "workflow_scripts").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "config_default":
                named.append(node.args[0].value)
    assert len(named) > 30
    for dotted in named:
        schema.default(dotted)  # a KeyError names the key that is not in the schema


def test_a_literal_default_is_caught(tmp_path, monkeypatch):
    """The check itself fails on a flag that writes a key's default again."""
    bad = tmp_path / "workflow_scripts" / "x.py"
    bad.parent.mkdir()
    bad.write_text('import argparse\nargparse.ArgumentParser().add_argument("--max-batch", type=int, default=256)\n')
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    with pytest.raises(AssertionError, match=r"x.py --max-batch = 256 \(config inference.tensorrt.max_batch\)"):
        test_no_flag_writes_a_config_keys_default_again()
