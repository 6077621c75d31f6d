"""Process lifetime, round 3 (issue 20): forks during async saves, pid-hopping daemons."""
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python(code: str, timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_child_forked_during_async_save_exits_normally(tmp_path):
    """The child inherits the atexit hook of its parent's writer, not its thread: it must not wait."""
    result = _python(f"""
        import os, sys, time
        from launcher import ckptwriter
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
