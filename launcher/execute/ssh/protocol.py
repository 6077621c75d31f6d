"""The wire between the head and each host's launcher in ``dlaunch cluster --ssh``: both directions, one module.

The head runs ``python -m launcher cluster --from-head --announce`` on each host
with nothing else on the command line (where ``ps`` would show it to every user).
The launcher first says its version and the preflight's ready mark on stdout
(``announce``), so a host costs one Python start, not a second one for the
version.
It then writes one JSON line to the channel, the launch request:

    {"argv": [cluster arguments], "env": {"NAME": "value"}, "rank_table": "<table JSON text>"}

and keeps the channel open.  Later lines are signal names (``SIGINT``,
``SIGTERM``, ``SIGKILL``) the head forwards; the channel closing means the head
is gone, and the ranks are stopped as on SIGHUP.  On stderr the agent reports
events the head reads, each one line: the marker ``EVENT_MARK`` then JSON.

The head encodes with ``encode_request``/``encode_signal`` and decodes with ``parse_event``; the host
decodes with ``read_request``/``decode_signals`` and encodes with ``emit``.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from launcher.base.border import Refused, parse_json
from launcher.base.signals import STOP_SIGNAL_NAMES
from launcher.errors import UsageError

EVENT_MARK = "\x1edlaunch-event "
ANNOUNCE_FLAG = "--announce"   # ``cluster --from-head --announce``: the version line and the ready mark first
MAX_REQUEST_BYTES = 64 << 20
CONTROL_SIGNALS = (*STOP_SIGNAL_NAMES.split(","), "SIGKILL")   # what the head may send to stop


def encode_request(request: dict) -> bytes:
    """The head's first line to a host: its launch request."""
    return json.dumps(request).encode() + b"\n"


def encode_signal(name: str, passed_on: tuple[int, ...] = ()) -> bytes:
    """A signal the head forwards to a host's launcher: one that stops the job, or one of ``passed_on`` (the
    signals the head and its hosts forward to every rank while the job goes on, ``--forward-signals``)."""
    if name not in CONTROL_SIGNALS and name not in {signal.Signals(s).name for s in passed_on}:
        raise ValueError(f"{name} is not a signal the head sends")
    return name.encode() + b"\n"


def decode_signals(lines: list[bytes], passed_on: tuple[int, ...] = ()) -> list[int]:
    """The signal numbers in control lines from the head; anything else on the channel is ignored (a name
    this host does not pass on included: it must never be taken for a stop)."""
    allowed = {*CONTROL_SIGNALS, *(signal.Signals(s).name for s in passed_on)}
    names = [line.strip().decode("ascii", "replace") for line in lines]
    return [int(getattr(signal, name)) for name in names if name in allowed]


def read_request(fd: int = 0) -> tuple[dict, bytes]:
    """The launch request line, and whatever arrived after it (early control lines)."""
    data = b""
    while b"\n" not in data:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            raise UsageError("the head closed the channel before sending the launch request")
        data += chunk
        if len(data) > MAX_REQUEST_BYTES:
            raise UsageError("launch request too large")
    line, rest = data.split(b"\n", 1)
    try:
        request = parse_json(line, "the launch request")
    except Refused:
        raise UsageError("malformed launch request from the head") from None
    if not isinstance(request, dict) or not isinstance(request.get("argv"), list):
        raise UsageError("malformed launch request from the head")
    return request, rest


def encode_event(event: str, **data) -> str:
    return EVENT_MARK + json.dumps({"event": event, **data}, default=str) + "\n"


def emit(event: str, **data) -> None:
    """One machine-readable line for the head, on stderr (rank output owns stdout)."""
    sys.stderr.write(encode_event(event, **data))
    sys.stderr.flush()


def parse_event(line: str) -> dict | None:
    if not line.startswith(EVENT_MARK):
        return None
    try:
        return parse_json(line[len(EVENT_MARK):], "an event")
    except Refused:
        return None


def announce(ready_mark: str) -> None:
    """The host launcher's first words on stdout: its version, as ``--version`` says it, then the ready mark."""
    from launcher import __version__

    os.write(1, f"dlaunch {__version__}\n{ready_mark}\n".encode())   # unbuffered: the head waits for it
