"""One definition per option: training.pytorch's keys in schemas/config.schema.yaml are the
trainer's flags (same defaults, choices and help), the rules' argv words (every key, generically,
in schema order), and docs/training.md's table (generated, fresh); the figures that chose the
defaults live in docs/decisions.md, not in config comments, schema descriptions or --help."""

import json
import re
import subprocess
import sys

import pytest
import yaml
from helpers import REPO, TRAINERS, anchors, interpreter, snakemake, write_config

from workflow_scripts.common import options_table, schema
from workflow_scripts.results import guards

SECTION = "training.pytorch"
PARSER = """
import argparse, json
from workflow_scripts.train import pytorch_options as o
ap = o.add_args(argparse.ArgumentParser())
flags = {a.option_strings[0]: {"dest": a.dest, "default": a.default, "choices": list(a.choices or []) or None,
                               "help": a.help} for a in ap._actions if a.option_strings and a.dest != "help"}
consts = {k: getattr(o, k) for k in ("DALI_PREFETCH", "GPU_PREFETCH", "DALI_TRAINER_CORES", "DALI_MAX_THREADS",
                                     "DALI_CPU_DECODER_MIN_CPUS", "DALI_HW_SHARE", "DALI_THREADS_PER_GPU_THREAD",
                                     "GPU_DECODE_WORKERS", "DALI_POOLS_MB")}
print(json.dumps({"flags": flags, "consts": consts}))
"""
# Figures of a measurement: a share, a rate, a duration, a run count or citation, a CV, or the word.
FIGURE = re.compile(
    r"(?<![\w.])\d[\d.,]*\s*(?:%|ms\b|µs\b|s\b|min\b|images?/s\b|img/s\b)|\bruns? \d|\b\d+ (?:of \d+ )?runs\b"
    r"|\bCV\b[^.;)]*\d|\bmeasured\b",
    re.IGNORECASE,
)
DECISION_LINK = re.compile(r"docs/decisions\.md#([\w-]+)")


