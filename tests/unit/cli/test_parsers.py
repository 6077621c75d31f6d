"""The command table of ``launcher.cli.parsers``: each name is the command its module registers, and a launch
builds (and imports) only its own command's parser."""

import re
import sys

import pytest

from launcher.cli import main
from launcher.cli.parsers import COMMANDS, build_parser


def test_every_name_is_what_its_module_registers_in_help_order():
    assert list(build_parser().subcommands) == list(COMMANDS)
    for name in COMMANDS:
        assert list(build_parser(name).subcommands) == [name]


def test_a_word_that_is_no_command_gets_every_command():
    assert list(build_parser("--help").subcommands) == list(COMMANDS)
    assert list(build_parser("rn").subcommands) == list(COMMANDS)


def test_an_unknown_command_is_named_with_the_nearest(capsys):
    assert main(["rnu", "train.py"]) == 2
    assert "unknown command 'rnu'; did you mean 'run'?" in capsys.readouterr().err


def test_a_command_parses_with_only_its_own_module_imported(monkeypatch):
    others = [f"launcher.cli.{module}" for name, module in COMMANDS.items() if name != "validate-ranktable"]
    for module in others:
        monkeypatch.delitem(sys.modules, module, raising=False)
    args = build_parser("validate-ranktable").parse_args(["validate-ranktable", "rt.json"])
    assert args.command == "validate-ranktable"
    assert [m for m in others if m in sys.modules] == []


@pytest.mark.parametrize("name", ["run", "cluster", "msrun", "torchrun"])
def test_help_of_one_command_is_its_own(name, capsys):
    with pytest.raises(SystemExit):
        main([name, "--help"])
    assert f"usage: dlaunch {name}" in capsys.readouterr().out


ISSUE_49_SECTIONS = ("what to run and where", "ranks and devices", "failures and restarts", "fault tolerance",
                     "watching a job", "checkpoints", "several hosts", "MindSpore", "NPU")


@pytest.mark.parametrize("name", ["run", "cluster"])
def test_help_shows_every_option_in_its_section(name, capsys, monkeypatch):
    from launcher.settings.launch import GROUPS, options_for

    monkeypatch.setenv("COLUMNS", "120")
    with pytest.raises(SystemExit):
        main([name, "--help"])
    out = capsys.readouterr().out
    sections = {}   # title -> its text, as argparse prints it: "title:" then its options, a blank line after
    for block in out.split("\n\n"):
        title, _, body = block.partition(":\n")
        sections[title.strip()] = body
    for title in ISSUE_49_SECTIONS:
        assert title in sections, f"no section {title!r} in dlaunch {name} --help"
    assert [line.split()[0] for line in sections["options"].splitlines() if line.startswith("  -")] == ["-h,"]
    for option in options_for(name):
        assert option.group in GROUPS, f"{option.flag} declares no section of --help"
        assert re.search(rf"^  {re.escape(option.flags[0])}[ ,\n]", sections[option.group] + "\n", re.M), \
            f"{option.flag} not under {option.group}"


def test_scripts_help_keeps_the_sections_and_names_one_commands_options(capsys, monkeypatch):
    # dlaunch script takes run's and cluster's options: the same sections, and an option of one says whose it is
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        main(["script", "--help"])
    out = capsys.readouterr().out
    assert "\nfault tolerance:\n" in out and "\nseveral hosts:\n" in out
    assert re.search(r"--resume \[RUN_DIR\] +dlaunch run only: resume", out)
    assert re.search(r"--spares K +dlaunch cluster only: the last K", out)
