"""The checkout under test and its config.yaml, and configs made from it."""

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())
# The embedded default's long test: training.long_test.gpus auto is [2] there (none on a real dataset).
LONG_TEST_GPUS = [2] if CONFIG["training"]["long_test"]["gpus"] == "auto" else CONFIG["training"]["long_test"]["gpus"]


def with_overrides(config, **overrides):
    cfg = yaml.safe_load(yaml.safe_dump(config))
    for dotted, value in overrides.items():
        node = cfg
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return cfg


def validated(config):
    """`config` with the schema's defaults filled in, as Snakemake's validate() leaves it when the
    workflow is parsed (for tests of the plan's modules, which run without Snakemake)."""
    import jsonschema

    def set_defaults(validator, properties, instance, schema):
        for key, sub in properties.items():
            if isinstance(instance, dict) and "default" in sub:
                instance.setdefault(key, sub["default"])
        yield from jsonschema.Draft7Validator.VALIDATORS["properties"](validator, properties, instance, schema)

    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    jsonschema.validators.extend(jsonschema.Draft7Validator, {"properties": set_defaults})(schema).validate(config)
    return config
