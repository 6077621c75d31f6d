"""Rank output: the full log file of every rank, and the prefixed console view of some.

Ranks that the console does not show write straight into their log file (the
launcher never touches those bytes, so a chatty rank costs it nothing).  Ranks
that it shows write into a pipe; ``ConsoleTee`` copies each chunk verbatim to
the rank's log and writes only *complete* lines to the console, each prefixed
with its rank, so lines of different ranks never interleave mid-line.
"""

from __future__ import annotations

import os


MAX_PENDING = 1 << 16  # a "line" longer than this (a progress bar without newlines) is shown in pieces


class ConsoleTee:
    """Per-rank pipe chunks -> the rank's log file (raw) and the console (whole lines, prefixed)."""

    def __init__(self, console_fd: int):
        self.console_fd = console_fd
        self._pending: dict[int, bytes] = {}
        self._prefix: dict[int, bytes] = {}
        self._log_fd: dict[int, int] = {}

    def add(self, key: int, prefix: str, log_fd: int) -> None:
        self._pending[key] = b""
        self._prefix[key] = prefix.encode()
        self._log_fd[key] = log_fd

    def feed(self, key: int, chunk: bytes) -> None:
        _write_all(self._log_fd[key], chunk)
        data = self._pending[key] + chunk
        cut = data.rfind(b"\n") + 1
        if len(data) - cut > MAX_PENDING:
            cut = len(data)
        self._pending[key] = data[cut:]
        if cut:
            self._show(key, data[:cut])

    def close(self, key: int) -> None:
        """The rank's pipe ended: show a last unterminated line, close its log."""
        rest = self._pending.pop(key, b"")
        if rest:
            self._show(key, rest)
        os.close(self._log_fd.pop(key))
        self._prefix.pop(key, None)

    def _show(self, key: int, lines: bytes) -> None:
        """Write complete lines (the last one terminated here if it is not), each with the rank's prefix."""
        if not lines.endswith(b"\n"):
            lines += b"\n"
        prefix = self._prefix[key]
        try:
            _write_all(self.console_fd, prefix + lines[:-1].replace(b"\n", b"\n" + prefix) + b"\n")
        except BrokenPipeError:
            self.console_fd = os.open(os.devnull, os.O_WRONLY)  # console gone (| head): logs still complete


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def tail_lines(path: str, count: int = 10, max_bytes: int = 16384) -> list[str]:
    """The last ``count`` lines of a log, read from its end (logs can be gigabytes)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    if size > max_bytes and lines:
        lines = lines[1:]  # the first line is probably cut
    return lines[-count:]
