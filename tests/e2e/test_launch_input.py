"""The launch side and the CLI: bad input is one line and exit 2, never a traceback.

The CLI cases run in-process through ``launcher.cli.main(argv)`` (fast); launches that must reach the
executor run as real processes.
"""


import pytest

from launcher.cli import main

# ---------------------------------------------------------------- defect 2: bytes that are not UTF-8, NUL bytes

GBK = b"/home/\xd6\xd0\xce\xc4"   # a GBK path, not UTF-8


def test_non_utf8_environment_runs_as_torchrun_does(tmp_path):
    """An inherited variable and an --env value with GBK bytes reach the ranks as the same bytes; env.log keeps
    them; the run ends as succeeded (before: a traceback and a run shown as "starting" forever)."""
    import json
    import os
    import subprocess
    import sys

    program = tmp_path / "show.py"
    program.write_text(f"import os\nassert os.environb[b'INHERITED'] == os.environb[b'GIVEN'] == {GBK!r}\n")
    env = {**os.environb, b"INHERITED": GBK, b"PYTHONPATH": os.fsencode(os.getcwd())}
    done = subprocess.run([sys.executable, "-m", "launcher", "run", "--ranks", "2", "--env", b"GIVEN=" + GBK,
                           str(program)], cwd=tmp_path, env=env, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert b"Traceback" not in done.stderr
    run = tmp_path / "dlaunch_runs" / "latest"
    assert json.loads((run / "summary.json").read_text())["status"] == "succeeded"
    env_log = (run / "rank_001" / "env.log").read_bytes()
    assert b"INHERITED=" + GBK + b"\n" in env_log and b"GIVEN=" + GBK + b"\n" in env_log
    report = subprocess.run([sys.executable, "-m", "launcher", "report", "-o", b"r\xd6\xd0.html"], cwd=tmp_path,
                            env=env, capture_output=True, timeout=120)
    assert report.returncode == 0, report.stderr.decode(errors="replace")
    assert (tmp_path / os.fsdecode(b"r\xd6\xd0.html")).stat().st_size > 1000


def test_a_launcher_defect_leaves_a_failed_run_not_a_starting_one(tmp_path, monkeypatch, capsys):
    """Whatever breaks dlaunch once the run directory exists, its summary says failed (status must never show
    "starting" forever); the defect itself still surfaces."""
    import json

    from launcher.execute.local.workers import LocalWorkers

    def broken(self, plan):
        raise RuntimeError("injected launcher defect")

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("pass\n")
    monkeypatch.setattr(LocalWorkers, "run", broken)
    with pytest.raises(RuntimeError, match="injected"):
        main(["run", "--ranks", "1", "train.py"])
    summary = json.loads((tmp_path / "dlaunch_runs" / "latest" / "summary.json").read_text())
    assert summary["status"] == "failed" and "injected launcher defect" in summary["launcher_error"], summary
    assert summary["exit_code"] == 1


# ---------------------------------------------------------------- defect 11: msrun values out of range


# ---------------------------------------------------------------- a new user: a directory where a file belongs


def test_a_directory_given_as_the_script_is_named_a_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "D").mkdir()
    assert main(["run", "--ranks", "1", "D"]) == 2
    err = capsys.readouterr().err
    assert "D is a directory (with no __main__.py), not a script" in err and "not found" not in err, err
    assert not (tmp_path / "dlaunch_runs").exists()
    (tmp_path / "D" / "__main__.py").write_text("pass\n")   # as python D runs it: accepted
    assert main(["run", "--ranks", "1", "D"]) == 0, capsys.readouterr().err


# ---------------------------------------------------------------- real clients: @record's first failure

