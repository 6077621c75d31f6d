"""Whole lines out of byte streams, and the last lines of a log: the one place that cuts bytes into lines.

Rank output, the SSH channels, the control pipe and ``dlaunch logs`` all receive bytes in arbitrary
chunks; a line may only be shown (or parsed) once its newline has arrived, or two ranks' halves would
meet on one console line. A "line" that never ends (a progress bar of ``\\r`` updates) is released once it
grows past a limit, so memory stays bounded.
"""

from __future__ import annotations

import errno
import os

from launcher.base.border import open_fd


def open_regular(path: str, follow: bool = True):
    """``path`` opened for binary reading if it is a regular file, else None: a FIFO put where a log should
    be must not hang a reader, nor a link to ``/dev/zero`` feed it forever (``border.open_fd``)."""
    fd = open_fd(path, follow=follow)
    return None if fd is None else os.fdopen(fd, "rb")


def bounded_lines(path: str, limit: int, chunk: int = 1 << 20):
    """The lines of a regular file as text, skipping every line longer than ``limit`` bytes: memory stays
    within ``chunk + limit`` however long a line a rank printed.

    Holes of a sparse file (a log truncated to 2 GiB, or a rank that seeked far past its end) are stepped
    over, not read: they hold zero bytes only, which make no line, just a longer one."""
    fh = open_regular(path)
    if fh is None:
        return
    with fh:
        fd, at = fh.fileno(), 0
        pending, skipping = b"", False
        while True:
            data_at = _next_data(fd, at)
            if data_at > at:   # a hole: its zeros continue the current line
                if skipping or len(pending) + data_at - at > limit:
                    pending, skipping = b"", True
                else:
                    pending += bytes(data_at - at)
                at = os.lseek(fd, data_at, os.SEEK_SET)
            data = os.read(fd, chunk)
            if not data:
                break
            at += len(data)
            parts = (pending + data).split(b"\n")
            pending = parts.pop()
            for part in parts:
                if not skipping and len(part) <= limit:
                    yield part.decode("utf-8", "replace")
                skipping = False
            if len(pending) > limit:
                pending, skipping = b"", True
        if pending and not skipping:
            yield pending.decode("utf-8", "replace")


def _next_data(fd: int, at: int) -> int:
    """Where the next data at or after ``at`` begins (``at`` itself outside a hole, or where SEEK_DATA is not
    supported); the file's size when only a hole follows."""
    seek_data = getattr(os, "SEEK_DATA", None)
    if seek_data is None:
        return at
    try:
        return os.lseek(fd, at, seek_data)
    except OSError as exc:
        if exc.errno == errno.ENXIO:   # nothing but a hole from here to the end
            return max(at, os.fstat(fd).st_size)
        return at
    finally:
        os.lseek(fd, at, os.SEEK_SET)


def with_prefix(line: bytes, prefix: bytes, tag: bytes = b"") -> bytes:
    """``prefix + line``, unless the line carries the prefix already (torch prints ``[rank0]: `` itself):
    the console and ``dlaunch logs`` show a line alike.  ``tag`` is the end of ``prefix`` that the line
    may carry alone (``[rank2]: `` of ``[node1][rank2]: ``): then only the rest of the prefix is added."""
    if line.startswith(prefix):
        return line
    if tag and prefix.endswith(tag) and line.startswith(tag):
        return prefix[:len(prefix) - len(tag)] + line
    return prefix + line


class LineBuffer:
    """Bytes in, whole lines out; what follows the last newline waits for the next chunk."""

    def __init__(self, limit: int | None = None):
        self.pending = b""
        self.limit = limit   # an unended rest longer than this is released as it is

    def feed(self, chunk: bytes) -> bytes:
        """Everything up to and including the last newline (or all of it, past the limit); may be empty."""
        data = self.pending + chunk
        cut = data.rfind(b"\n") + 1
        if self.limit is not None and len(data) - cut > self.limit:
            cut = len(data)
        self.pending = data[cut:]
        return data[:cut]

    def lines(self, chunk: bytes) -> list[bytes]:
        """The whole lines ``chunk`` completes, without their newlines."""
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        return lines

    def flush(self) -> bytes:
        """The unended rest, ended: the stream is over."""
        rest, self.pending = self.pending, b""
        return rest + b"\n" if rest else b""


def tail_lines(path: str, count: int = 10, max_bytes: int = 16384) -> list[str]:
    """The last ``count`` lines of a log, read from its end (logs can be gigabytes)."""
    fh = open_regular(path)
    if fh is None:
        return []
    try:
        with fh:
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


def tail_offset(path: str, lines: int) -> int:
    """Byte offset where the last ``lines`` lines of ``path`` begin (read from the end, in blocks)."""
    fh = open_regular(path)
    if fh is None:
        return 0
    try:
        with fh:
            end = fh.seek(0, os.SEEK_END)
            if lines <= 0:
                return end
            pos, seen, block = end, 0, 65536
            fh.seek(max(0, end - 1))
            ends_with_newline = fh.read(1) == b"\n"
            skip = 1 if ends_with_newline else 0  # the final newline ends the last line; it starts none
            while pos > 0:
                step = min(block, pos)
                pos -= step
                fh.seek(pos)
                chunk = fh.read(step)
                index = len(chunk) - skip
                skip = 0
                while True:
                    index = chunk.rfind(b"\n", 0, index)
                    if index < 0:
                        break
                    seen += 1
                    if seen == lines:
                        return pos + index + 1
            return 0
    except OSError:
        return 0
