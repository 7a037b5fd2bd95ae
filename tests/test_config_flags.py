"""One path from a config key to a flag (common/schema.py): the words the rules pass (argv) and the
flags a script parses (add_arguments) are made from the same schema entry, for the trainer's shared
training keys and the long test's (train/trainer_flags.py), the page cache's, the launcher's and
the other stages'. No process starts here."""

import argparse

import pytest
from helpers import CONFIG, validated, with_overrides

from workflow_scripts.cluster import launcher, page_cache
from workflow_scripts.common import input_bound, schema
from workflow_scripts.data import convert
from workflow_scripts.plan.commands import TrainerCommands
from workflow_scripts.plan.sweep import Sweep
from workflow_scripts.train import harness, trainer_flags

pytestmark = pytest.mark.unit

# the keys the trainer takes from config training and training.long_test, as trainer_flags names them
TRAINING = ("image_size", *trainer_flags.SCHEDULE, *trainer_flags.SHARED, *trainer_flags.QUIET)
ACCURACY = (*trainer_flags.LONG_TEST[1:], *trainer_flags.LONG_TEST_JOBS)


def actions(ap):
    return {a.option_strings[0]: a for a in ap._actions if a.option_strings}


def parsed_default(spec, action):
    """The schema's default as the flag's parser gives it for the word the rules would pass."""
    if spec["default"] is None:
        return None
    words = spec["default"] if isinstance(spec["default"], list) else [spec["default"]]
    values = [action.type(schema.word(w)) if action.type else schema.word(w) for w in words]
    return values if isinstance(spec["default"], list) else values[0]


@pytest.mark.parametrize(("section", "keys"), [("training", TRAINING), ("training.long_test", ACCURACY)])
def test_every_shared_training_key_reaches_the_trainers_parser(section, keys):
    """Each key is a trainer flag with the config's default, the schema's choices and description."""
    flags = actions(harness.arg_parser("x"))
    for key, spec in ((k, schema.section(section)[k]) for k in keys):
        action = flags[schema.flag(key)]
        assert action.dest == key and action.help == spec.get("description", ""), key
        assert action.help, f"{section}.{key} has no description: the trainer's --help would say nothing"
        assert action.default == parsed_default(spec, action), key
        words = schema.choices(spec.get("items", spec))
        assert list(action.choices or []) == [*(words or []), *trainer_flags.MODES.get(key, [])], key


def commands(**overrides):
    config = validated(with_overrides(CONFIG, **overrides))
    return config, TrainerCommands(config, Sweep(config, embedded=True), {})


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"training__lr": 0.4, "training__mode": "epochs", "training__epochs": 2.5, "training__fp32_math": "strict"},
        {"training__long_test__milestones": [], "training__long_test__target_top1": 75.5},
    ],
)
def test_the_rules_words_parse_back_to_the_config(overrides):
    """The words plan/commands.py passes, parsed by the trainer, are the config's values: the sweep's
    training keys and the long test's (an empty milestones list included: its bare flag)."""
    config, c = commands(**overrides)
    train = config["training"]
    sweep = vars(harness.arg_parser("x").parse_args(c.sweep_run("local", "mxnet", "fp32", "cpu") + ["--out", "o"]))
    for key in TRAINING:
        assert sweep[key] == train[key], key
    long = vars(harness.arg_parser("x").parse_args(c.long_test_run("local", "mxnet", "fp32", 2) + ["--out", "o"]))
    assert long["mode"] == "accuracy" and long["epochs"] == train["long_test"]["epochs"]
    for key in ACCURACY:
        assert long[key] == train["long_test"][key], key


def test_a_key_at_its_quiet_default_adds_no_word():
    _, c = commands()
    assert "--fp32-math" not in c.sweep_run("local", "mxnet", "fp32", "cpu")
    assert convert.encoding_argv(validated(with_overrides(CONFIG))["conversion"])[-2:] != ["--shorter-cap", "0"]
    config = validated(with_overrides(CONFIG, conversion__shorter_cap=1000))
    assert convert.encoding_argv(config["conversion"])[-2:] == ["--shorter-cap", "1000"]


def test_argv_words():
    values = {"milestones": [10, 60.5], "target_top1": None, "decay": 0.1, "epochs": 3}
    keys = ("epochs", "milestones", "target_top1", "decay")
    words = ["--epochs", "3", "--milestones", "10", "60.5", "--decay", "0.1"]  # None: no word
    assert schema.argv(values, "training.long_test", keys) == words
    assert schema.argv({**values, "milestones": []}, "training.long_test", ("milestones",)) == ["--milestones"]
    train = {"cache_clear_command": "-x 'y'", "cache_clear": "node", "bind_cpus": "none"}
    assert schema.argv(train, "training", ("cache_clear_command",), joined=True) == ["--cache-clear-command=-x 'y'"]
    assert schema.argv(train, "training", ("bind_cpus",), quiet=("bind_cpus",)) == []


def test_the_page_caches_flags_are_the_schemas():
    """--cache-clear takes only the schema's scopes, and every job passes both flags on alike."""
    ap = page_cache.add_arguments(argparse.ArgumentParser())
    flags = actions(ap)
    assert list(flags["--cache-clear"].choices) == schema.section("training")["cache_clear"]["enum"]
    assert flags["--cache-clear"].default == schema.default("training.cache_clear")
    assert flags["--cache-clear-command"].default == schema.default("training.cache_clear_command")
    a = ap.parse_args(page_cache.argv("--dash first", "dataset"))
    assert (a.cache_clear_command, a.cache_clear) == ("--dash first", "dataset")
    with pytest.raises(SystemExit):
        ap.parse_args(["--cache-clear=all"])


def test_the_launchers_config_flags_check_what_the_schema_says():
    a = launcher.parse(["--network-interface=eth0", "--bind-cpus=auto", "--gloo-timeout-s=5"])
    assert (a.network_interface, a.bind_cpus, a.gloo_timeout_s) == ("eth0", "auto", 5)
    assert launcher.parse([]).horovod_controller == schema.default("training.horovod_controller")
    for bad in ("--network-interface=no spaces", "--gloo-timeout-s=0", "--bind-cpus=all"):
        with pytest.raises(SystemExit):
            launcher.parse([bad])


def test_the_input_judges_flags():
    ap = input_bound.add_judge_arguments(argparse.ArgumentParser())
    preflight = validated(with_overrides(CONFIG, preflight__input_bound_expected=["cpu"]))["preflight"]
    a = ap.parse_args(input_bound.judge_argv(preflight))
    assert (a.input_tolerance, a.input_bound_expected) == (preflight["input_tolerance"], ["cpu"])
    assert ap.parse_args([]).input_bound_expected == []
    with pytest.raises(SystemExit):
        ap.parse_args(["--input-bound-expected", "synthetic"])
