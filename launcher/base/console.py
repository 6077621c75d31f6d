"""dlaunch's own messages on the terminal: written so that a closed console never changes the outcome.

``dlaunch run train.py 2>&1 | head -1`` closes the console while the job runs.
The ranks' logs and the summary must still be complete and the exit code must
still be the root cause's, so every message of the launcher's goes through ``say`` (the
training-side helpers, ``launcher.checkpoint`` and its writer, print inside a rank, to the rank's own log):
once a write fails, the console is replaced by /dev/null for the rest of the
process, and nothing raises.  ``printable`` makes hostile strings (control,
bidirectional and surrogate characters from a rank table or a config) safe to
show.
"""

from __future__ import annotations

import os
import re
import sys

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from typing import Any

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff\ud800-\udfff]")


def printable(text: object) -> str:
    """``text`` with control, bidi-override and lone-surrogate characters shown as escapes (``\\u202e``)."""
    text = str(text)
    if not _UNSAFE.search(text):
        return text
    return _UNSAFE.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)


def silence(fd: int) -> None:
    """Point ``fd`` at /dev/null: later writes (ours, and the interpreter's final flush) go nowhere quietly."""
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


live_line: Any = None   # the ConsoleTee whose unfinished progress line is on the terminal, if any (logs.py)


def say(*lines: str, stream=None, usage: str | None = None) -> None:
    """Each line as ``dlaunch: line`` on stderr (or ``stream``); a console that is gone is silenced, not raised.

    Lines that start with spaces continue the message above them (a quoted log tail) and get no prefix.  A
    rank's progress line shown live is taken off the screen first and drawn again after.  ``usage``, a
    command's usage text, goes first as it is.
    """
    stream = stream or sys.stderr
    tee = live_line
    if tee is not None:
        tee.write(tee.erase())
    try:
        stream.write((usage or "") +
                     "".join(f"{line}\n" if line.startswith(" ") else f"dlaunch: {line}\n" for line in lines))
        stream.flush()
    except (OSError, ValueError):   # BrokenPipeError, EIO; ValueError: the stream was closed
        _silence_stream(stream)
    if tee is not None:
        tee.write(tee.redraw())


def _silence_stream(stream) -> None:
    try:
        silence(stream.fileno())
    except (OSError, ValueError):
        pass   # not a real file (a test's StringIO): nothing left to protect


def settle_streams() -> None:
    """Flush stdout and stderr now; if the reader is gone, silence them so the exit status stays ours.

    Python turns a failed flush at interpreter exit into exit status 120, which would hide the real one.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            _silence_stream(stream)
