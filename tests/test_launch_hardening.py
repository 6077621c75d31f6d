"""Issue 20, the launch side and the CLI: bad input is one line and exit 2, never a traceback.

The CLI cases run in-process through ``launcher.cli.main(argv)`` (fast); launches that must reach the
executor run as real processes.
"""

import argparse

import pytest

from launcher.cli import main
from launcher.cli.parsers import build_parser


def _value_options():
    """(command, option string) for every option of every command that takes a value."""
    parser = build_parser()
    for command, sub in parser.subcommands.items():
        for action in sub._actions:
            if action.option_strings and action.nargs != 0 and not isinstance(action, argparse._HelpAction):
                yield command, action.option_strings[-1]


VALUE_OPTIONS = sorted(set(_value_options()))


def test_the_value_options_are_many():
    assert len(VALUE_OPTIONS) > 40, VALUE_OPTIONS


@pytest.mark.parametrize(("command", "option"), VALUE_OPTIONS)
def test_separator_as_an_option_value_is_one_line(tmp_path, monkeypatch, capsys, command, option):
    """Defect 10: ``--OPTION=--`` reached the handlers as an empty list (about 30 different tracebacks)."""
    monkeypatch.chdir(tmp_path)
    rc = main([command, f"{option}=--", "train.py"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"{option}=--: '--' is not a value for {option}" in err, err


def test_script_arguments_after_the_separator_keep_their_dashes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--ranks", "1", "--dry-run", "train.py", "--", "--resume=--"]) == 0
    assert "--resume=--" in capsys.readouterr().out
    rc = main(["msrun", "--worker_num=1", "--local_worker_num=1", "--dry-run", "train.py", "--resume=--"])
    assert rc == 0, capsys.readouterr().err
