"""A stop signal in any phase of a launch (issue 45, "every wait ends on a stop signal"): no further attempt
starts, the ranks that run are stopped with the signal's grace, and dlaunch exits 128+N, never 0.

Each test puts dlaunch in one phase with a job whose restart would succeed (rank 0 fails only in the first
attempt), then sends SIGTERM there: a dlaunch that missed it would restart and exit 0, or wait out the phase.
The rank that survives the failure ignores SIGTERM and the stop's own grace is long (60 s), so a dlaunch that
does not give the signal's grace (1 s) runs past the test's bound."""

import os
import signal
import socket
import threading
import time

from tests.launching import ROOT, start_dlaunch

PROGRAM = str(ROOT / "tests" / "programs" / "stop_phases.py")
BOUND = 45   # seconds a dlaunch has, in all, to end after the signal: less than the stop's 60 s grace


def _launch(tmp_path, *flags, env=None, ranks=2):
    marks = tmp_path / "marks"
    marks.mkdir()
    proc = start_dlaunch("run", PROGRAM, "--ranks", ranks, "--output-dir", tmp_path / "runs",
                         "--max-restarts", "2", "--grace-period", "60", "--signal-grace", "1", *flags, "--", marks,
                         cwd=tmp_path, env=env)
    return proc, marks


def _stderr_until(proc, text: str) -> list[str]:
    """dlaunch's stderr lines up to the one holding ``text`` (the phase the test waits for)."""
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if text in line:
            return lines
    proc.wait(5)
    raise AssertionError(f"dlaunch ended before saying {text!r}:\n{''.join(lines)}")


def _stop(proc, before: list[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        _, rest = proc.communicate(timeout=BOUND)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return "".join(before) + rest


def _no_second_attempt(marks) -> None:
    assert sorted(p.name for p in marks.glob("start.*.1")) == []


def test_sigterm_while_the_failed_attempt_stops_cancels_the_restart(tmp_path):
    proc, marks = _launch(tmp_path)
    deadline = time.monotonic() + 60
    while not (marks / "term.1.0").exists():   # rank 1 got the stop's SIGTERM: the stop's grace runs
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.05)
    said = _stop(proc, [])
    assert proc.returncode == 128 + signal.SIGTERM, said
    _no_second_attempt(marks)
    assert "Traceback" not in said and "restarting" not in said


def _stopped_in(proc, marks, phase: str) -> str:
    """SIGTERM once dlaunch said ``phase``: it exits 143 and starts no second attempt; what it said."""
    said = _stop(proc, _stderr_until(proc, phase))
    assert proc.returncode == 128 + signal.SIGTERM, said
    _no_second_attempt(marks)
    assert "Traceback" not in said
    return said


def test_sigterm_inside_the_survivors_window_cancels_the_restart(tmp_path):
    said = _stopped_in(*_launch(tmp_path, "--survivor-window", "60"), "to save before they are stopped")
    assert "restarting" not in said   # decided inside the window: the restart never came up


def test_sigterm_during_the_device_release_wait_starts_no_next_attempt(tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()
    smi = tools / "nvidia-smi"   # a GPU whose memory is never released
    smi.write_text('#!/bin/sh\ncase "$*" in *query-gpu*) echo "0, 9000";; *-L*) echo "GPU 0: Fake (UUID: x)";; '
                   'esac\n')
    smi.chmod(0o755)
    env = {"PATH": f"{tools}:{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": "0"}
    _stopped_in(*_launch(tmp_path, "--device-release-timeout", "60", env=env, ranks=1), "device memory to be released")


def test_sigterm_while_the_health_gate_waits_for_its_checker(tmp_path):
    proc, marks = _launch(tmp_path, "--health-gate", "--health-check", "sleep 60", ranks=1)
    before = _stderr_until(proc, "run directory")
    time.sleep(0.5)   # inside the checker's wait (the gate runs before any rank starts)
    said = _stop(proc, before)
    assert proc.returncode == 128 + signal.SIGTERM, said   # not 92: the checker's time-out was never waited for
    assert list(marks.iterdir()) == []
    assert "Traceback" not in said


def test_sigterm_while_a_health_service_trickles_its_answer(tmp_path):
    path = str(tmp_path / "health.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    stop = threading.Event()

    def trickle():
        conn, _ = server.accept()
        with conn:
            while not stop.wait(0.5):   # one byte every half second, forever: never a whole answer
                try:
                    conn.send(b" ")
                except OSError:
                    return

    threading.Thread(target=trickle, daemon=True).start()
    try:
        proc, marks = _launch(tmp_path, "--health-gate", "--health-check", f"unix:{path}", ranks=1)
        before = _stderr_until(proc, "run directory")
        time.sleep(1.5)   # the answer trickles in
        said = _stop(proc, before)
    finally:
        stop.set()
        server.close()
    assert proc.returncode == 128 + signal.SIGTERM, said
    assert list(marks.iterdir()) == []
