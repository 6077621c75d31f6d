"""Launch input a new user or a foreign locale gives: each case one line and the right exit, never a traceback.

Issue 20's launch side: non-UTF-8 bytes in the environment, NUL bytes, ``--OPTION=--``, a directory given
as the script, a misspelled command, no device at all, where the run directory is, a restarted job's
closing line. CLI-only cases run in-process through ``launcher.cli.main``; launches run for real.
"""

from __future__ import annotations

import json
import os

import pytest

from launcher.cli import main
from launcher.options import options_for
from tests.launching import RANK_PROGRAM, latest_run, run_dlaunch

LATIN1 = os.fsdecode(b"/data/caf\xe9")   # a Latin-1 path as a Chinese- or European-locale machine has them


def no_devices(tmp_path) -> dict:
    """A PATH without nvidia-smi (the visible-devices variables are removed by the test)."""
    return {"PATH": os.path.dirname(os.__file__)}


def test_a_non_utf8_byte_in_the_environment_runs_and_reaches_the_rank_as_bytes(tmp_path, monkeypatch):
    monkeypatch.setenv("DATA_PATH_LATIN1", LATIN1)
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "1", "--profile", "structure", "--env",
                         f"X_LATIN1={LATIN1}", "--output-dir", tmp_path / "runs", "--", "--dump-env", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    rank_dir = latest_run(tmp_path / "runs") / "rank_000"
    env_log = (rank_dir / "env.log").read_bytes()
    assert b"DATA_PATH_LATIN1=/data/caf\xe9\n" in env_log and b"X_LATIN1=/data/caf\xe9\n" in env_log


def test_a_non_utf8_output_path_is_written_as_given(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("print('hi')\n")
    target = os.fsdecode(b"run\xe9.sh")
    result = run_dlaunch("script", "run.sh", script, "--ranks", "1", "-o", target, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert b"run\xe9.sh" in os.listdir(os.fsencode(tmp_path))


@pytest.mark.parametrize("where", ["args", "env", "env-file"])
def test_a_nul_byte_is_one_line_before_any_run_directory(tmp_path, where):
    script = tmp_path / "t.py"
    script.write_text("print('hi')\n")
    config = tmp_path / "c.yaml"
    argv = ["run", script, "--ranks", "1", "--profile", "structure", "--output-dir", tmp_path / "runs"]
    if where == "args":
        config.write_text('args: ["a\\0b"]\n')
        argv += ["--config", config]
    elif where == "env":
        config.write_text('env: ["X=a\\0b"]\n')
        argv += ["--config", config]
    else:
        (tmp_path / "e.env").write_bytes(b"X=a\0b\n")
        argv += ["--env-file", tmp_path / "e.env"]
    result = run_dlaunch(*argv, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "NUL byte" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()


def option_flags(command: str) -> list[str]:
    return [option.flags[0] for option in options_for(command) if option.flags[0].startswith("--")]


@pytest.mark.parametrize("command", ["run", "cluster"])
def test_every_option_given_double_dash_as_its_value_is_one_line(command, capsys):
    flags = option_flags(command)
    assert len(flags) > 20
    for flag in flags:
        code = main([command, "x.py", f"{flag}=--"])
        err = capsys.readouterr().err
        assert code == 2, (flag, err)
        assert f"{flag} needs a value, not '--'" in err, (flag, err)


def test_msrun_double_dash_and_absurd_values_are_one_line(capsys):
    assert main(["msrun", "--master_port=--", "x.py"]) == 2
    assert "--master_port needs a value" in capsys.readouterr().err
    assert main(["msrun", "--cluster_time_out=99999999", "x.py"]) == 2   # was "ValueError: empty group"
    assert "is more than 30 days" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:   # argparse's own error for a value out of range: exit 2
        main(["msrun", "--worker_num", "1000000", "x.py"])
    assert exc.value.code == 2 and "out of range" in capsys.readouterr().err


def test_a_misspelled_command_gets_a_suggestion(capsys):
    assert main(["rn", "train.py"]) == 2
    err = capsys.readouterr().err
    assert "no command rn; did you mean run?" in err


def test_a_directory_as_the_script_says_so(tmp_path):
    (tmp_path / "project").mkdir()
    result = run_dlaunch("run", tmp_path / "project", "--ranks", "1", "--profile", "structure", cwd=tmp_path)
    assert result.returncode == 2
    assert "is a directory, not a script" in result.stderr and "Traceback" not in result.stderr


def test_no_device_at_all_runs_one_cpu_rank_and_says_so(tmp_path, monkeypatch):
    for var in ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    if os.path.exists("/dev/davinci0"):
        pytest.skip("this host has NPUs")
    result = run_dlaunch("run", RANK_PROGRAM, "--output-dir", tmp_path / "runs", cwd=tmp_path,
                         env=no_devices(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "found no device" in result.stderr and "starting 1 rank on the CPU" in result.stderr
    plan = json.loads((latest_run(tmp_path / "runs") / "plan.json").read_text())
    assert plan["world_size"] == 1


def test_the_run_directory_is_named_before_the_ranks_speak(tmp_path):
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "1", "--profile", "structure", "--output-dir",
                         tmp_path / "runs", "--", "--print", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run_dir = str(latest_run(tmp_path / "runs"))
    first = result.stderr.splitlines()[0]
    assert first.startswith("dlaunch: run ") and first.endswith(f"logs and checkpoints in {run_dir}"), first


def test_a_job_that_restarted_says_so_when_it_ends(tmp_path):
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--profile", "structure", "--max-restarts", "1",
                         "--output-dir", tmp_path / "runs", "--", "--fail-rank", "1", "--fail-on-attempt", "0",
                         cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "all 2 rank(s) exited 0 after 1 restart(s)" in result.stderr
