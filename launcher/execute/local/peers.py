"""Why a multi-host job sits silent: say which hosts have not shown up, instead of ten quiet minutes.

Ranks of a job spread over hosts block in their first collective (``init_process_group``, HCCL's
``init()``) until every host has started its share.  When a host that should have started never does,
the others wait silently until the collective library's timeout.  ``PeerWait`` notices this host's ranks
being silent (no output, heartbeat or checkpoint, as the hang watch counts them) for ``--waiting-notice``
seconds, and says what it can see: which other hosts have not written their plan into the run directory
(on a shared filesystem that means they have not started), and, on a host that is not the master, whether
the master's address accepts connections yet.  Then again every ``REPEAT_SECONDS`` while it lasts.
"""

from __future__ import annotations

import os
import socket
import time

from launcher.execute.local.hangs import last_sign_of_life
from launcher.plan.make import LaunchPlan

REPEAT_SECONDS = 60.0
PROBE_SECONDS = 0.5


def _reachable(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=PROBE_SECONDS):
            return True
    except OSError:
        return False


class PeerWait:
    """Checks, ``plan.policy.waiting_notice`` seconds into a silence, whether peers are missing; a message if so."""

    def __init__(self, plan: LaunchPlan, started: float):
        self.plan = plan
        self.started = started
        self.interval = min(plan.policy.waiting_notice / 2, 5.0)
        self._next = time.monotonic() + plan.policy.waiting_notice

    def due(self) -> bool:
        return time.monotonic() >= self._next

    def check(self, specs) -> str | None:
        """A message when this host's live ranks have all been silent past the notice and peers are missing."""
        plan = self.plan
        now = time.time()
        quiet_since = max((last_sign_of_life(spec, self.started) for spec in specs), default=now)
        if now - quiet_since < plan.policy.waiting_notice:
            self._next = time.monotonic() + plan.policy.waiting_notice - (now - quiet_since)
            return None
        self._next = time.monotonic() + REPEAT_SECONDS
        missing = [peer for peer in plan.peers
                   if not os.path.exists(os.path.join(plan.run_dir, f"plan{peer['suffix']}.json"))]
        parts = []
        if missing:
            names = ", ".join(f"{p['server_id']} (ranks {p['ranks']})" for p in missing)
            parts.append(f"host(s) {names} have not written their plan to {plan.run_dir} (not started yet, or "
                         f"not sharing this filesystem or --run-id)")
        if not plan.is_master:
            state = "accepts connections" if _reachable(plan.master_addr, plan.master_port) else \
                "does not accept connections yet"
            parts.append(f"the master {plan.master_addr}:{plan.master_port} {state}")
        if not missing and plan.is_master:
            return None   # every host has started: nothing about peers to say (a hang watch judges the rest)
        stamp = time.strftime("%H:%M:%S", time.localtime(quiet_since))
        return (f"this host's ranks have been silent since {stamp} ({now - quiet_since:.0f} s), waiting for "
                f"their peers: " + "; ".join(parts))
