"""The command line's conventions (issue 33, item 3), through the real entry
point: --version, --log-level and TOWERFLOW_LOG_LEVEL (--quiet: warnings
only), help text and a default for every option, a bare ``towerflow`` prints
its help, ``launch`` takes the program without ``--``, and exit status 1 for
a failure while running, 2 for a usage error."""

import argparse
import os
import subprocess
import sys

import pytest

import towerflow
from towerflow import cli
from towerflow.errors import InvalidArgumentError, ResourceExhaustedError

AUTO_LINE = "all_reduce='auto' chose"      # an INFO line of every multi-tower run


def towerflow_cli(*args, env=None, timeout=180):
    return subprocess.run([sys.executable, "-m", "towerflow", *args], capture_output=True,
                          text=True, timeout=timeout, check=False,
                          env=dict(os.environ, **(env or {})))


def test_version_and_a_bare_command_print_and_exit_zero():
    done = towerflow_cli("--version")
    assert (done.returncode, done.stdout.strip()) == (0, f"towerflow {towerflow.__version__}")
    bare = towerflow_cli()              # ran the demo before
    assert bare.returncode == 0 and bare.stdout.startswith("usage: towerflow ")
    for command in ("demo", "launch", "train", "devices", "bench"):
        assert f"    {command} " in bare.stdout
    assert "--debug" in bare.stdout and "--log-level" in bare.stdout


def subcommands():
    parser = cli._parser()
    (commands,) = [action for action in parser._actions
                   if isinstance(action, argparse._SubParsersAction)]
    return {"towerflow": parser, **commands.choices}


@pytest.mark.parametrize("name", ["towerflow", "demo", "launch", "train", "devices", "bench"])
def test_every_option_has_help_and_every_optional_value_says_its_default(name):
    parser = subcommands()[name]
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction,
                               argparse._SubParsersAction)):
            continue
        label = "/".join(action.option_strings) or action.dest
        assert action.help, f"{name} {label} has no help text"
        takes_value = action.option_strings and action.nargs != 0
        if takes_value and not action.required and action.choices is None:
            assert "default" in action.help, f"{name} {label} does not say its default"


def digits_stderr(*options, env=None):
    done = towerflow_cli("train", "digits", "--cpu-towers", "2", "--steps", "2", *options,
                         env=env)
    assert done.returncode == 0, done.stderr
    return done.stderr


@pytest.mark.skipif(not pytest.importorskip("sklearn"), reason="digits needs scikit-learn")
def test_quiet_and_log_levels_hold_back_info_lines():
    assert AUTO_LINE in digits_stderr()
    assert AUTO_LINE not in digits_stderr("--quiet")            # printed it before
    assert AUTO_LINE not in digits_stderr("--log-level", "warning")
    assert AUTO_LINE not in digits_stderr(env={"TOWERFLOW_LOG_LEVEL": "WARNING"})
    assert AUTO_LINE in digits_stderr("--quiet", "--log-level", "info")
    bad = towerflow_cli("train", "digits", env={"TOWERFLOW_LOG_LEVEL": "loud"})
    assert bad.returncode == 2
    assert bad.stderr.strip() == ("towerflow: error: TOWERFLOW_LOG_LEVEL='loud': expected "
                                  "one of debug, info, warning, error")


def test_launch_takes_the_program_without_a_double_dash():
    pytest.importorskip("mpi4py", reason="multi-process tests need pip install 'towerflow[mpi]'")
    done = towerflow_cli("launch", "-n", "2", sys.executable, "-c",
                         "import os; print('rank', os.environ['OMPI_COMM_WORLD_RANK'])")
    assert done.returncode == 0, done.stderr     # refused before: needed "--"
    assert sorted(done.stdout.split("\n")[:2]) == ["rank 0", "rank 1"]
    assert cli._split_command(["launch", "-n", "2", "--timeout", "5", "python", "t.py",
                               "--lr", "1"]) == (["python", "t.py", "--lr", "1"],
                                                 ["launch", "-n", "2", "--timeout", "5"])


def test_usage_errors_exit_2_and_failures_while_running_exit_1(monkeypatch, tmp_path,
                                                               capsys):
    assert towerflow_cli("train", "no_such_recipe").returncode == 2
    assert towerflow_cli("train", "digits", "--steps", "zero").returncode == 2
    from towerflow import training
    for failure, status in ((ResourceExhaustedError(None, None, "out of GPU memory"), 1),
                            (RuntimeError("rank 1 stopped answering"), 1),
                            (MemoryError(), 1), (ValueError("bad value"), 2),
                            (InvalidArgumentError(None, None, "the ranks disagree"), 2)):
        def fails(*args, failure=failure, **kwargs):
            raise failure
        monkeypatch.setattr(training, "fit", fails)
        assert cli.main(["train", "digits", "--steps", "1"]) == status, failure
        line = capsys.readouterr().err
        assert line.startswith("towerflow: error: ") and line.count("\n") == 1


def test_the_log_level_a_command_sets_is_undone_when_it_returns(monkeypatch):
    """main() run inside a program (or a test) leaves the logger as it found it:
    a --quiet run held every later placement log back."""
    from towerflow import training
    from towerflow.log import logger
    monkeypatch.setattr(training, "fit", lambda *args, **kwargs: {})
    monkeypatch.setattr(cli.cli_train, "summary_line", lambda result: "")
    before = logger.level
    for options in (["--quiet"], ["--log-level", "error"]):
        cli.main(["train", "digits", "--steps", "1", *options])
        assert logger.level == before
