"""The posix_spawn path (launcher/execute/local/spawn.py) keeps what Popen gave every rank.

Each test runs RankSpawner in a child Python (the launcher's side, which makes its inherited descriptors
non-inheritable: not something to do to the test runner) and starts real processes: the rank's own session,
stdin from /dev/null, stdout and stderr into the given file, SIGPIPE back to its default, no inherited
descriptor, the shared environment plus the rank's variables and the markers, the 127/126 spawn errors, the
Popen fallback for another working directory, and death with the launcher (setpriv's parent-death signal).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.skipif(shutil.which("setpriv") is None, reason="the posix_spawn path needs setpriv")

RANK_SCRIPT = r"""
echo "pid=$$"
echo "pgid=$(ps -o pgid= -p $$ | tr -d ' ')"
echo "sid=$(ps -o sid= -p $$ | tr -d ' ')"
echo "ignored=$(grep SigIgn /proc/self/status | cut -f2)"
echo "fds=$(ls /proc/self/fd | tr '\n' ' ')"
echo "stdin=$(readlink /proc/self/fd/0)"
echo "rank=$RANK inherited=$SHARED_ONE marker=$DLAUNCH_LAUNCHER_ID cwd=$(pwd)"
echo "to stderr" >&2
"""


def run_spawner(tmp_path, body: str) -> dict:
    """Run ``body`` in a child Python with ``spawner`` (a RankSpawner) and ``out`` (an fd) at hand; its JSON."""
    program = textwrap.dedent("""
        import json, os, sys
        from launcher.execute.local.spawn import RankSpawner
        inherited = os.dup2(os.open(os.devnull, os.O_RDONLY), 50)   # inheritable: as a launcher's parent may leave
        environ = {**os.environ, "SHARED_ONE": "1"}
        spawner = RankSpawner(environ, {"DLAUNCH_LAUNCHER_ID": "abc"})
        out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        result = {"inherited": inherited}
    """) + textwrap.dedent(body) + "\nprint(json.dumps(result))\n"
    proc = subprocess.run([sys.executable, "-c", program, str(tmp_path / "out.log")], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path, env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_rank_gets_its_session_streams_environment_and_no_inherited_fd(tmp_path):
    result = run_spawner(tmp_path, f"""
        child = spawner.spawn(["/bin/sh", "-c", {RANK_SCRIPT!r}], {{"RANK": "7"}}, os.getcwd(), out)
        result["code"] = child.wait()
        result["fallbacks"] = spawner.fallbacks
    """)
    assert result["code"] == 0 and result["fallbacks"] == 0
    lines = dict(line.split("=", 1) for line in (tmp_path / "out.log").read_text().splitlines() if "=" in line
                 and not line.startswith(("rank=",)))
    text = (tmp_path / "out.log").read_text()
    assert lines["pgid"] == lines["pid"] == lines["sid"]    # its own session and group
    assert not int(lines["ignored"], 16) & (1 << (signal.SIGPIPE - 1))  # SIGPIPE default, not Python's SIG_IGN
    fds = lines["fds"].split()
    assert str(result["inherited"]) not in fds and len(fds) <= 4, fds  # 0 1 2 and ls's own directory fd
    assert lines["stdin"] == "/dev/null"
    assert f"rank=7 inherited=1 marker=abc cwd={tmp_path}" in text
    assert "to stderr" in text


def test_missing_and_not_executable_programs_are_spawn_errors(tmp_path):
    (tmp_path / "plain").write_text("#!/bin/sh\n")
    result = run_spawner(tmp_path, """
        for name in ("./missing", "./plain", "no-such-program-here"):
            try:
                spawner.spawn([name], {}, os.getcwd(), out)
                result[name] = "started"
            except OSError as exc:
                result[name] = type(exc).__name__
    """)
    assert result == {**result, "./missing": "FileNotFoundError", "./plain": "PermissionError",
                      "no-such-program-here": "FileNotFoundError"}


def test_another_working_directory_falls_back_to_popen(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    result = run_spawner(tmp_path, f"""
        child = spawner.spawn(["/bin/sh", "-c", "pwd; echo rank=$RANK marker=$DLAUNCH_LAUNCHER_ID"], {{"RANK": "3"}},
                              {str(other)!r}, out)
        result["code"] = child.wait()
        result["fallbacks"] = spawner.fallbacks
    """)
    assert result["code"] == 0 and result["fallbacks"] == 1
    assert (tmp_path / "out.log").read_text().split() == [str(other), "rank=3", "marker=abc"]


def test_rank_dies_with_its_launcher(tmp_path):
    """SIGKILL the process that spawned a rank: setpriv's parent-death signal kills the rank."""
    pid_file = tmp_path / "rank.pid"
    program = textwrap.dedent(f"""
        import os, time
        from launcher.execute.local.spawn import RankSpawner
        spawner = RankSpawner(dict(os.environ), {{"DLAUNCH_LAUNCHER_ID": "abc"}})
        out = os.open({str(tmp_path / 'out.log')!r}, os.O_WRONLY | os.O_CREAT, 0o644)
        child = spawner.spawn(["/bin/sh", "-c", "echo $$ > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; "
                               "exec sleep 60"], {{}}, os.getcwd(), out)
        time.sleep(60)
    """)
    launcher = subprocess.Popen([sys.executable, "-c", program], cwd=tmp_path, env={**os.environ, "PYTHONPATH": ROOT})
    try:
        deadline = time.monotonic() + 30
        while not pid_file.exists():
            assert time.monotonic() < deadline, "the rank never started"
            time.sleep(0.05)
        rank = int(pid_file.read_text())
        time.sleep(0.2)   # the rank has exec'd sleep (setpriv armed the signal before its exec)
        launcher.kill()
        launcher.wait()
        deadline = time.monotonic() + 10
        while _alive(rank):
            assert time.monotonic() < deadline, f"rank {rank} outlived its launcher"
            time.sleep(0.05)
    finally:
        launcher.kill()
        launcher.wait()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_descriptors_held_while_spawning_do_not_grow_with_the_ranks(tmp_path):
    """Counted, not timed: every descriptor the launcher holds is copied into each later spawn's fd table and
    closed at its exec, so what it holds while spawning must not grow with the rank count (a pidfd per rank
    held during the loop made a 1,024-rank launch O(N^2)).  A real launch of 64 ranks, with os.posix_spawn
    wrapped to count the launcher's open descriptors at each spawn."""
    program = textwrap.dedent(f"""
        import json, os, sys
        counts = []
        real = os.posix_spawn
        def counting(*args, **kwargs):
            counts.append(len(os.listdir("/proc/self/fd")))
            return real(*args, **kwargs)
        os.posix_spawn = counting
        from launcher.cli import main
        code = main(["run", "--no-python", "/bin/true", "--ranks", "64", "--profile", "structure",
                     "--console", "none", "--output-dir", {str(tmp_path / 'runs')!r}])
        print(json.dumps({{"code": code, "counts": counts}}))
    """)
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["code"] == 0 and len(result["counts"]) == 64, result
    assert max(result["counts"]) - min(result["counts"]) <= 4, result["counts"]


