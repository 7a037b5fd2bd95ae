"""Parse-time checks of config.yaml beyond its schema: each refuses, naming the key, what would
otherwise fail mid-run (a path no job can carry, an output directory nobody can write, a system
that is not defined, an interpreter that is not there). The rules turn a ConfigProblem into
Snakemake's WorkflowError (rules/common.smk, stop_on_problem)."""

import difflib
import os
import re
import shlex
import sys
from pathlib import Path

import yaml

from workflow_scripts.cluster import interpreter, mounts
from workflow_scripts.plan.commands import per_rank_batch
from workflow_scripts.plan.sweep import ConfigProblem, requests_gpus
from workflow_scripts.train import job_stop

# Keys that were renamed or removed: a config that still has one is told what replaced it, not
# offered a near one.
RETIRED = {
    "training.accuracy": "renamed training.long_test (issue 53); rename the key, its values stay",
    "preflight.demand_steps": (
        "renamed preflight.input_steps, now the timed steps of each of the input check's runs, on synthetic and "
        "on real data; rename the key"
    ),
    "preflight.input_seconds": (
        "removed: the input check now runs the trainer on real data beside its synthetic run for "
        "preflight.input_steps steps; remove the key"
    ),
    "preflight.input_margin": (
        "replaced by preflight.input_tolerance: a point is input-bound where its images/s on real data are below "
        "those on synthetic data times 1 - it (docs/decisions.md#input_tolerance); remove the key"
    ),
}


def unknown_keys(config, schema, where=""):
    """A key the schema does not define, in a section that allows no others, as a ConfigProblem of
    a few lines naming it and the nearest valid key (the schema validator would print the whole
    config and schema around it)."""
    props = schema.get("properties") or {}
    if not isinstance(config, dict) or not props:
        return
    if schema.get("additionalProperties") is False:
        for key in config:
            if f"{where}{key}" in RETIRED and key not in props:
                raise ConfigProblem(f"config {where}{key}: {RETIRED[where + key]}")
            if key not in props:
                near = difflib.get_close_matches(str(key), list(props), n=1, cutoff=0.6)
                hint = f"; did you mean {where}{near[0]}?" if near else ""
                raise ConfigProblem(
                    f"config {where}{key}: no such key{hint} (the keys of {where.rstrip('.') or 'the top level'}: "
                    f"{', '.join(props)}; each is described in schemas/config.schema.yaml)"
                )
    for key, sub_schema in props.items():
        if isinstance(config.get(key), dict) and isinstance(sub_schema, dict):
            unknown_keys(config[key], sub_schema, f"{where}{key}.")


# Keys that name a path, where a user writes $USER, ${SCRATCH} or ~ as in a shell.
PATH_KEYS = (
    ("data_dir",),
    ("log_dir",),
    ("results_dir",),
    ("dataset", "root"),
    ("dataset", "val_labels"),
    ("training", "cuda_cache_dir"),
)
VARIABLE = re.compile(r"\$(\w+|\{[^}]*\})")


def expand_paths(config, env=None):
    """Expand ~ and $NAME / ${NAME} in the path keys, in place, as a shell would; a variable that is
    not set is refused naming the key (it would otherwise make a folder literally named $USER)."""
    env = os.environ if env is None else env
    for keys in PATH_KEYS:
        holder = config
        for k in keys[:-1]:
            holder = holder.get(k, {})
        value = holder.get(keys[-1])
        if not isinstance(value, str) or not value:
            continue
        for m in VARIABLE.finditer(value):
            name = m.group(1).strip("{}")
            if name not in env:
                raise ConfigProblem(
                    f"config {'.'.join(keys)} = {value!r}: ${name} is not set in this environment. Fix: set it, or "
                    f"write the path out"
                )
        expanded = VARIABLE.sub(lambda m: env[m.group(1).strip("{}")], value)
        holder[keys[-1]] = home(expanded, env) if expanded.startswith("~") else expanded


def home(path, env):
    """~ and ~/x from env's HOME, as a shell reads it; ~user (or no HOME) from the password database."""
    if (path == "~" or path.startswith("~/")) and env.get("HOME"):
        return (env["HOME"].rstrip("/") + path[1:]) or "/"
    return os.path.expanduser(path)


