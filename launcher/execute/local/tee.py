"""Rank output: the full log file of every rank, and the prefixed console view of some.

Ranks that the console does not show write straight into their log file (the
launcher never touches those bytes, so a chatty rank costs it nothing).  Ranks
that it shows write into a pipe; ``ConsoleTee`` copies each chunk verbatim to
the rank's log and shows it on the console one whole line at a time, each line
prefixed with its rank, so lines of different ranks never interleave mid-line.

Progress bars (``\r`` updates, as tqdm draws them) are shown live on a
terminal: the newest unfinished line sits at the bottom of the screen and is
redrawn in place, and it is erased before anything else is printed (another
rank's line, a message of dlaunch's), then drawn again below it.  A finished
line shows what a terminal would have shown of it, its last ``\r`` segment.
On a pipe or file only finished lines are written.  The log keeps every byte.
"""

from __future__ import annotations

import os

from launcher.base import console
from launcher.base.lines import LineBuffer, with_prefix

MAX_PENDING = 1 << 16  # a "line" longer than this (a progress bar without newlines) is shown in pieces
ERASE_LINE = b"\r\x1b[K"


def last_segment(line: bytes) -> bytes:
    """What a terminal shows of a line drawn with carriage returns: its last non-empty ``\r`` segment."""
    if b"\r" not in line:
        return line
    for segment in reversed(line.split(b"\r")):
        if segment:
            return segment
    return b""


PREFIX_TEMPLATE_ENV = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"   # torchrun's (torch/distributed/run.py)


SCHEDULER_KEY = -1   # the tee's key for MindSpore's scheduler, which has no rank (on the console in its own pod)


def console_key(rank: int | None) -> int:
    """Whose console pipe a key names: the rank's number, or SCHEDULER_KEY for the scheduler (rank None)."""
    return SCHEDULER_KEY if rank is None else rank


def console_tag(rank: int | None, local_rank: int | None, template: str | None) -> str:
    """The prefix of a rank's console lines: ``[rankN]: `` (torch's own tag), or torchrun's template (the rank's
    ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE``) with ``${role_name}``, ``${rank}`` and ``${local_rank}`` filled
    in as torchrun's agent fills them (``local_elastic_agent.py``: role "default", the global rank).
    MindSpore's scheduler (rank None), shown in the scheduler pod of an operator's job, is ``[scheduler]: ``."""
    if rank is None:
        return "[scheduler]: "
    if not template:
        return f"[rank{rank}]: "
    from string import Template

    return Template(template).safe_substitute(role_name="default", rank=rank, local_rank=local_rank)


class ConsoleTee:
    """Per-rank pipe chunks -> the rank's log file (raw) and the console (whole lines, prefixed; live partials
    on a terminal)."""

    def __init__(self, console_fd: int, live: bool | None = None):
        self.console_fd = console_fd
        self.live = os.isatty(console_fd) if live is None else live
        self._buffers: dict[int, LineBuffer] = {}
        self._prefix: dict[int, bytes] = {}
        self._tag: dict[int, bytes] = {}   # the part of the prefix torch may have printed itself
        self._log_fd: dict[int, int | None] = {}
        self._shown: int | None = None   # whose unfinished line is on screen, the cursor at its end
        if self.live:
            console.live_line = self

    def add(self, key: int, prefix: str, log_fd: int, tag: str = "") -> None:
        self._buffers[key] = LineBuffer(MAX_PENDING)
        self._prefix[key] = prefix.encode()
        self._tag[key] = tag.encode()
        self._log_fd[key] = log_fd

    def feed(self, key: int, chunk: bytes) -> str | None:
        """Log ``chunk`` and show it; returns why the log could not be written, once, if so (a full disk): the
        launcher then stops the job, and the console keeps showing what arrives."""
        failure = None
        log_fd = self._log_fd[key]
        if log_fd is not None:
            try:
                _write_all(log_fd, chunk)
            except OSError as exc:
                failure = f"cannot write rank {key}'s log: {exc.strerror}"
                os.close(log_fd)
                self._log_fd[key] = None
        self._show(key, self._buffers[key].feed(chunk))
        return failure

    def close(self, key: int) -> None:
        """The rank's pipe ended: show a last unterminated line, close its log."""
        self._show(key, self._buffers[key].flush())
        del self._buffers[key]
        log_fd = self._log_fd.pop(key)
        if log_fd is not None:
            os.close(log_fd)

    def erase(self) -> bytes:
        """Take the unfinished line off the screen (before other output); returns the bytes that do it."""
        if self._shown is None:
            return b""
        self._shown = None
        return ERASE_LINE

    def redraw(self, key: int | None = None) -> bytes:
        """Draw ``key``'s unfinished line (default: the newest one still unfinished) at the bottom."""
        if not self.live:
            return b""
        candidates = [key] if key is not None and key in self._buffers and self._buffers[key].pending else [
            k for k, buffer in self._buffers.items() if buffer.pending]
        if not candidates:
            return b""
        key = candidates[-1]
        self._shown = key
        return self._prefix[key] + last_segment(self._buffers[key].pending)

    def _show(self, key: int, lines: bytes) -> None:
        """Finished ``lines`` of ``key``, each prefixed, then (live) the newest unfinished line again."""
        previous = self._shown
        pending = self._buffers[key].pending
        out = self.erase() if self.live and (lines or pending or previous == key) else b""
        if lines:
            prefix, tag = self._prefix[key], self._tag[key]
            for line in lines.removesuffix(b"\n").split(b"\n"):   # a line past MAX_PENDING comes unended
                line = last_segment(line)
                out += with_prefix(line, prefix, tag) + b"\n"
        if out or pending:
            out += self.redraw(key if pending else previous)
        if out:
            self.write(out)

    def write(self, data: bytes) -> None:
        try:
            _write_all(self.console_fd, data)
        except OSError:   # console gone (| head): the logs stay complete, the job goes on
            self.console_fd = os.open(os.devnull, os.O_WRONLY)
            self.live = False

    def finish(self) -> None:
        """The attempt is over: end an unfinished line on screen, and stop taking part in dlaunch's messages."""
        if self._shown is not None:
            self._shown = None
            self.write(b"\n")
        if console.live_line is self:
            console.live_line = None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def close_pipe(selector, tee: ConsoleTee, rank: int) -> None:
    """A rank started again alone: what its old process left in its console pipe shown, the pipe closed (the
    new process gets its own; the tee's entry for the rank is made again)."""
    for key in list(selector.get_map().values()):
        if key.data == ("pipe", rank):
            os.set_blocking(key.fd, False)   # a child of the old process may still hold the pipe open
            try:
                tee.feed(rank, os.read(key.fd, 1 << 20))
            except BlockingIOError:
                pass   # nothing was left unread: the pipe is closed all the same
            selector.unregister(key.fd)
            os.close(key.fd)
            tee.close(rank)
