"""The scaling prediction's command line from config.yaml's prediction section (rules/predict.smk):
every key in schema order, a key of intra_node or inter_node as --intra-node-KEY, null as the word
null, a bucket size per framework as FRAMEWORK=MIB,... (predict/prediction_settings.py's flags).
Every key is passed, so an edit of any reruns the stage and no other."""

from ..common import schema

SECTION = "prediction"


def word(value):
    if value is None:
        return "null"
    if isinstance(value, dict):
        return ",".join(f"{k}={schema.word(v)}" for k, v in sorted(value.items()))
    return schema.word(value)


def prediction_args(values):
    """The flag words of the section's values (a validated config's, every key present)."""
    out = []
    for key, spec in schema.section(SECTION).items():
        if spec.get("type") == "object":
            for sub in schema.section(f"{SECTION}.{key}"):
                out += [schema.flag(f"{key}_{sub}"), word(values[key][sub])]
        else:
            out += [schema.flag(key), word(values[key])]
    return out