EMBEDDED_SETTINGS = ("image_size", "warmup_steps", "steps", "batch_per_gpu")


def check_not_laptop_settings(config, shipped):
    """A real dataset trained at the embedded default's settings (config.yaml as shipped: `shipped`)
    measures a laptop's demonstration on a cluster: refused unless the user says so."""
    t = config["training"]
    if not config["dataset"]["root"] or t["allow_embedded_settings"]:
        return
    same = [k for k in EMBEDDED_SETTINGS if t.get(k) == shipped["training"].get(k)]
    if len(same) < len(EMBEDDED_SETTINGS):
        return
    raise ConfigProblem(
        f"config dataset.root = {config['dataset']['root']!r} is a real dataset, but training."
        f"{{{', '.join(EMBEDDED_SETTINGS)}}} are the embedded default's ({t['image_size']} px, {t['warmup_steps']} + "
        f"{t['steps']} steps, batch {t['batch_per_gpu']}), a laptop's demonstration. Fix: add the study's "
        f"settings, --configfile config.yaml presets/study.yaml, or set training.allow_embedded_settings: true"
    )


def check_path(key, value, file_pattern=False):
    """A path from config reaches jobs as one quoted argument; what that cannot carry, or what
    Snakemake would read as something else, is refused now, naming the key."""
    why = None
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        why = "a newline or other control character in a path is not supported"
    elif file_pattern and ("{" in value or "}" in value):
        why = "Snakemake reads braces in its file names as wildcards"
    elif file_pattern and any(c in value for c in "'\"\\"):
        # Snakemake writes the files a cluster job waits for into the job's command with Python's
        # repr(), which a shell would read (in double quotes, $(...) runs).
        why = (
            "quotes and backslashes in a file name Snakemake tracks are not supported "
            "(its cluster jobs would not quote them safely)"
        )
    elif value.startswith("-"):
        why = f"a path starting with '-' would read as an option; write ./{value}"
    if why:
        raise ConfigProblem(f"config {key} = {value!r}: {why}")


