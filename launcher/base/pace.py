"""A look taken at most once an interval: the launcher's event loop wakes for every chunk of console output,
and a watch that looked on each wake-up would cost more than the output itself."""

from __future__ import annotations

import time


class Pace:
    """``due()`` is true at most once every ``every`` seconds, the first time ``every`` seconds from now."""

    def __init__(self, every: float):
        self.every = every
        self._next = time.monotonic() + every

    def due(self) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.every
        return True
