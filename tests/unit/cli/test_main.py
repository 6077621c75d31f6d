"""The launch side and the CLI: bad input is one line and exit 2, never a traceback.

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
    (tmp_path / "train.py").write_text("")   # the script must exist, a dry run too
    assert main(["run", "--ranks", "1", "--dry-run", "train.py", "--", "--resume=--"]) == 0
    assert "--resume=--" in capsys.readouterr().out
    rc = main(["msrun", "--worker_num=1", "--local_worker_num=1", "--dry-run", "train.py", "--resume=--"])
    assert rc == 0, capsys.readouterr().err


# ---------------------------------------------------------------- defect 2: bytes that are not UTF-8, NUL bytes

GBK = b"/home/\xd6\xd0\xce\xc4"   # a GBK path, not UTF-8


def test_non_utf8_output_paths_are_written(tmp_path, monkeypatch, capsys):
    import os

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")   # the script must exist, a dry run too
    script = os.fsdecode(b"run\xd6\xd0.sh")
    assert main(["script", "run.sh", "train.py", "--ranks", "2", "-o", script]) == 0, capsys.readouterr().err
    assert (tmp_path / script).read_bytes().startswith(b"#!")


@pytest.mark.parametrize(("name", "text"), [
    ("c.yaml", 'env: ["A=x\\0y"]\n'), ("c.yaml", 'args: ["a\\0b"]\n'), ("c.yaml", 'script: "x\\0y.py"\n'),
    ("e.env", "A=x\0y\n")])
def test_nul_bytes_are_refused_before_the_run_directory_is_made(tmp_path, monkeypatch, capsys, name, text):
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_text(text)
    flag = "--config" if name.endswith(".yaml") else "--env-file"
    rc = main(["run", "--ranks", "1", flag, name, "train.py"])
    err = capsys.readouterr().err
    assert rc == 2 and "holds a NUL byte" in err and err.count("\n") == 1, err
    assert not (tmp_path / "dlaunch_runs").exists()


# ---------------------------------------------------------------- defect 11: msrun values out of range

@pytest.mark.parametrize(("flags", "fragment"), [
    (["--cluster_time_out", "99999999"], "--cluster_time_out 99999999 is out of range: at most 2592000 (30 days)"),
    (["--worker_num", "1000000"], "1000000 is out of range: give a whole number from 1 to 131072"),
    (["--node_rank", "1000000"], "1000000 is out of range"),
    (["--master_port=--"], "'--' is not a value for --master_port")])
def test_msrun_values_out_of_range_are_one_line(tmp_path, monkeypatch, capsys, flags, fragment):
    monkeypatch.chdir(tmp_path)
    try:   # argparse's own range errors exit 2 through SystemExit; dlaunch's return 2
        rc = main(["msrun", "--worker_num=1", "--local_worker_num=1", *flags, "--dry-run", "train.py"])
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and fragment in err and "Traceback" not in err and "empty group" not in err, err


# ---------------------------------------------------------------- a new user: a directory where a file belongs

@pytest.mark.parametrize("argv", [
    ["validate-ranktable", "D"], ["run", "--rank-table", "D", "train.py"], ["run", "--config", "D", "train.py"],
    ["run", "--env-file", "D", "train.py"], ["run", "--hccn-conf", "D", "--ranks", "1", "train.py"],
    ["merge-ranktable", "D", "D", "-o", "merged.json"],
    ["script", "run.sh", "train.py", "--rank-table", "D", "-o", "run_job.sh"]])
def test_a_directory_given_as_a_file_is_one_line(tmp_path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")   # the script must exist, a dry run too
    (tmp_path / "D").mkdir()
    rc = main(argv)
    captured = capsys.readouterr()
    assert rc != 0 and "D: it is a directory, not a regular file" in captured.out + captured.err, captured


# ---------------------------------------------------------------- real clients: @record's first failure


# ---------------------------------------------------------------- a new user: commands, the run directory, restarts

@pytest.mark.parametrize(("typed", "meant"), [("rn", "run"), ("valdate-ranktable", "validate-ranktable"),
                                              ("stauts", "status")])
def test_a_misspelled_command_gets_did_you_mean(capsys, typed, meant):
    assert main([typed, "train.py"]) == 2
    assert f"unknown command '{typed}'; did you mean '{meant}'?" in capsys.readouterr().err


# ---------------------------------------------------------------- real clients: msrun's log names


# ---------------------------------------------------------------- multi-host: what was read as a host key


# ---------------------------------------------------------------- a new user: a compact --dry-run

def test_dry_run_shows_rank_0_in_full_the_others_as_differences_and_no_port_it_would_not_use(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")   # the script must exist, a dry run too
    assert main(["run", "--ranks", "8", "--dry-run", "train.py"]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) < 200, len(out.splitlines())   # was 290: 36 lines per rank
    assert "master:        127.0.0.1, port: a free port, chosen at start" in out
    assert "MASTER_PORT=<a free port, chosen at start>" in out
    rank_7 = out.split("\nrank 7 (", 1)[1]
    assert "env: as rank 0's, but\n" in rank_7 and "    RANK=7\n" in rank_7 and "WORLD_SIZE" not in rank_7
    assert main(["run", "--ranks", "2", "--master-port", "29555", "--dry-run", "train.py"]) == 0
    out = capsys.readouterr().out
    assert "master:        127.0.0.1:29555" in out and "MASTER_PORT=29555" in out


def test_the_refusal_of_a_multi_host_table_keeps_the_profile_in_its_commands(tmp_path, monkeypatch, capsys):
    from tests.launching import write_rank_table

    monkeypatch.chdir(tmp_path)
    table = write_rank_table(tmp_path / "rt.json", ("127.0.0.2", "127.0.0.3"), 3)   # 3 devices: a2 only
    assert main(["run", "train.py", "--rank-table", str(table), "--profile", "a2"]) == 2
    err = capsys.readouterr().err
    assert f"'dlaunch cluster train.py --rank-table {table} --profile a2 --rank-start 0 --run-id JOB'" in err, err
    assert f"'dlaunch cluster train.py --rank-table {table} --profile a2 --ssh'" in err, err


def test_config_show_prints_plain_values_not_python_reprs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["config", "show", "--env", "A=1", "--env", "B=x y", "train.py"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows["profile"].split()[1] == "atlas910" and rows["run-id"].split()[1] == "-"
    assert "A=1 'B=x y'" in rows["env"] and "None" not in "".join(rows.values()) and "'atlas910'" not in rows["profile"]


@pytest.mark.parametrize("late", [["--config", "x.yaml"], ["--resume", "ckpt.pt"]])
def test_options_meant_for_the_script_are_told_to_go_after_the_separator(tmp_path, monkeypatch, capsys, late):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.yaml").write_text("lr: 0.1\n")
    (tmp_path / "ckpt.pt").write_text("not a run directory\n")
    assert main(["run", "train.py", "--ranks", "1", *late]) == 2
    err = capsys.readouterr().err
    assert f"{late[0]} after train.py was read as dlaunch's; arguments for the script go after --" in err, err


# ---------------------------------------------------------------- issue 38, item 26: no abbreviations

def _exit_code(argv: list[str]) -> int:
    """main's exit code, argparse's own refusals (SystemExit) included."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def test_an_abbreviation_of_a_dlaunch_flag_is_not_taken_for_it(tmp_path, monkeypatch, capsys):
    """argparse took ``--dry`` for ``--dry-run`` (and a script's ``--device=cpu`` for ``--devices``)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    assert _exit_code(["run", "--ranks", "1", "train.py", "--dry"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --dry; did you mean --dry-run?" in err and "go after --" in err, err


def test_a_script_flag_that_abbreviates_a_dlaunch_flag_gets_the_separator_hint(tmp_path, monkeypatch, capsys):
    """nanoGPT's line: ``--device=cpu`` is the script's, not an ambiguous abbreviation of ``--devices``."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    assert _exit_code(["run", "--ranks", "2", "train.py", "config.py", "--device=cpu"]) == 2
    err = capsys.readouterr().err
    assert "ambiguous" not in err and "not allowed with argument" not in err, err
    assert "unrecognized arguments: config.py --device=cpu" in err and "go after --" in err, err