def check_writable(key, value):
    """An output directory that cannot be written fails now, not after hours of work."""
    path = Path(value).absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise ConfigProblem(f"config {key} = {value!r}: {existing} exists and is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        # a read-only mount refuses every user: naming the user would send them after permissions
        why = mounts.read_only(existing) or "it is not writable by this user"
        raise ConfigProblem(f"config {key} = {value!r}: {existing}: {why}")


def yaml_problem(path):
    """Why a YAML config file cannot be read, naming the file, line and column, or None: a tab
    that indents a line (YAML indents with spaces only) or any other syntax error. Snakemake's own
    message names neither the file nor the line."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None  # Snakemake names a missing file itself
    try:
        yaml.safe_load(text)
        return None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{Path(path).absolute()}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
        line = text.splitlines()[mark.line] if mark and mark.line < len(text.splitlines()) else ""
        if "\t" in line[: len(line) - len(line.lstrip())]:
            return f"{where}: a tab indents this line; YAML indents with spaces only. Fix: replace the tab with spaces"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return f"{where}: not valid YAML ({problem})"


def check_config(config):
    """The paths, the systems training names, each system's CPUs for its GPUs, and the watchdog's
    start-up limit against the runs' time (clamp_hang_start, said on stderr)."""
    for key in ("data_dir", "log_dir", "results_dir"):
        check_path(key, config[key], file_pattern=True)
        check_writable(key, config[key])
    for key in ("root", "val_labels", "train_tar", "val_tar", "devkit"):
        check_path(f"dataset.{key}", config["dataset"][key])
    named = [key for key in ("train_tar", "val_tar", "devkit") if config["dataset"][key]]
    if named and not config["dataset"]["root"]:
        raise ConfigProblem(
            f"config dataset.{named[0]} names an archive but dataset.root is empty, which means the embedded "
            f"default. Fix: set dataset.root too, to the folder holding the archives (the others are looked for there)"
        )
    if config["training"]["cuda_cache_dir"]:
        check_path("training.cuda_cache_dir", config["training"]["cuda_cache_dir"])
        check_writable("training.cuda_cache_dir", config["training"]["cuda_cache_dir"])
    conv = config["conversion"]
    if conv["resize_shorter"] and conv["shorter_cap"]:
        raise ConfigProblem(
            f"config conversion.resize_shorter = {conv['resize_shorter']} and conversion.shorter_cap = "
            f"{conv['shorter_cap']}: the first resizes every image, the second only the larger ones; "
            f"set one of them to 0"
        )
    for system in config["training"]["systems"]:
        if system not in config["systems"]:
            raise ConfigProblem(
                f"config training.systems names {system!r}, which is not defined under config "
                f"systems (defined: {', '.join(config['systems'])})"
            )
    for system, sysc in config["systems"].items():
        # Without --cpus-per-task SLURM gives each task one CPU, and its bound ranks' decoding and
        # framework threads (cluster/cpus.py) all run on it: a GPU run then measures its input, not the GPU.
        if requests_gpus(sysc) and sysc["cpus_per_task"] == 0:
            raise ConfigProblem(
                f"config systems.{system}.cpus_per_task = 0 with gpu_request {sysc['gpu_request']}: "
                f"SLURM would give each GPU's task one CPU for its decoding and framework threads. "
                f"Fix: set systems.{system}.cpus_per_task to the node's CPUs divided by its GPUs, CPUs as "
                f"SLURM counts them: hardware threads where ThreadsPerCore=2 (e.g. 20, 10 cores' threads, on a "
                f"node of 40 cores with 2 threads each and 4 GPUs)"
            )
    check_dual_batches(config["training"])
    clamped = clamp_hang_start(config)
    if clamped:
        print(clamped, file=sys.stderr)


def check_dual_batches(training):
    """dali_decoder dual gives every batch in dali_dual_parts equal parts, one from each of its
    readers: a PyTorch batch at any of the sweep's precisions that is not a multiple of them is
    refused now, not when its runs start."""
    pt = training["pytorch"]
    if pt["dali_decoder"] != "dual" or "pytorch" not in training["frameworks"]:
        return
    parts = pt.get("dali_dual_parts", 2)
    for precision in training["precisions"]:
        batch = per_rank_batch(training, "pytorch", precision)
        if batch % parts:
            raise ConfigProblem(
                f"config training.pytorch.dali_decoder = dual gives each batch in {parts} equal parts "
                f"(training.pytorch.dali_dual_parts), but PyTorch's {precision} batch is {batch} a GPU "
                f"(training.batch_per_gpu.pytorch"
                + (" x training.fp16_batch_factor" if precision == "fp16" else "")
                + f"). Fix: a batch that is a multiple of {parts}, another dali_dual_parts, or another dali_decoder"
            )


def clamp_hang_start(config):
    """training.hang_start_s against the shortest time a training run is given (systems.<name>.time_min
    of training.systems, training.long_test.time_min where set): a start-up hang still waiting for
    the watchdog when the job stops its ranks before that time's end (train/job_stop.py, margin_s)
    would be filed as a time limit, permanent and never retried. Clamped in place, for every run (the
    rules pass one value), to that time less twice the stop margin: once for the stop itself, once
    for what comes before the watchdog starts (the cache clearing) and after its limit (its look
    every 2 s, the ranks' stacks). -> the line that says so, or None where nothing changed."""
    t = config["training"]
    limits = {f"systems.{s}.time_min": config["systems"][s]["time_min"] for s in t["systems"] if s in config["systems"]}
    if t["long_test"]["time_min"]:
        limits["training.long_test.time_min"] = t["long_test"]["time_min"]
    if not t["hang_start_s"] or not limits:
        return None
    key, minutes = min(limits.items(), key=lambda kv: kv[1])
    share = minutes * 60
    margin = job_stop.margin_s(share)
    allowed = int(share - 2 * margin)
    if t["hang_start_s"] <= allowed:
        return None
    line = (
        f"config training.hang_start_s = {t['hang_start_s']}: clamped to {allowed} s for every run: {key} = "
        f"{minutes} gives a run {share} s, and its job stops it {margin:.0f} s before that ends, as a time limit "
        f"(never retried); a start-up hang must reach the watchdog's limit with as long again to spare to be "
        f"named hung and retried. Fix: raise {key}, or set training.hang_start_s to {allowed} or less"
    )
    t["hang_start_s"] = allowed
    return line


def sbatch_words(config, system):
    """systems.<name>.sbatch_extra as words: split as a shell would, never run by one."""
    value = config["systems"][system]["sbatch_extra"]
    try:
        return shlex.split(value)
    except ValueError as exc:
        raise ConfigProblem(f"config systems.{system}.sbatch_extra = {value!r}: {exc}") from None


def located(value, repo, cwd=None):
    """An interpreter path from config as a job runs it: a relative one from the working directory,
    else from the repository, where envs/setup.sh makes the environments (config.yaml's own
    `.venv/bin/python`, run with snakemake --directory on scratch). Either way a job finds it: they
    start where snakemake runs."""
    if not isinstance(value, str) or "/" not in value or os.path.isabs(value):
        return value
    cwd = Path.cwd() if cwd is None else Path(cwd)
    if not (cwd / value).exists() and (Path(repo) / value).exists():
        return str(Path(repo) / value)
    return value


def interpreter_words(key, value, repo, setup="bash envs/setup.sh", unbuilt=None, data=()):
    """An interpreter from config as command words (a container: its runtime's exec line, with the
    folders of `data` bound: data_dir and the dataset, and the real places their links lead to),
    checked now rather than mid-run. unbuilt (plan.unbuilt_envs.Unbuilt): an interpreter path that
    is not there yet is noted in it, to be named with the others once the workflow is parsed."""
    value = located(value, repo)
    for part in (
        [value] if isinstance(value, str) else [value["container"], value.get("python", ""), *value.get("bind", [])]
    ):
        check_path(key, part)
    refused = interpreter.image_problem(value)
    if refused:
        raise ConfigProblem(f"config {key}.container: {refused}")
    problem = interpreter.problem(value)
    if problem and unbuilt is not None and isinstance(value, str):
        unbuilt.note(key, value, problem, setup)
    elif problem:
        raise ConfigProblem(
            f"config {key}: {problem}: run '{setup}' or point {key} at an interpreter (or a "
            f"container) that has the packages of envs/"
        )
    if not isinstance(value, str):
        value = {**value, "bind": [*value.get("bind", []), *interpreter.data_binds(data)]}
    return interpreter.words(value, repo)


def data_folders(config):
    """The folders a stage's container must see: data_dir and, where it lies elsewhere, the dataset."""
    return [config["data_dir"], *([config["dataset"]["root"]] if config["dataset"].get("root") else [])]


def framework_config(config, system, framework):
    """(config key, its value): the interpreter a training run of `framework` on `system` uses:
    the system's own, else envs_gpu for a system that requests GPUs, else envs."""
    sysc = config["systems"][system]
    if framework in sysc.get("envs", {}):
        return f"systems.{system}.envs.{framework}", sysc["envs"][framework]
    if requests_gpus(sysc):
        return f"envs_gpu.{framework}", config["envs_gpu"][framework]
    return f"envs.{framework}", config["envs"][framework]


def framework_env(config, system, framework, repo, unbuilt=None):
    """(config key, interpreter words) of framework_config, checked (unbuilt: interpreter_words')."""
    key, value = framework_config(config, system, framework)
    gpu = requests_gpus(config["systems"][system])
    setup = "bash envs/setup.sh --gpu" if gpu else "bash envs/setup.sh"
    return key, interpreter_words(key, value, repo, setup, unbuilt, data_folders(config))


def raising(error):
    """stop_on_problem(fn, *args): fn's value, a ConfigProblem raised as `error` (the rules pass
    Snakemake's WorkflowError, which stops the workflow naming the key, without a traceback)."""

    def stop_on_problem(fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ConfigProblem as problem:
            raise error(str(problem)) from None

    return stop_on_problem
