"""Process lifetime against forks during async saves and pid-hopping daemons: nothing outlives the launch."""
import os
import signal
import subprocess
import sys
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _python(code: str, timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_child_forked_during_async_save_exits_normally(tmp_path):
    """The child inherits the atexit hook of its parent's writer, not its thread: it must not wait."""
    result = _python(f"""
        import os, sys, time
        from launcher.checkpoint import writer as ckptwriter
        def store(snapshot):
            time.sleep(600)   # never done while the test runs
        ckptwriter.writer().submit({str(tmp_path / 'x')!r}, {{"a": 1}}, store)
        pid = os.fork()
        if pid == 0:
            sys.exit(0)
        _, status = os.waitpid(pid, 0)   # without the fix: forever (the test's timeout)
        print("child", os.waitstatus_to_exitcode(status), flush=True)
        os._exit(0)   # the parent's own save is never done: skip its wait
    """, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["child", "0"]


HOP = "import os\\nwhile True:\\n    if os.fork():\\n        os._exit(0)\\n"   # a new pid every hop, one group
HOPPER = f"""
import os, subprocess, sys, time
daemon = subprocess.Popen([sys.executable, "-c", "{HOP}"], start_new_session=True)
with open(os.environ["HOPPER_GROUP_FILE"], "w") as fh:
    fh.write(str(daemon.pid))   # its session's and group's id: every hop keeps it
time.sleep(0.5)
"""


def live_in_group(group: int) -> list[int]:
    """The live (not zombie) processes of ``group``, stopped: one SIGSTOP to the group reaches every member at
    once and no fork escapes it, so a hopping chain is caught whatever its current pid; a scan of /proc alone
    is no check (the pid it lists has hopped before it is read), nor is a signal 0 (the hops' zombies, which
    init reaps when it gets to them, answer it too)."""
    try:
        os.killpg(group, signal.SIGSTOP)
    except ProcessLookupError:
        return []
    time.sleep(0.02)   # a stop lands when the process next runs
    live = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] not in (b"Z", b"X"):
            live.append(int(name))
    return live


def kill_group(group: int) -> None:
    """End a hopper's chain whatever its current pid: a group signal, which no fork escapes."""
    try:
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_a_daemon_that_keeps_hopping_pids_does_not_outlive_a_launch_that_ends_normally(tmp_path):
    """A rank starts a daemon that forks and exits in a loop (a new pid every hop, its own session): when the
    launch ends normally, the end-of-attempt sweep must catch it between hops (issue 38, item 27). Five
    launches, each checked, as the issue's own check ran (it escaped in one of three)."""
    from tests.launching import run_dlaunch

    script = tmp_path / "hopper.py"
    script.write_text(HOPPER)
    escaped = []
    for attempt in range(5):
        record = tmp_path / f"group.{attempt}"
        done = run_dlaunch("run", script, "--ranks", "1", "--output-dir", tmp_path / "out", cwd=tmp_path,
                           env={"HOPPER_GROUP_FILE": str(record)})
        assert done.returncode == 0, done.stderr
        group = int(record.read_text())
        if live_in_group(group):   # the launch has ended: its sweep is done
            escaped.append(attempt)
        kill_group(group)
    assert not escaped, f"a hopper outlived launches {escaped} of 5"


def test_one_kill_of_a_hopping_daemon_ends_its_whole_chain():
    """The sweep's kill (reaper._kill) of a daemon that forks and exits in a loop: one call, on a pid that may
    already have forked its successor, ends the chain (issue 38, item 27: a signal to the pid alone lost the race
    to the next fork, and the daemon outlived the launch). Run as a subreaper, as the launcher is, which reaps."""
    result = _python(f"""
        import ctypes, os, subprocess, sys, time
        from launcher.execute.local import reaper
        from tests.e2e.test_lifetime_daemons import kill_group, live_in_group
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)   # PR_SET_CHILD_SUBREAPER
        def running(pid):
            try:
                return open(f"/proc/{{pid}}/stat").read().split(") ")[1][0] != "Z"
            except OSError:
                return False
        def reap():   # the hops' zombies, handed to this subreaper: unreaped, they fill the pid space
            while True:
                try:
                    if os.waitpid(-1, os.WNOHANG)[0] == 0:
                        return
                except ChildProcessError:
                    return
        survived = 0
        for _ in range(20):   # the pid alone: about a third of the chains survived it
            group = subprocess.Popen([sys.executable, "-c", "{HOP}"], start_new_session=True,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid
            time.sleep(0.1)   # hopping: the first pid is long gone
            current = []
            while not current:   # the hop now running (between two, it is its parent's child for a moment)
                reap()
                current = [int(p) for p in open(f"/proc/{{os.getpid()}}/task/{{os.getpid()}}/children").read().split()
                           if running(p)]
            reaper._kill(current[0])
            survived += bool(live_in_group(group))
            kill_group(group)
            reap()
        print("survived", survived)
    """, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["survived", "0"], result.stdout + result.stderr


TICKER = """
import time
for i in range(40):
    print("tick", i, flush=True)
    time.sleep(0.25)
"""


def test_stopping_the_launcher_is_not_the_ranks_silence(tmp_path):
    """SIGSTOP of dlaunch for longer than --hang-timeout, then SIGCONT: a healthy job still ends with 0."""
    from tests.launching import start_dlaunch, wait_until

    script = tmp_path / "tick.py"
    script.write_text(TICKER)
    proc = start_dlaunch("run", script, "--ranks", "2", "--output-dir", tmp_path / "out", "--hang-timeout", "2",
                         cwd=tmp_path)
    try:
        log = tmp_path / "out" / "latest" / "rank_001" / "output.log"
        wait_until(lambda: log.exists() and b"tick 2" in log.read_bytes(), timeout=30)
        proc.send_signal(signal.SIGSTOP)
        time.sleep(3.5)
        proc.send_signal(signal.SIGCONT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "hung" not in err
