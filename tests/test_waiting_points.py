"""A point that waits for its nodes holds no table (plan/waiting.py, common/written_without.py): on a
partition of two 4-GPU nodes, one drained (sinfo faked, as in test_cluster_limits.py), the 8-GPU
point is planned waiting (systems.<name>.nodes_down: wait), and no table, figure or the verdict
depends on it; each is written from the points that finished, naming it, and written again once it
has run or its nodes are back."""

import json
import os
import re
import shlex
import shutil
import subprocess

import pytest
import yaml
from helpers import REPO, SNAKEMAKE, interpreter, write_config
from test_cluster_limits import fake_sinfo

from workflow_scripts.common import written_without as waiting_note
from workflow_scripts.common.errors import StageError
from workflow_scripts.plan.sweep import Sweep
from workflow_scripts.plan.waiting import Waiting, run_files

# Every output of the results that a waiting point could hold back.
RESULTS = [
    "training_tables",
    "training_figures",
    "interconnect_table",
    "interconnect_figure",
    "scaling_prediction",
    "time_to_accuracy",
    "time_to_accuracy_figure",
    "conclusions",
]
WAITING = "h100 at 8 GPUs"


def workdir(tmp_path, states=("idle", "drained"), **overrides):
    """A config of one system of two 4-GPU nodes at 4 and 8 GPUs, PyTorch once a point; the
    environment that finds the fake sinfo."""
    sysc = {
        "gpus_per_node": 4,
        "max_nodes": 2,
        "gpu_request": "gpus-per-node",
        "partition": "gpu",
        "cpus_per_task": 20,
        "time_min": 60,
        "envs": {fw: interpreter(fw) for fw in ("tensorflow", "mxnet", "pytorch")},
    }
    write_config(
        tmp_path,
        systems={"h100": sysc},
        training__systems=["h100"],
        training__gpus=[4, 8],
        training__frameworks=["pytorch"],
        training__repeats=1,
        **overrides,
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PATH"] = f"{fake_sinfo(tmp_path / 'bin', states=states)}{os.pathsep}{env['PATH']}"
    return env


def snakemake(tmp_path, env, *args):
    proc = subprocess.run(
        [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path), "--cores", "2", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc.stdout + proc.stderr


def planned(text):
    """{rule: [{inputs, outputs, shell}]} of a dry run's jobs."""
    jobs, job = {}, None
    for line in text.splitlines():
        head = re.match(r"^\s*(?:local)?rule (\w+):$", line)
        if head:
            job = {"inputs": [], "outputs": [], "shell": ""}
            jobs.setdefault(head.group(1), []).append(job)
        elif job is not None and line.strip().startswith(("input: ", "output: ")):
            key, value = line.strip().split(": ", 1)
            job[key + "s"] = value.split(", ")
        elif job is not None and line.startswith("Shell command: "):
            job["shell"] = line.removeprefix("Shell command: ")
    return jobs


def upstream(jobs, job):
    """Every file the job depends on, through the jobs that make its inputs."""
    maker = {out: j for js in jobs.values() for j in js for out in j["outputs"]}
    seen, todo = set(), list(job["inputs"])
    while todo:
        f = todo.pop()
        if f not in seen:
            seen.add(f)
            todo += maker[f]["inputs"] if f in maker else []
    return seen


def waiting_arg(shell):
    words = shlex.split(shell.split(" > ")[0])
    return json.loads(words[words.index("--waiting") + 1])


def finish(tmp_path, gpus):
    """A run of the point that has ended (failed: a record the tables read as it is)."""
    run = tmp_path / "results" / "runs" / "h100" / f"pytorch_fp32_{gpus}gpu"
    run.mkdir(parents=True, exist_ok=True)
    (run / "summary.json").write_text(json.dumps({"status": "failed", "reason": f"ended at {gpus}", "log": "x.log"}))


@pytest.mark.stage
def test_no_table_figure_or_verdict_waits_for_the_point_whose_nodes_are_down(tmp_path):
    jobs = planned(snakemake(tmp_path, workdir(tmp_path), "-n", "all"))
    # the point itself still runs once its nodes return
    assert any("pytorch_fp32_8gpu/summary.json" in j["outputs"][0] for j in jobs["train"]), sorted(jobs)
    for rule in RESULTS:
        (job,) = jobs[rule]
        held = sorted(f for f in upstream(jobs, job) if re.search(r"(runs/h100/\w+_8gpu|interconnect/h100/8gpu)/", f))
        assert not held, (rule, held)
    for rule in ("training_tables", "training_figures", "interconnect_table", "scaling_prediction", "conclusions"):
        said = waiting_arg(jobs[rule][0]["shell"])
        assert [(p["system"], p["gpus"]) for p in said] == [("h100", 8)], (rule, said)
        assert "g2 80 CPUs 4 GPUs 180000 MB drained" in said[0]["why"], said


@pytest.mark.stage
def test_the_tables_and_the_verdict_name_the_point_they_were_written_without(tmp_path):
    """The plan's own commands of the training tables and the verdict, run on what finished: the
    4-GPU run, preflight's input check, and the sample's tables for the verdict (no all-reduce
    measured, which the training tables would read)."""
    env = workdir(tmp_path, interconnect__collectives=["broadcast"])
    jobs = planned(snakemake(tmp_path, env, "-n", "all"))
    finish(tmp_path, 4)
    check = tmp_path / "results" / "preflight" / "h100" / "pytorch" / "4gpu.input.json"
    check.parent.mkdir(parents=True)
    check.write_text("{}")
    (tmp_path / "logs" / "results").mkdir(parents=True)

    def run(rule):
        # the modules of this checkout, as the workflow's jobs find them (rules/common.smk)
        env = dict(os.environ, PYTHONPATH=str(REPO))
        proc = subprocess.run(["bash", "-c", jobs[rule][0]["shell"]], cwd=tmp_path, env=env, capture_output=True)
        assert proc.returncode == 0, (tmp_path / "logs" / "results" / f"{rule}.log").read_text()[-3000:]

    run("training_tables")
    for table in ("training_throughput", "scaling", "fp16_vs_fp32", "input_paths", "storage_throughput"):
        text = (tmp_path / "results" / f"{table}.md").read_text()
        assert f"> **Note.** not yet in this table: {WAITING}, waiting in SLURM's queue" in text, (table, text)
        assert "g2 80 CPUs 4 GPUs 180000 MB drained" in text and "written again" not in text
    shutil.copytree(REPO / "tests" / "data" / "conclusions_tables", tmp_path / "results", dirs_exist_ok=True)
    run("conclusions")
    text = (tmp_path / "results" / "conclusions.md").read_text()
    assert f"> **Waiting.** not yet in the verdict table: {WAITING}" in text, text[:3000]


@pytest.mark.pipeline
def test_the_tables_are_written_now_and_again_once_the_point_has_run(tmp_path):
    """Snakemake itself: the training tables are written while the 8-GPU point waits, and its
    finished run makes the next invocation write them again (their input and param changed)."""
    # no all-reduce measured: the table reads the runs alone, which this test writes
    env = workdir(tmp_path, interconnect__collectives=["broadcast"])
    finish(tmp_path, 4)
    check = tmp_path / "results" / "preflight" / "h100" / "pytorch" / "4gpu.input.json"
    check.parent.mkdir(parents=True)
    check.write_text("{}")
    # the table alone: the runs and the check above are what finished, not jobs of this test
    alone = ("training_tables", "--allowed-rules", "training_tables")
    said = snakemake(tmp_path, env, *alone)
    scaling = tmp_path / "results" / "scaling.md"
    assert f"not yet in this table: {WAITING}" in scaling.read_text()
    assert f"written without {WAITING}, still waiting for its nodes" in said, said[-2000:]
    finish(tmp_path, 8)  # its nodes came back and it ran; sinfo still says drained
    plan = planned(snakemake(tmp_path, env, "-n", *alone))
    (job,) = plan["training_tables"]
    assert "results/runs/h100/pytorch_fp32_8gpu/summary.json" in job["inputs"] and waiting_arg(job["shell"]) == []
    snakemake(tmp_path, env, *alone)
    throughput = (tmp_path / "results" / "training_throughput.md").read_text()
    assert "not yet in" not in throughput and "h100/pytorch_fp32_8gpu failed: ended at 8" in throughput, throughput


@pytest.mark.stage
def test_with_its_nodes_back_the_point_is_an_input_of_the_tables_again(tmp_path):
    jobs = planned(snakemake(tmp_path, workdir(tmp_path, states=("idle", "idle")), "-n", "all"))
    (tables,) = jobs["training_tables"]
    assert "results/runs/h100/pytorch_fp32_8gpu/summary.json" in tables["inputs"]
    assert "results/interconnect/h100/8gpu/torch.json" in tables["inputs"]
    assert all(waiting_arg(jobs[r][0]["shell"]) == [] for r in ("training_tables", "conclusions"))


@pytest.mark.unit
def test_a_skipped_point_is_not_waiting_and_a_wait_is_only_until_its_runs_exist(tmp_path):
    config = {"results_dir": str(tmp_path), "training": {"long_test": {}}, "systems": {}}
    config["systems"] = {"a": {"nodes_down": "wait"}, "b": {"nodes_down": "skip"}}
    sweep = Sweep(config, embedded=False)
    sweep.short_now = {("a", 8): "a's node down", ("b", 8): "b's node down"}
    points = [{"system": s, "gpus": g, "run_dir": str(tmp_path / f"{s}{g}")} for s in "ab" for g in (4, 8)]
    plan = Waiting(sweep)
    assert plan.waiting((points, run_files)) == [{"system": "a", "gpus": 8, "why": "a's node down"}]
    assert [(p["system"], p["gpus"]) for p in plan.ready(points, run_files)] == [("a", 4), ("b", 4), ("b", 8)]
    (tmp_path / "a8").mkdir()
    (tmp_path / "a8" / "summary.json").write_text("{}")
    assert plan.waiting((points, run_files)) == [] and len(plan.ready(points, run_files)) == 4


@pytest.mark.unit
def test_a_waiting_list_that_is_not_one_names_the_flag():
    with pytest.raises(StageError, match="--waiting"):
        waiting_note.parse('[{"system": "a"}]')
    assert waiting_note.notes([]) == [] and waiting_note.figure_line([]) == ""


@pytest.mark.stage
def test_the_verdict_does_not_wait_for_int8_weights_from_a_waiting_long_test(tmp_path):
    """On a real dataset INT8's 'pipeline' weights come from the long test: at 8 GPUs, waiting, the
    INT8 stage waits with it, and the verdict goes ahead without its tables, saying why."""
    from workflow_scripts.data import embedded

    embedded.make(tmp_path / "ILSVRC2012", classes=2, train_per_class=1, val_per_class=1, quirks=False)
    env = workdir(tmp_path, dataset__root=str(tmp_path / "ILSVRC2012"), training__long_test__gpus=[8])
    jobs = planned(snakemake(tmp_path, env, "-n", "all"))
    (export,) = jobs["int8_export"]
    assert "results/runs/h100/accuracy/pytorch_fp32_8gpu/summary.json" in export["inputs"], export
    (verdict,) = jobs["conclusions"]
    held = sorted(f for f in upstream(jobs, verdict) if "_8gpu/" in f or "int8" in f)
    assert not held, held
    words = shlex.split(verdict["shell"].split(" > ")[0])
    assert words[words.index("--held") + 1 : words.index("--held") + 3] == ["int8_accuracy", "int8_throughput"]
    assert [(p["system"], p["gpus"]) for p in waiting_arg(verdict["shell"])] == [("h100", 8)]


@pytest.mark.unit
def test_the_findings_of_a_held_table_wait_with_it_and_the_rest_are_decided():
    from workflow_scripts.results import conclusions as mod

    spec = yaml.safe_load(mod.FINDINGS.read_text())
    sample = REPO / "tests" / "data" / "conclusions_tables"
    every = mod.conclusions(mod.load_tables(sample), spec).set_index("id")
    held = ["int8_accuracy", "int8_throughput"]
    now = mod.conclusions(mod.load_tables(sample, held), spec, held="waits for h100 at 8 GPUs").set_index("id")
    waits = now.table.isin([f"{t}.csv" for t in held])
    assert waits.any() and (now[waits].verdict == mod.UNMEASURED).all()
    assert now[waits].why.str.startswith("not yet: int8_").all() and now[waits].why.str.endswith("8 GPUs").all()
    assert now[~waits].verdict.equals(every[~waits].verdict)
