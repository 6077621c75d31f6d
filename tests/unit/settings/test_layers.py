"""Layered settings: flags > DLAUNCH_<OPTION> env > YAML files > defaults, for every option type."""

import json

import pytest

from launcher.cli.parsers import build_parser
from launcher.cli.request import request_from_args
from launcher.errors import UsageError


def settled(argv, environ=None, files=()):
    parser = build_parser()
    cut = argv.index("--") if "--" in argv else None
    script_args = argv[cut + 1:] if cut is not None else []
    args = parser.parse_args(argv[:cut] if cut is not None else argv)
    args.script_args = script_args
    args.config = list(files) + (args.config or [])
    return request_from_args(args, cut is not None, environ=environ or {})


# (option key in YAML, flag value, env value, file value, expected value of each layer, default)
CASES = [
    ("ranks", ["--ranks", "4"], "2", "8", (4, 2, 8), "auto"),                              # count or auto
    ("grace_period", ["--grace-period", "1.5"], "2.5", "30", (1.5, 2.5, 30.0), 10.0),       # float
    ("console", ["--console", "all"], "none", "1,2", ("all", "none", "1,2"), "0"),          # str
    ("cwd", ["--cwd", "rank"], "rank", "rank", ("rank", "rank", "rank"), "launch"),          # choices
    ("no_python", ["--no-python"], "true", True, (True, True, True), False),               # bool
    ("env", ["--env", "A=1"], "B=2\nC=3", ["D=4"], (("A=1",), ("B=2", "C=3"), ("D=4",)), ()),  # list
    ("resume", ["--resume"], "runs/x", True, ("", "runs/x", ""), None),                    # optional value
]


@pytest.mark.parametrize("key,flag,env_value,file_value,expected,default", CASES, ids=[c[0] for c in CASES])
def test_precedence_for_every_option_type(tmp_path, key, flag, env_value, file_value, expected, default):
    conf = tmp_path / "c.yaml"
    conf.write_text(json.dumps({key: file_value}))  # JSON is YAML
    env = {"DLAUNCH_" + key.upper(): env_value}
    base = ["run", "s.py"]
    assert getattr(settled(base + flag, env, [conf]), key) == expected[0]
    args = settled(base, env, [conf])
    assert (getattr(args, key), args.sources[key]) == (expected[1], "$DLAUNCH_" + key.upper())
    args = settled(base, {}, [conf])
    assert (getattr(args, key), args.sources[key]) == (expected[2], f"{conf}:1")
    args = settled(base)
    assert (getattr(args, key), args.sources[key]) == (default, "default")


def test_later_files_override_earlier_ones(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("ranks: 2\nconsole: all\n")
    b.write_text("ranks: 4\n")
    args = settled(["run", "s.py"], files=[a, b])
    assert (args.ranks, args.console) == (4, "all")


def test_exclusive_options_are_settled_by_layer(tmp_path):
    conf = tmp_path / "c.yaml"
    conf.write_text("rank_table: rt.json\nmodule: true\n")
    args = settled(["run", "s.py", "--ranks", "4"], files=[conf])
    assert (args.ranks, args.rank_table, args.module) == (4, None, True)
    args = settled(["run", "s.py", "--no-python"], {"DLAUNCH_DEVICES": "4,5"}, [conf])
    assert (args.devices, args.rank_table, args.module, args.no_python) == ("4,5", None, False, True)


def test_script_and_args_from_the_file_yield_to_the_command_line(tmp_path):
    conf = tmp_path / "c.yaml"
    conf.write_text("script: train.py\nargs: [--epochs, 3]\n")
    args = settled(["run"], files=[conf])
    assert (args.script, args.script_args) == ("train.py", ("--epochs", "3"))
    args = settled(["run", "other.py", "--", "--lr", "1"], files=[conf])
    assert (args.script, args.script_args) == ("other.py", ("--lr", "1"))


@pytest.mark.parametrize("text,line,fragment", [
    ("ranks: 2\nrankz: 3\n", 2, "unknown option 'rankz'"),
    ("ranks: eight\n", 1, "--ranks: expected a number of ranks or 'auto'"),
    ("max-restarts: 2.5\n", 1, "whole number"),
    ("ranks: 2\n\ngrace-period: [1]\n", 3, "--grace-period takes a single value"),
    ("cwd: home\n", 1, "must be one of launch, rank"),
    ("dry_run: true\n", 1, "unknown option"),
    ("module: 1\n", 1, "true or false"),
    ("args: --epochs\n", 1, "args must be a list"),
    ("ranks: [\n", 2, "not valid YAML"),
    ("- ranks\n", 1, "a mapping of option: value"),
])
def test_bad_files_name_key_file_and_line(tmp_path, text, line, fragment):
    conf = tmp_path / "bad.yaml"
    conf.write_text(text)
    with pytest.raises(UsageError) as info:
        settled(["run", "s.py"], files=[conf])
    assert str(info.value).startswith(f"{conf}:{line}:") and fragment in str(info.value)


def test_bad_environment_values_name_the_variable():
    expected = r"\$DLAUNCH_MASTER_PORT: --master-port: expected a whole number from 1 to 65535"
    with pytest.raises(UsageError, match=expected):
        settled(["run", "s.py"], {"DLAUNCH_MASTER_PORT": "high"})


def test_run_id_is_never_taken_from_the_rank_contract_variable():
    assert settled(["run", "s.py"], {"DLAUNCH_RUN_ID": "inherited-from-a-parent-job"}).run_id is None














