"""docs/benchmarks.md's commands rerun its tables: every command of its ```bash blocks names an
existing script, plan, trainer flag or Snakemake rule, and parses. The benchmark scripts are
checked with their own --dry-run (no GPU needed); a trainer command, and every plan's trainer
command, with pytorch_ddp's own argument parser, so a plan that uses a flag the trainer no longer
has fails here."""

import json
import re
import shlex
import subprocess

import pytest
from helpers import REPO, TRAINERS, bash_blocks, interpreter

DOC = REPO / "docs" / "benchmarks.md"
TRAINER = TRAINERS["pytorch"]

# Runs in the torch environment: each job is (what, argv); prints one JSON line of failures.
DRIVER = r"""
import contextlib, importlib, io, json, sys
from benchmarks import gpu_parts, plans, pytorch_gpu
failures = []
def attempt(label, fn):
    err, out = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            fn()
    except SystemExit as exc:
        if exc.code not in (None, 0):
            failures.append(f"{label}: {exc.code if isinstance(exc.code, str) else err.getvalue().strip()[-400:]}")
    except Exception as exc:
        failures.append(f"{label}: {type(exc).__name__}: {exc}")
    return out.getvalue()
jobs = json.loads(sys.argv[1])
for what, argv in jobs:
    if what == "trainer":
        attempt(f"{what} {argv}", lambda: gpu_parts.trainer_parser().parse_args(argv))
    else:
        module = importlib.import_module(what)
        attempt(f"{what} {argv}", lambda: module.main([*argv, "--dry-run"]))
for plan in plans.PLANS:
    printed = attempt(f"plan {plan}", lambda: pytorch_gpu.main(["--plan", plan, "--gpus", "2", "--dry-run"]))
    if plan not in printed:
        failures.append(f"plan {plan}: the dry run printed no commands")
plans.PLANS["bad"] = {"measures": "a flag the trainer lacks", "items": [plans.run("x", words="--no-such-flag 1")]}
attempt("refused", lambda: pytorch_gpu.main(["--plan", "bad", "--dry-run"]))
print(json.dumps(failures))
"""


def commands(text):
    """Every command of the document's bash blocks: continuation lines joined, comments and
    `&&` chains split, leading `export` and VAR=value words dropped."""
    out = []
    for _, block in bash_blocks(text):
        for line in block.replace("\\\n", " ").splitlines():
            for part in line.split("&&"):
                words = shlex.split(part, comments=True)
                if words and words[0] == "export":
                    continue
                while words and re.match(r"^[A-Z_]+=", words[0]):
                    words = words[1:]
                if words:
                    out.append(words)
    return out


def rules():
    text = (REPO / "Snakefile").read_text() + "".join(p.read_text() for p in (REPO / "rules").glob("*.smk"))
    return set(re.findall(r"^rule (\w+):", text, re.M))


def jobs_of(cmds):
    """(module to dry-run or 'trainer', its argv) of each benchmark and trainer command; the
    problems of the others (a missing script, an unknown Snakemake target)."""
    jobs, problems, known = [], [], rules()
    for words in cmds:
        shown = " ".join(words)
        if "-m" in words:
            module, argv = words[words.index("-m") + 1], words[words.index("-m") + 2 :]
            if module == TRAINER:
                jobs.append(("trainer", argv))
            elif module.startswith("benchmarks."):
                if not (REPO / (module.replace(".", "/") + ".py")).exists():
                    problems.append(f"{shown}: no {module}")
                jobs.append((module, argv))
        elif any(w.startswith("benchmarks/") and w.endswith(".py") for w in words):
            i = next(i for i, w in enumerate(words) if w.startswith("benchmarks/"))
            if not (REPO / words[i]).exists():
                problems.append(f"{shown}: no {words[i]}")
            jobs.append((words[i][:-3].replace("/", "."), [w.replace("$OUT", "/tmp/out") for w in words[i + 1 :]]))
        elif words[0].endswith("snakemake"):
            targets = [w for w in words[1:] if not w.startswith("-")]
            problems += [f"{shown}: no rule {t}" for t in targets if "/" not in t and t not in known]
    return jobs, problems


@pytest.mark.stage
def test_every_command_of_docs_benchmarks_names_something_that_exists_and_parses():
    jobs, problems = jobs_of(commands(DOC.read_text()))
    assert any(m == "benchmarks.pytorch_gpu" for m, _ in jobs), "no pytorch_gpu command found in the document"
    assert {m for m, _ in jobs} >= {
        "benchmarks.pipeline_gpu",
        "benchmarks.conversion",
        "benchmarks.int8_throughput",
        "trainer",
    }
    proc = subprocess.run(
        [interpreter("pytorch"), "-c", DRIVER, json.dumps(jobs)], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    failures = json.loads(proc.stdout.strip().splitlines()[-1])
    refused = [f for f in failures if f.startswith("refused")]
    assert refused and "--no-such-flag" in refused[0], (
        f"a plan with an unknown trainer flag was not refused: {failures}"
    )
    assert not problems + [f for f in failures if not f.startswith("refused")]


@pytest.mark.unit
def test_the_command_parser_finds_commands_in_chains_and_continuations():
    text = (
        "## x\n```bash\nexport A=1\nmkdir -p /tmp/c && A=2 python3 benchmarks/pipeline_gpu.py --out $OUT \\\n"
        "  --budget-s 5   # note\npython3 -m benchmarks.pytorch_gpu --plan nope\n.venv/bin/snakemake no_such_rule\n```\n"  # noqa: E501
    )
    jobs, problems = jobs_of(commands(text))
    assert jobs == [
        ("benchmarks.pipeline_gpu", ["--out", "/tmp/out", "--budget-s", "5"]),
        ("benchmarks.pytorch_gpu", ["--plan", "nope"]),
    ]
    assert problems == [".venv/bin/snakemake no_such_rule: no rule no_such_rule"]
