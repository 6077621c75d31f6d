"""Process lifetime against forks during async saves and pid-hopping daemons: nothing outlives the launch."""
import os
import subprocess
import sys
import textwrap

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


HOPPER = """
import os, subprocess, sys, time
code = "import os\\nwhile True:\\n    if os.fork():\\n        os._exit(0)\\n"
subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
time.sleep(0.5)
"""


def _hoppers(tag: str) -> list[int]:
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if f"HOPPER_TAG={tag}".encode() in fh.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            continue
    return found


def test_a_daemon_that_keeps_hopping_pids_does_not_outlive_a_launch_that_ends_normally(tmp_path):
    """A rank starts a daemon that forks and exits in a loop (a new pid every hop, its own session): when the
    launch ends normally, the end-of-attempt sweep must catch it between hops (issue 38, item 27). Three launches,
    each checked, as the issue's own check ran."""
    from tests.launching import run_dlaunch, wait_until

    script = tmp_path / "hopper.py"
    script.write_text(HOPPER)
    for attempt in range(3):
        tag = f"{os.getpid()}-{attempt}"
        done = run_dlaunch("run", script, "--ranks", "1", "--output-dir", tmp_path / "out", cwd=tmp_path,
                           env={"HOPPER_TAG": tag})
        assert done.returncode == 0, done.stderr
        try:
            assert wait_until(lambda tag=tag: not _hoppers(tag), timeout=1.0), f"launch {attempt}: a hopper outlived it"
        finally:
            _kill_hoppers(tag)


def _kill_hoppers(tag: str) -> None:
    """A hopper's pid is stale by the time a kill lands as often as not: kill its process group (the chain keeps
    it), which no fork escapes."""
    for pid in _hoppers(tag):
        try:
            os.killpg(os.getpgid(pid), 9)
        except ProcessLookupError:
            pass


def test_one_kill_of_a_hopping_daemon_ends_its_whole_chain():
    """The sweep's kill (reaper._kill) of a daemon that forks and exits in a loop: one call, on a pid that may
    already have forked its successor, ends the chain (issue 38, item 27: a signal to the pid alone lost the race
    to the next fork, and the daemon outlived the launch). Run as a subreaper, as the launcher is, which reaps."""
    tag = f"{os.getpid()}-one-kill"
    result = _python(f"""
        import ctypes, os, subprocess, sys, time
        from launcher.execute.local import reaper
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)   # PR_SET_CHILD_SUBREAPER
        code = "import os\\nwhile True:\\n    if os.fork():\\n        os._exit(0)\\n"
        env = dict(os.environ, HOPPER_TAG={tag!r})
        def running(pid):
            try:
                return open(f"/proc/{{pid}}/stat").read().split(") ")[1][0] != "Z"
            except OSError:
                return False
        survived = 0
        for _ in range(20):   # the pid alone: about a third of the chains survived it
            subprocess.Popen([sys.executable, "-c", code], start_new_session=True, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.1)   # hopping: the first pid is long gone
            current = []
            while not current:   # the hop now running (between two, it is its parent's child for a moment)
                current = [int(p) for p in open(f"/proc/{{os.getpid()}}/task/{{os.getpid()}}/children").read().split()
                           if running(p)]
            reaper._kill(current[0])
            time.sleep(0.1)
            while True:   # reap every hop's zombie
                try:
                    if os.waitpid(-1, os.WNOHANG)[0] == 0:
                        break
                except ChildProcessError:
                    break
            alive = [p for p in open(f"/proc/{{os.getpid()}}/task/{{os.getpid()}}/children").read().split()
                     if running(p)]
            survived += bool(alive)
            for p in alive:
                os.killpg(os.getpgid(int(p)), 9)
        print("survived", survived)
    """, timeout=60)
    try:
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["survived", "0"], result.stdout + result.stderr
    finally:
        _kill_hoppers(tag)


TICKER = """
import time
for i in range(40):
    print("tick", i, flush=True)
    time.sleep(0.25)
"""


def test_stopping_the_launcher_is_not_the_ranks_silence(tmp_path):
    """SIGSTOP of dlaunch for longer than --hang-timeout, then SIGCONT: a healthy job still ends with 0."""
    import signal
    import time

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