@pytest.mark.parametrize("stopped", [False, True])
def test_the_first_failure_by_its_error_file_is_the_root_cause(tmp_path, stopped):
    """Rank 1's @record error file is written before rank 0 fails, though rank 0's exit is seen first: the
    root cause is rank 1 (torchrun orders failures by their error files' timestamps), on the console and in
    summary.json, and the exit code is rank 1's: 1, its exception's, also when dlaunch's SIGTERM ended it on
    its way out (``stopped``)."""
    import json

    from tests.launching import run_dlaunch

    program = str(__import__("pathlib").Path(__file__).parents[1] / "programs" / "record_first.py")
    done = run_dlaunch("run", "--ranks", "2", "--grace-period", "30", program, cwd=tmp_path,
                       env={"RECORD_FIRST_STOPPED": "1" if stopped else "0"})
    assert done.returncode == 1, done.stderr
    summary = json.loads((tmp_path / "dlaunch_runs" / "latest" / "summary.json").read_text())
    cause = summary["root_cause"]
    assert cause["rank"] == 1 and cause["exit_code"] == 1, cause
    assert "ValueError: rank 1 broke first" in cause["error_file_message"]
    assert "its error file says: ValueError: rank 1 broke first" in done.stderr, done.stderr


# ---------------------------------------------------------------- a new user: commands, the run directory, restarts


def test_the_run_directory_is_said_at_the_start_and_a_restart_in_the_closing_line(tmp_path):
    from tests.launching import run_dlaunch

    (tmp_path / "flaky.py").write_text("import os, sys\nsys.exit(5 if os.environ['TORCHELASTIC_RESTART_COUNT'] == '0' "
                                       "else 0)\n")
    done = run_dlaunch("run", "--ranks", "1", "--max-restarts", "1", "flaky.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    run_dir = str((tmp_path / "dlaunch_runs" / "latest").resolve())
    assert lines[0] == f"dlaunch: run directory {run_dir}", lines
    assert "exited 0 after 1 restart(s) in" in lines[-1], lines


# ---------------------------------------------------------------- real clients: msrun's log names

def test_msrun_log_names_lead_to_the_newest_runs_logs(tmp_path):
    """MindSpore's docs send users to <log_dir>/worker_N.log and scheduler.log: they are links to the newest
    run's logs, each run keeping its own directory; a user's own file of such a name is left alone."""
    from tests.launching import run_dlaunch

    (tmp_path / "train.py").write_text("import os\nprint('hello from', os.environ['RANK_ID'])\n")
    logs = tmp_path / "msrun_log"
    logs.mkdir()
    (logs / "worker_1.log").write_text("mine\n")
    for _ in range(2):
        done = run_dlaunch("msrun", "--worker_num=2", "--local_worker_num=2", "--log_dir=msrun_log", "train.py",
                           cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    runs = [p for p in logs.iterdir() if p.is_dir() and not p.is_symlink()]
    assert len(runs) == 2
    assert "hello from 0" in (logs / "worker_0.log").read_text()
    assert (logs / "worker_0.log").resolve() == (logs / "latest" / "rank_000" / "output.log").resolve()
    assert (logs / "scheduler.log").resolve().parent.parent == (logs / "latest").resolve()
    assert (logs / "worker_1.log").read_text() == "mine\n"


# ---------------------------------------------------------------- multi-host: what was read as a host key

def test_a_damaged_known_hosts_line_is_named_not_taken_for_a_host_key(tmp_path):
    """A login shell's stderr (a pyenv warning) that ended up in known_hosts made paramiko refuse the whole
    file (InvalidHostKey, the warning shown as the 'key'): the message names the file and the line."""
    from sshd_hosts import require_sshd, start_cluster

    from tests.launching import RANK_PROGRAM, run_dlaunch, write_rank_table

    require_sshd()
    with start_cluster(tmp_path / "sshd", 2) as cluster:
        damaged = tmp_path / "known_hosts"
        damaged.write_text(cluster.known_hosts.read_text() +
                           "pyenv: cannot rehash: /root/.pyenv/shims isn't writable\n")
        config = tmp_path / "ssh_config"
        config.write_text(cluster.ssh_config.read_text().replace(str(cluster.known_hosts), str(damaged)))
        table = write_rank_table(tmp_path / "rt.json", ("127.0.0.2", "127.0.0.3"), 1)
        done = run_dlaunch("cluster", RANK_PROGRAM, "--rank-table", table, "--ssh", "--ssh-config", config,
                           "--output-dir", tmp_path / "runs", "--profile", "a2", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"known_hosts file {damaged} holds a line that is not a host key" in done.stderr, done.stderr
    assert "pyenv: cannot rehash" in done.stderr and "InvalidHostKey" not in done.stderr


# ---------------------------------------------------------------- a new user: a compact --dry-run







