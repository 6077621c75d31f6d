"""The coordinator's limits on strangers: connections to the job port that have not proven the job's secret.

Anyone who can reach the job port can open connections to it, and each costs a descriptor and a buffer
until it joins or goes. These limits keep that cost small whatever strangers send, and keep the job's own
hosts able to join:

- at most ``cap`` strangers at once (an eighth of the descriptor limit, at most 128). One more closes
  the oldest stranger of the address that holds the most, when that address holds more than the
  newcomer's (a flood pays for itself), or when it has had ``PATIENCE`` to join; else the newcomer is
  closed. A host of the job, whose handshake takes a round trip, is not closed mid-handshake by hosts
  joining beside it, a closed one retries, and a stranger who holds or floods connections loses them;
- a deadline for the whole handshake from the moment of ``accept`` (not from the last byte: one byte every
  half second keeps no connection alive);
- before the handshake a line is at most ``protocol.FIRST_LINE`` bytes, so strangers buffer at most
  ``cap * FIRST_LINE`` bytes in all;
- what strangers cause is said once per kind and then counted (``Tally``): a storm of connections
  writes a few lines, not one per connection.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable

MOST = 128              # strangers at once, from every address
PATIENCE = 1.0          # seconds a stranger has to join before a newer one may take its place
LOG_EVERY = 10.0        # seconds between the counts of what strangers did


def stranger_cap() -> int:
    """Strangers held at once: an eighth of this process's descriptors (the rest are its ranks' pipes, its
    files and the job's hosts), between 16 and MOST."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(16, min(MOST, soft // 8 if soft != resource.RLIM_INFINITY else MOST))


class Strangers:
    """The connections that have not joined, oldest first; what to close when a new one comes."""

    def __init__(self, handshake_timeout: float, cap: int | None = None):
        self.handshake_timeout = handshake_timeout
        self.cap = cap or stranger_cap()
        self.waiting: dict = {}          # peer -> when it was accepted (insertion order: oldest first)
        self.per_address: dict[str, int] = {}

    def admit(self, peer, now: float) -> list:
        """Take ``peer`` in; returns the strangers to close to make room (``peer`` itself when the one that
        would have to go is as entitled as the newcomer and still young)."""
        if len(self.waiting) < self.cap:
            self._add(peer, now)
            return []
        busiest = max(self.per_address, key=self.per_address.__getitem__)
        oldest = next(p for p in self.waiting if p.host == busiest)
        flooding = self.per_address[busiest] > self.per_address.get(peer.host, 0) + 1
        if not flooding and now - self.waiting[oldest] < min(PATIENCE, self.handshake_timeout):
            return [peer]
        self.forget(oldest)
        self._add(peer, now)
        return [oldest]

    def _add(self, peer, now: float) -> None:
        self.waiting[peer] = now
        self.per_address[peer.host] = self.per_address.get(peer.host, 0) + 1

    def forget(self, peer) -> None:
        """``peer`` joined or was closed."""
        if self.waiting.pop(peer, None) is not None:
            left = self.per_address[peer.host] - 1
            if left:
                self.per_address[peer.host] = left
            else:
                del self.per_address[peer.host]

    def oldest(self):
        return next(iter(self.waiting), None)

    def overdue(self, now: float) -> list:
        """The strangers whose handshake took longer than allowed since they connected."""
        late = []
        for peer, since in self.waiting.items():
            if now - since <= self.handshake_timeout:
                break   # oldest first: the rest are younger
            late.append(peer)
        return late

    def next_deadline(self) -> float | None:
        oldest = self.oldest()
        return None if oldest is None else self.waiting[oldest] + self.handshake_timeout


class Tally:
    """Say the first event of each kind in a period, count the rest, and say the counts when it ends: what
    strangers do is visible, and never floods the console."""

    def __init__(self, log: Callable[[str], None], every: float = LOG_EVERY):
        self.log, self.every = log, every
        self.period_end = time.monotonic() + every
        self.said: set[str] = set()
        self.counts: dict[str, int] = {}

    def note(self, kind: str, line: str) -> None:
        if kind in self.said:
            self.counts[kind] = self.counts.get(kind, 0) + 1
        else:
            self.said.add(kind)
            self.log(line)

    def flush(self, now: float, force: bool = False) -> None:
        """At the end of each period (or, ``force``, when the link closes): the counts, then a new period."""
        if now < self.period_end and not force:
            return
        if self.counts:
            counted = ", ".join(f"{count} more {kind}" for kind, count in sorted(self.counts.items()))
            self.log(f"job coordinator: in the last {self.every:g} s: {counted}")
        self.period_end = now + self.every
        self.said, self.counts = set(), {}