# Standard modules a launch of ranks needs none of (imported after dlaunch's own: typing and subprocess ~2.5 ms
# of CPU each, tempfile ~1.5 ms; the three 6.5-9.4 ms): where one is needed (PID 1's thread, the Popen
# fallback, nvidia-smi, py-spy), the function that needs it imports it.  Those the interpreter's own
# start already imported (a site-packages .pth file can) are not dlaunch's doing and are not counted.
NOT_FOR_A_LAUNCH = ("typing", "tempfile", "random", "subprocess", "threading")


def test_a_launch_imports_none_of_the_standard_modules_it_does_not_need(tmp_path):
    program = textwrap.dedent(f"""
        import json, sys
        before = set(sys.modules)
        from launcher.cli import main
        try:
            code = main(["run", "--no-python", "/bin/true", "--ranks", "2", "--output-dir", {str(tmp_path / 'runs')!r}])
        except SystemExit as exc:
            code = exc.code
        imported = [m for m in {NOT_FOR_A_LAUNCH!r} if m in sys.modules and m not in before]
        print(json.dumps({{"code": code, "imported": imported}}))
    """)
    done = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT}, timeout=60)
    result = json.loads(done.stdout.splitlines()[-1])
    assert result == {"code": 0, "imported": []}, done.stderr