@pytest.fixture(scope="module")
def trainer():
    """The trainer's training.pytorch flags as its own environment builds them, run from outside
    the repository (the schema is found beside the package, not in the working directory)."""
    proc = subprocess.run(
        [interpreter("pytorch"), "-c", PARSER],
        cwd="/",
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.mark.stage
def test_trainer_flags_are_the_schema(trainer):
    flags = {f: v for f, v in trainer["flags"].items() if f != "--input"}  # --input: training.inputs
    specs = schema.section(SECTION)
    assert sorted(flags) == sorted(schema.flag(k) for k in specs), "a flag without a schema key, or the reverse"
    for key, spec in specs.items():
        got = flags[schema.flag(key)]
        assert got["dest"] == key
        assert got["help"] == spec["description"], key
        assert got["choices"] == schema.choices(spec), key
        default = schema.word(spec["default"])
        assert (got["default"] if got["choices"] else schema.word(got["default"])) in (default, f"{default}.0"), key


@pytest.mark.stage
def test_descriptions_state_the_code_rules(trainer):
    """The numbers a description gives for 0 or auto are the trainer's constants."""
    c, d = trainer["consts"], {k: s["description"] for k, s in schema.section(SECTION).items()}
    assert f"0: {c['DALI_PREFETCH']} with dali, {c['GPU_PREFETCH']} with gpu" in d["prefetch"]
    assert f"at most {c['GPU_DECODE_WORKERS']} with input gpu" in d["loader_workers"]
    assert (
        f"cores per GPU, at most {c['DALI_MAX_THREADS']}, from {c['DALI_CPU_DECODER_MIN_CPUS']} cores per GPU up, "
        f"below that cores per GPU - {c['DALI_TRAINER_CORES']}"
    ) in " ".join(d["loader_workers"].split())
    assert f"auto: cpu where a rank has {c['DALI_CPU_DECODER_MIN_CPUS']} CPUs or more" in d["dali_decoder"]
    assert f"auto: {c['DALI_HW_SHARE']}" in d["dali_hw_share"]
    assert f"0: one in {c['DALI_THREADS_PER_GPU_THREAD']}, at least 1" in d["dali_gpu_threads"]
    assert f"auto: {c['DALI_POOLS_MB'][0]} at batch 256" in d["dali_pinned_mb"]
    assert f"auto: {c['DALI_POOLS_MB'][1]} at batch 256" in d["dali_device_mb"]
    # the epoch-turnover guard's threshold is DALI's default queue (results/guards.py says why)
    assert guards.MIN_STEPS_PER_EPOCH == c["DALI_PREFETCH"]


def other_value(spec):
    """A valid value of the key other than its default."""
    words = spec.get("enum") or [a["const"] for a in spec.get("oneOf", []) if "const" in a]
    if spec.get("type") == "boolean" or any(a.get("type") == "boolean" for a in spec.get("oneOf", [])):
        return not spec["default"] if isinstance(spec["default"], bool) else False
    others = [v for v in words if v != spec["default"]]
    if others:
        return others[0]
    number = next(a for a in spec.get("oneOf", [spec]) if a.get("type") in ("integer", "number"))
    low = number.get("minimum", number.get("exclusiveMinimum", 0))
    value = low + 1 if number["type"] == "integer" else (low + number.get("maximum", low + 2)) / 2
    return value if value != spec["default"] else value + 1


def pytorch_argv(workdir):
    out = snakemake(workdir, "all", "-n", "-p").stdout
    line = next(ln for ln in out.splitlines() if TRAINERS["pytorch"] in ln)
    words = line.split()
    return words[words.index("--amp-dtype") :]


@pytest.mark.stage
def test_rules_pass_every_key_generically(tmp_path):
    """Each key, set to a value other than its default, reaches the trainer as --<key> <word>, in
    the schema's order."""
    specs = schema.section(SECTION)
    values = {k: other_value(s) for k, s in specs.items()}
    write_config(tmp_path, training__pytorch=values)
    expected = [w for k in specs for w in (schema.flag(k), schema.word(values[k]))]
    assert pytorch_argv(tmp_path) == expected


@pytest.mark.stage
def test_default_argv_unchanged(tmp_path):
    """The default config's words for the keys that existed before the generic mapping, as they
    were and first: a changed order or word would be a params change and rerun every PyTorch run a
    user already has (a new key, appended, reruns them once, as any new option must). tf32 left
    training.pytorch for training.fp32_math, which covers all three frameworks. dali_decoder's
    default became auto (issue 60: the hardware decoder where a rank has few CPUs), which reruns
    them once as well, as a new default must."""
    write_config(tmp_path)
    assert " ".join(pytorch_argv(tmp_path)).startswith(
        "--amp-dtype auto --channels-last auto --compile auto --hw-decoder-load 0.9 --dali-decoder auto --prefetch 0 "
        "--dali-pinned-mb auto --dali-device-mb auto --loader-workers 0 --bucket-cap-mb 25 "
        "--input-lanes 1 --jpeg-decoder torchvision --ddp-graph auto --broadcast-buffers off --grad-compression none"
    )


@pytest.mark.stage
def test_option_tables_are_fresh():
    proc = subprocess.run(
        [sys.executable, "-m", "workflow_scripts.common.options_table", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert any(p.name == "training.md" for p in options_table.pages())


@pytest.mark.unit
def test_a_stale_table_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"<!-- options: {SECTION} -->\n| old | table |\n<!-- /options -->\n")
    text = options_table.render(page)
    assert text != page.read_text() and "| `hw_decoder_load` | `0.9` |" in text


def descriptions(node):
    if isinstance(node, dict):
        if isinstance(node.get("description"), str):
            yield node["description"]
        for v in node.values():
            yield from descriptions(v)
    elif isinstance(node, list):
        for v in node:
            yield from descriptions(v)


def config_comments():
    return [ln.split("#", 1)[1] for ln in (REPO / "config.yaml").read_text().splitlines() if "#" in ln]


def code_comments(path):
    """A module's comments and docstrings."""
    text = path.read_text()
    return re.findall(r"#.*", text) + re.findall(r'"""(.*?)"""', text, re.DOTALL)


def full_help():
    """The trainer's whole --help: the flags of every group, the shared ones included."""
    proc = subprocess.run(
        [interpreter("pytorch"), "-m", TRAINERS["pytorch"], "--help"],
        cwd="/",
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    return proc.stdout


@pytest.mark.stage
def test_no_measurement_figures(trainer):
    texts = {
        "config.yaml comment": config_comments(),
        "schema description": list(descriptions(yaml.safe_load(schema.SCHEMA.read_text()))),
        "trainer --help": [f["help"] for f in trainer["flags"].values()],
        "pytorch_options.py": code_comments(REPO / "workflow_scripts" / "train" / "pytorch_options.py"),
        "pytorch_ddp --help": [full_help()],
    }
    found = [
        f"{where}: {FIGURE.search(t).group(0)!r} in {t.strip()[:120]!r}"
        for where, items in texts.items()
        for t in items
        if FIGURE.search(t)
    ]
    assert not found, "figures belong in docs/decisions.md or docs/benchmarks.md:\n" + "\n".join(found)


@pytest.mark.unit
def test_decisions_links_resolve():
    decisions = REPO / "docs" / "decisions.md"
    have = anchors(decisions)
    sources = [
        schema.SCHEMA,
        REPO / "config.yaml",
        REPO / "workflow_scripts" / "train" / "pytorch_options.py",
        *sorted((REPO / "docs").glob("*.md")),
    ]
    links = {(p.name, m) for p in sources for m in DECISION_LINK.findall(p.read_text())}
    links |= {
        (p.name, m)
        for p in sorted((REPO / "docs").glob("*.md"))
        for m in re.findall(r"\]\(decisions\.md#([\w-]+)\)", p.read_text())
    }
    assert links and not [f"{name}: #{a}" for name, a in sorted(links) if a not in have]
    # Every entry: the question, the measurement that decided it and the answer.
    for entry in decisions.read_text().split("\n## ")[1:]:
        assert all(f"**{part}.**" in entry for part in ("Question", "Measurement", "Answer")), entry[:80]
