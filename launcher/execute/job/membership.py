"""Who runs the job, for the coordinator: every host, or with ``--spares`` the active ones in slot order and the
spares standing by, or with ``--nnodes MIN:MAX`` the hosts the job formed with (after MIN joined and the last
call, or MAX), formed again at each restart; node indices given on arrival (``claim.py``); replaced and lost
hosts kept out for their cooldown. A part of ``coordinator.Coordinator`` (its mixin): the coordinator's own
state is what it reads (``peers``, ``results``, ``lost``), its ``_send``/``_broadcast`` what it says with.
"""

from __future__ import annotations

import time

from launcher.contract import ExitCode
from launcher.execute.job import protocol
from launcher.execute.job.restarts import elastic_form, spare_swap

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


class Membership:
    """The coordinator's membership state and rules (``Coordinator`` sets the attributes declared here)."""

    hosts: list[str]
    secret: bytes
    peers: dict
    results: dict[int, dict]
    lost: dict[int, str]
    ever_joined: set[int]
    master_index: int
    max_restarts: int
    attempt: int
    resume_step: str | None
    finished: bool
    join_deadline: float
    join_timeout: float
    log: Callable[[str], None]
    # the coordinator's own ways of saying things
    _send: Callable[[Any, dict], None]
    _broadcast: Callable[..., None]
    _refuse: Callable[[Any, str], None]
    _flush: Callable[[Any], None]

    def init_membership(self, active: list[int] | None, cooldown: float, elastic: tuple[int, float] | None) -> None:
        # --spares: the hosts that run the job, in slot order (None: every host), the others standing by; a host
        # a spare replaced may stand by again once its cooldown ends (time.time() -> ``excluded``)
        self.active = list(active) if active is not None else None
        self.cooldown = cooldown
        self.excluded: dict[int, float] = {}
        self.replaced: dict[str, dict] = {}     # host -> {"by", "why"}: every replacement so far
        # --nnodes MIN:MAX: (MIN, last call); the job forms once MAX (every host) joined, or MIN and the last
        # call passed; until then ``active`` is None and nothing runs
        self.elastic = elastic
        self.given: dict[int, float] = {}   # node index -> until when it is kept for the host it was given to
        self.min_reached: float | None = None

    def _attempt_message(self) -> dict:
        return {"t": "attempt", "attempt": self.attempt, "resume_step": self.resume_step, **self._active_said()}

    def _active_said(self) -> dict:
        return {"active": self.active} if self.active is not None else {}

    def _running(self) -> list[int]:
        """The hosts that run the job's ranks now (every host, without spares; none while an elastic job forms)."""
        if self.active is None:
            return [] if self.elastic else list(range(len(self.hosts)))
        return self.active

    def _forming(self, now: float) -> float | None:
        """--nnodes MIN:MAX before the job formed: form it when it may (``self.active``, told to every host), or
        end it at the join timeout with fewer than MIN; the seconds until the last call ends, or None."""
        if self.elastic is None or self.active is not None or self.finished:
            return None
        least, last_call = self.elastic
        joined = sorted(self.peers)
        if len(joined) >= least and self.min_reached is None:
            self.min_reached = now
        if self.master_index in joined and (len(joined) == len(self.hosts) or (
                len(joined) >= least and self.min_reached is not None and now >= self.min_reached + last_call)):
            self.active = joined
            self.log(f"job coordinator: the job formed with {len(joined)} host(s) (--nnodes {least}:"
                     f"{len(self.hosts)}): {', '.join(self.hosts[i] for i in joined)}")
            self._broadcast(self._attempt_message())
            return None
        if now >= self.join_deadline:
            why = (f"only {len(joined)} of at least {least} host(s) joined within {self.join_timeout:g} s "
                   f"(--join-timeout)")
            self.finished = True
            self._broadcast({"t": "verdict", "attempt": self.attempt, "status": "failed", "restart": False,
                             "exit_code": ExitCode.HOST_LOST, "root_cause": {"kind": "lost", "host": "", "why": why},
                             "host_exit_codes": {}, "lost_hosts": {}, "absent_hosts": []})
            self.log(f"job coordinator: the job did not form: {why}")
            return None
        ends = [self.join_deadline] + ([self.min_reached + last_call] if self.min_reached is not None else [])
        return max(0.0, min(ends) - now)

    def _assign(self, peer, nonce: str) -> None:
        """The lowest node index no host holds, has been given (for the join timeout) or lost; kept for it."""
        now = time.monotonic()
        self.given = {i: until for i, until in self.given.items() if until > now and i not in self.peers}
        free = [i for i in range(len(self.hosts)) if i not in self.peers and i not in self.given
                and i not in self.lost and i != self.master_index and self.excluded.get(i, 0.0) <= time.time()]
        if not free:
            self._refuse(peer, f"the job has all its {len(self.hosts)} host(s) (--nnodes MAX)")
            return
        self.given[free[0]] = now + self.join_timeout
        self._send(peer, {"t": "assigned", "index": free[0],
                          "proof": protocol.proof(self.secret, "assigned", peer.nonce, nonce, free[0])})
        peer.closing = True
        self._flush(peer)

    def _replacements(self, verdict: dict) -> dict | None:
        """--spares: the spares that take the places of the hosts lost or found unfit (``restarts.spare_swap``);
        None while restarts are spent or no replacement can be made."""
        if verdict["status"] != "failed" or self.attempt >= self.max_restarts:
            return None
        if self.elastic is not None:
            return elastic_form(self._running(), self.results, self.lost, sorted(self.peers), self.hosts,
                                excluded=self.excluded, master=self.master_index, least=self.elastic[0])
        return spare_swap(self._running(), self.results, self.lost, [i for i in sorted(self.peers)], self.hosts,
                          excluded=self.excluded, master=self.master_index)

    def _roster(self, swap: dict | None) -> dict:
        """For every host's summary and status: the hosts of the next attempt (or the last), the spares that
        stand by, the hosts excluded (until when) and every replacement so far."""
        active = swap["active"] if swap else self.active
        assert active is not None
        now = time.time()
        excluded = {i: until for i, until in {**self.excluded, **({i: now + self.cooldown for i in swap["unfit"]}
                                                                 if swap else {})}.items() if until > now}
        return {"active": [self.hosts[i] for i in active],
                "standing_by": [self.hosts[i] for i in sorted(self.peers) if i not in active and i not in excluded],
                "excluded": {self.hosts[i]: round(until, 3) for i, until in excluded.items()},
                "replaced": {**self.replaced, **(swap["replaced"] if swap else {})}}

    def _exclude(self, swap: dict) -> None:
        """After a restart with spares: the replaced hosts wait out their cooldown; the lost ones are forgotten,
        so that they may join again (as spares) once it ends."""
        until = time.time() + self.cooldown
        for index in swap["unfit"]:
            self.excluded[index] = until
            self.ever_joined.discard(index)
        self.replaced.update(swap["replaced"])
        self.active, self.lost = swap["active"], {}


