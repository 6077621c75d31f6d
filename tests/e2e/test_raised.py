"""A Python rank's uncaught exception is heard when it is raised (issue 46, item 1): the attempt's stop, the
survivors' notice and the exit code come then, not after the rank's slow teardown; nothing else is called a
failure (an exception the rank catches, sys.exit, a child Python's exception), and the hook leaves the rank's
PYTHONPATH, sys.path and its own sitecustomize as they were.

Rank 1's teardown lasts a minute (tests/programs/raising_rank.py), so a dlaunch that waits for its exit runs
past each test's bound; the bound is that, not a stopwatch."""

import json
import os

from tests.launching import ROOT, latest_run, run_dlaunch

PROGRAM = str(ROOT / "tests" / "programs" / "raising_rank.py")
BOUND = 40


def _run(tmp_path, mode, *flags, env=None):
    done = run_dlaunch("run", PROGRAM, "--ranks", "2", "--output-dir", tmp_path / "runs", "--grace-period", "5",
                       *flags, cwd=tmp_path, env={"RAISE_MODE": mode, **(env or {})}, timeout=BOUND)
    run = latest_run(tmp_path / "runs")
    return done, run, json.loads((run / "summary.json").read_text())


def test_a_raise_stops_the_attempt_before_the_rank_ends_and_its_exit_code_is_1(tmp_path):
    done, run, summary = _run(tmp_path, "raise")
    assert done.returncode == 1, done.stderr
    assert "rank 1 raised an exception" in done.stderr
    cause = summary["root_cause"]
    assert (cause["rank"], cause["exit_code"], cause["signal"]) == (1, 1, None)
    assert any("ValueError: rank 1 broke" in line for line in cause["log_tail"])


def test_the_survivors_are_told_while_the_rank_that_raised_still_tears_down(tmp_path):
    done, run, summary = _run(tmp_path, "raise", "--survivor-window", "10")
    assert done.returncode == 1, done.stderr
    assert (run / "noticed").read_text() == "1"


def test_under_record_the_error_file_and_root_cause_are_unchanged(tmp_path):
    done, run, summary = _run(tmp_path, "record")
    assert done.returncode == 1, done.stderr
    cause = summary["root_cause"]
    assert (cause["rank"], cause["exit_code"], cause["signal"]) == (1, 1, None)
    assert "rank 1 broke" in cause.get("error_file_message", "")


def test_what_is_not_an_uncaught_exception_is_judged_by_the_exit(tmp_path):
    for mode, code in (("caught", 0), ("child", 0), ("exit", 3)):
        (tmp_path / mode).mkdir()
        done, run, summary = _run(tmp_path / mode, mode)
        assert done.returncode == code, (mode, done.stderr)
        assert "raised an exception" not in done.stderr, mode


def test_the_rank_sees_its_own_pythonpath_and_sitecustomize(tmp_path):
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os, pathlib\n"
                                          "pathlib.Path(os.environ['DLAUNCH_RUN_DIR'], 'own_site_ran').touch()\n")
    done, run, summary = _run(tmp_path, "caught", env={"PYTHONPATH": str(own)})
    assert done.returncode == 0, done.stderr
    assert (run / "own_site_ran").exists()
    python_path, sys_path = (run / "path_seen_by_rank").read_text().split("\n")
    assert python_path == str(own)
    assert "rankhook" not in sys_path and str(own) in sys_path.split(os.pathsep)


def test_a_rank_killed_from_outside_is_the_root_cause_not_the_peer_whose_collective_raised(tmp_path):
    """Its peer's all_reduce raises the moment its sockets close, and the peer's hook speaks a moment before the
    killed rank's exit can be read; the first failure is still the kill (found under load: 3 kills in 6 named
    the peer). Three launches, each must name rank 0 and SIGKILL."""
    import signal
    import time

    from tests.launching import start_dlaunch

    program = str(ROOT / "tests" / "programs" / "allreduce_loop.py")
    for attempt in range(3):
        out = tmp_path / f"runs{attempt}"
        proc = start_dlaunch("run", program, "--ranks", "2", "--output-dir", out, cwd=tmp_path)
        try:
            deadline = time.monotonic() + 60
            while not (out.exists() and all(any(out.glob(f"*/pid.{r}")) for r in (0, 1))):
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
            time.sleep(0.5)   # both in their loop of collectives
            os.kill(int(next(out.glob("*/pid.0")).read_text()), signal.SIGKILL)
            _, err = proc.communicate(timeout=BOUND)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        cause = json.loads(next(out.glob("*/summary.json")).read_text())["root_cause"]
        assert (proc.returncode, cause["rank"], cause["signal"]) == (137, 0, "SIGKILL"), err


def test_a_no_python_rank_that_execs_python_is_heard_when_it_raises_and_a_shells_child_is_not(tmp_path):
    """``--no-python sh -c 'exec python ...'`` (how a script is given $DLAUNCH_MEMORY_DIR, or run under numactl)
    is the process dlaunch started: its raise is heard at once (its teardown lasts a minute, past the bound). A
    Python that a shell rank starts as its child never speaks for the rank: judged by the shell's exit."""
    import sys

    (tmp_path / "exec").mkdir()
    done = run_dlaunch("run", "--no-python", "sh", "--ranks", "2", "--output-dir", tmp_path / "exec" / "runs",
                       "--grace-period", "5", "--", "-c", 'exec "$0" "$1"', sys.executable, PROGRAM,
                       cwd=tmp_path / "exec", env={"RAISE_MODE": "raise"}, timeout=BOUND)
    assert done.returncode == 1, done.stderr
    assert "rank 1 raised an exception" in done.stderr, done.stderr
    (tmp_path / "child").mkdir()
    done = run_dlaunch("run", "--no-python", "sh", "--ranks", "2", "--output-dir", tmp_path / "child" / "runs",
                       "--", "-c", '"$0" -c "raise ValueError(1)"; exit 0', sys.executable,
                       cwd=tmp_path / "child", timeout=BOUND)
    assert done.returncode == 0, done.stderr
    assert "raised an exception" not in done.stderr, done.stderr
