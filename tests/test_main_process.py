"""What only the workflow's main process does (workflow_scripts/plan/main_process.py), called as the
Snakefile calls it but with a stand-in for Snakemake's workflow object: the real lock, the real
signal handler, the real record of interpreters not built yet."""

import signal
from types import SimpleNamespace

import pytest

from workflow_scripts.plan import config_checks, main_process, unbuilt_envs

pytestmark = pytest.mark.unit


class Refused(Exception):
    pass


def test_only_the_main_process_takes_the_lock_and_a_second_holder_is_refused_as_the_error_given(tmp_path):
    main_process.take_workflow_lock(SimpleNamespace(is_main_process=False), Refused, tmp_path)
    assert not (tmp_path / ".snakemake").exists()  # a cluster job parsing the rules again takes none
    main_process.take_workflow_lock(SimpleNamespace(is_main_process=True), Refused, tmp_path)
    assert (tmp_path / ".snakemake" / "dlscale.lock").is_file()
    with pytest.raises(Refused, match="another snakemake is running this workflow"):
        main_process.take_workflow_lock(SimpleNamespace(is_main_process=True), Refused, tmp_path)


def test_a_term_handler_only_where_jobs_run_elsewhere():
    before = signal.getsignal(signal.SIGTERM)
    main_process.stop_on_term(SimpleNamespace(is_main_process=True, non_local_exec=False))
    main_process.stop_on_term(SimpleNamespace(is_main_process=False, non_local_exec=True))
    assert signal.getsignal(signal.SIGTERM) is before


def test_interpreters_not_built_are_named_by_a_plan_and_stop_a_run(capsys):
    stop = config_checks.raising(Refused)
    planned = unbuilt_envs.Unbuilt(True)
    planned.note("envs_gpu.tensorflow", "/nowhere/python", "/nowhere/python does not exist", "bash envs/setup.sh --gpu")
    main_process.settle_unbuilt(planned, stop)
    assert "/nowhere/python" in capsys.readouterr().err
    run = unbuilt_envs.Unbuilt(False)
    run.note("envs_gpu.tensorflow", "/nowhere/python", "/nowhere/python does not exist", "bash envs/setup.sh --gpu")
    with pytest.raises(Refused, match="/nowhere/python"):
        main_process.settle_unbuilt(run, stop)
    main_process.settle_unbuilt(unbuilt_envs.Unbuilt(False), stop)  # nothing noted: nothing said
    assert capsys.readouterr().err == ""
