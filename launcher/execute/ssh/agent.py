"""The remote half of ``dlaunch cluster --ssh``: one host's launcher, driven by the head over its SSH channel.

The head runs ``python -m launcher cluster --from-head`` on each host with
nothing else on the command line (where ``ps`` would show it to every user).
It then writes one JSON line to the channel, the launch request:

    {"argv": [cluster arguments], "env": {"NAME": "value"}, "rank_table": "<table JSON text>"}

and keeps the channel open.  Later lines are signal names (``SIGINT``,
``SIGTERM``, ``SIGKILL``) the head forwards; the channel closing means the head
is gone, and the ranks are stopped as on SIGHUP.  On stderr the agent reports
events the head reads, each one line: the marker ``EVENT_MARK`` then JSON.
"""

from __future__ import annotations

import json
import os
import sys

from launcher.errors import UsageError

EVENT_MARK = "\x1edlaunch-event "
MAX_REQUEST_BYTES = 64 << 20


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
        request = json.loads(line)
    except ValueError:
        raise UsageError("malformed launch request from the head") from None
    if not isinstance(request, dict) or not isinstance(request.get("argv"), list):
        raise UsageError("malformed launch request from the head")
    return request, rest


def emit(event: str, **data) -> None:
    """One machine-readable line for the head, on stderr (rank output owns stdout)."""
    sys.stderr.write(EVENT_MARK + json.dumps({"event": event, **data}, default=str) + "\n")
    sys.stderr.flush()


def parse_event(line: str) -> dict | None:
    if not line.startswith(EVENT_MARK):
        return None
    try:
        return json.loads(line[len(EVENT_MARK):])
    except ValueError:
        return None
