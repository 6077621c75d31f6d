"""TorchFT's quorum as its lighthouse shows it, for ``dlaunch status`` of a ``--replica-groups`` run.

The lighthouse (``torchft_lighthouse``) serves its state as HTML at ``/status`` (torchft's
``templates/status.html``): the quorum id, then each member's replica id, ``Step:`` and whether it is
recovering (its step behind the others'). Read with a short timeout: a lighthouse that does not answer is
said, never waited for.
"""

from __future__ import annotations

import re

from launcher.base.border import ascii_int
from launcher.plan.replicas import LIGHTHOUSE_ENV

QUORUM_ID = re.compile(r"Previous quorum id:\s*(-?\d+)")
MEMBER = re.compile(r'class="member\s*(recovering)?\s*">\s*<b>([^<]*)</b>\s*<br/>\s*Step:\s*(-?\d+)')
TIMEOUT = 1.0
MAX_BYTES = 1 << 20


def lighthouse_of(plans) -> str | None:
    """The lighthouse every rank of the run was given (the first rank's, in any host's plan)."""
    for plan in plans:
        for spec in plan.get("ranks") or []:
            url = (spec.get("env") or {}).get(LIGHTHOUSE_ENV)
            if url:
                return url
    return None


def quorum(url: str) -> dict:
    """``{"lighthouse", "quorum_id", "members": [{"replica", "step", "recovering"}]}``, or with ``error``."""
    import html
    import urllib.error
    import urllib.request

    found: dict = {"lighthouse": url, "quorum_id": None, "members": []}
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/status", timeout=TIMEOUT) as response:   # noqa: S310
            page = response.read(MAX_BYTES).decode("utf-8", "replace")
    except (OSError, ValueError, urllib.error.URLError) as exc:
        found["error"] = f"not reachable ({getattr(exc, 'reason', None) or exc})"
        return found
    number = QUORUM_ID.search(page)
    found["quorum_id"] = ascii_int(number[1], signed=True) if number else None
    found["members"] = [{"replica": html.unescape(m[2]).split(":")[0][:200], "step": ascii_int(m[3], signed=True),
                         "recovering": bool(m[1])} for m in MEMBER.finditer(page)]
    return found


def quorum_line(found: dict) -> str:
    """One line for the status headline."""
    where = f"TorchFT lighthouse {found['lighthouse']}"
    if found.get("error"):
        return f"{where}: {found['error']}"
    if found["quorum_id"] is None:
        return f"{where}: no quorum yet"
    members = ", ".join(f"{m['replica']} step {m['step']}" + (" (recovering)" if m["recovering"] else "")
                        for m in found["members"])
    return f"TorchFT quorum {found['quorum_id']} ({found['lighthouse']}): {len(found['members'])} replica group(s): " \
           f"{members}"
