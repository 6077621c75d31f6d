"""The console as people see it: live progress bars on a terminal, one prefix per line, Ctrl-C said aloud.

A pseudo-terminal stands in for the user's terminal; ``screen`` replays what dlaunch wrote to it the way a
terminal would (carriage return, erase to end of line, newline), so the tests check what is on the screen.
"""

import os
import pty
import select
import signal
import subprocess
import time

from tests.launching import RANK_PROGRAM, ROOT, dlaunch_argv, latest_run


def screen(data: bytes) -> list[str]:
    """The lines a terminal shows after ``data``: \\r returns to column 0, ESC[K erases to the end of line."""
    lines, line, col = [], [], 0
    i = 0
    while i < len(data):
        if data.startswith(b"\x1b[K", i):
            del line[col:]
            i += 3
            continue
        char = data[i:i + 1]
        if char == b"\n":
            lines.append(b"".join(line).decode())
            line, col = [], 0
        elif char == b"\r":
            col = 0
        else:
            if col < len(line):
                line[col] = char
            else:
                line.append(char)
            col += 1
        i += 1
    if line:
        lines.append(b"".join(line).decode())
    return lines


class Terminal:
    """dlaunch started with a pseudo-terminal as its stdout and stderr; ``read_until`` collects its output."""

    def __init__(self, *args, cwd):
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(dlaunch_argv(*args), cwd=cwd, stdin=subprocess.DEVNULL, stdout=slave,
                                     stderr=slave, env={**os.environ, "PYTHONPATH": str(ROOT)})
        os.close(slave)
        self.data = b""

    def read_until(self, predicate, timeout=30.0) -> bool:
        deadline = time.monotonic() + timeout
        while not predicate(self.data) and time.monotonic() < deadline:
            ready, _, _ = select.select([self.master], [], [], 0.05)
            if ready:
                try:
                    self.data += os.read(self.master, 65536)
                except OSError:   # EIO: the other side is closed
                    break
        return predicate(self.data)

    def finish(self, timeout=60.0) -> int:
        self.read_until(lambda _: self.proc.poll() is not None, timeout)
        self.read_until(lambda _: False, 0.3)
        os.close(self.master)
        return self.proc.wait(timeout)


def test_a_progress_bar_is_shown_before_its_line_ends_and_lines_never_mix(tmp_path):
    flag = tmp_path / "go"
    term = Terminal("run", RANK_PROGRAM, "--ranks", "2", "--console", "all", "--output-dir", tmp_path / "runs",
                    "--", "--progress-until", flag, "--print", "3", cwd=tmp_path)
    assert term.read_until(lambda d: b"rank 0 progress 1/2" in d and b"rank 1 progress 1/2" in d), term.data
    flag.touch()   # only now may the bars' lines end: what was seen so far was drawn live
    assert term.finish() == 0, term.data
    shown = screen(term.data)
    for rank in (0, 1):
        assert f"[rank{rank}]: rank {rank} progress 2/2" in shown
    for line in shown:
        if line.startswith("[rank"):
            assert line.count("[rank") == 1, line
    log = (latest_run(tmp_path / "runs") / "rank_000" / "output.log").read_bytes()
    assert log.startswith(b"\rrank 0 progress 1/2\rrank 0 progress 2/2\n")   # the log keeps every byte


def test_a_line_torch_already_prefixed_is_not_prefixed_twice(tmp_path):
    program = tmp_path / "prefixed.py"
    program.write_text("print('[rank0]: Traceback (most recent call last):')\nprint('plain')\n")
    result = subprocess.run(dlaunch_argv("run", program, "--ranks", "1", "--output-dir", tmp_path / "runs"),
                            cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[rank0]: Traceback (most recent call last):", "[rank0]: plain"]


def test_ctrl_c_says_at_once_what_happens_and_when_the_grace_ends(tmp_path):
    term = Terminal("run", RANK_PROGRAM, "--ranks", "2", "--grace-period", "1", "--console", "all", "--output-dir",
                    tmp_path / "runs", "--", "--trap", "SIGINT", "--trap-delay", "30", "--print", "1", "--sleep", "60",
                    cwd=tmp_path)
    assert term.read_until(lambda d: b"rank 0 line 0" in d and b"rank 1 line 0" in d)   # both trap SIGINT now
    term.proc.send_signal(signal.SIGINT)
    assert term.finish() == 130
    shown = "\n".join(screen(term.data))
    told = shown.find("SIGINT: told 2 rank(s) to stop; they have 1 s (--grace-period) before SIGKILL; "
                      "Ctrl-C again kills them now")
    over = shown.find("the grace period of 1 s is over: killed 2 rank(s) still running")
    assert 0 <= told < over, shown   # said at once, before the countdown's end