def test_the_fronts_take_abbreviations_as_their_launchers_do(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")   # the script must exist, a dry run too
    assert main(["msrun", "--worker_n=1", "--local_worker_num=1", "--dry-run", "train.py"]) == 0, capsys.readouterr()


# ---------------------------------------------------------------- issue 38, item 2: the fix is the user's own line

def test_script_options_after_the_script_are_moved_after_the_separator_and_dlaunchs_stay(tmp_path, monkeypatch,
                                                                                           capsys):
    """The hint was ``dlaunch run argtrain.py -- --ranks 2 --config exp.yaml``: one rank, --ranks for the script."""
    monkeypatch.chdir(tmp_path)
    assert main(["run", "argtrain.py", "--ranks", "2", "--config", "exp.yaml"]) == 2
    err = capsys.readouterr().err
    assert "arguments for the script go after --: dlaunch run argtrain.py --ranks 2 -- --config exp.yaml)" in err, err


def test_unknown_arguments_get_the_line_with_them_after_the_separator(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert _exit_code(["run", "--ranks", "2", "train.py", "config.py", "--device=cpu", "--", "--seed", "1"]) == 2
    err = capsys.readouterr().err
    assert "e.g. dlaunch run --ranks 2 train.py -- config.py --device=cpu --seed 1\n" in err, err


@pytest.mark.parametrize(("argv", "fix"), [
    (["python", "train.py"], "dlaunch run train.py\n"),
    (["python3", "-u", "train.py", "--ranks", "2", "--epochs", "3"], "dlaunch run train.py --ranks 2 -- --epochs 3\n")])
def test_python_before_the_script_is_told_to_go(tmp_path, monkeypatch, capsys, argv, fix):
    monkeypatch.chdir(tmp_path)
    assert _exit_code(["run", *argv]) == 2
    err = capsys.readouterr().err
    assert f"dlaunch starts the script with Python itself: drop {argv[0]}, e.g. {fix}" in err, err


# ---------------------------------------------------------------- issue 38, item 3: a missing script, said at once

def test_a_dry_run_of_a_missing_script_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "trian.py", "--ranks", "2", "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"dlaunch: error: script not found: {tmp_path / 'trian.py'}\n" and not captured.out


@pytest.mark.parametrize("template", ["slurm", "run.sh"])
def test_no_launch_script_is_written_for_a_missing_script(tmp_path, monkeypatch, capsys, template):
    from tests.launching import write_rank_table

    monkeypatch.chdir(tmp_path)
    table = write_rank_table(tmp_path / "rt.json", ("127.0.0.2", "127.0.0.3"), 8)
    assert main(["script", template, "nosuch.py", "--rank-table", str(table), "-o", "job.sh"]) == 2
    assert capsys.readouterr().err == f"dlaunch: error: script not found: {tmp_path / 'nosuch.py'}\n"
    assert not (tmp_path / "job.sh").exists()
