"""Every wait is one wait: until something is ready, or a deadline passes, or a stop signal comes.

Each phase of a launch that waits (the device-release wait, the health gate's tools and its ``unix:`` service,
MindCluster's reset hold, the pause between attempts) waits through ``until`` or ``ready_fds``, so a SIGTERM from a
scheduler is obeyed in every phase alike: the wait ends with ``Stopped`` at once, and the launch stops with the
signal's exit code instead of starting what it was waiting to start. The stop comes from a ``StopSource``
(``execute.signals.SignalWatch``): a descriptor that becomes readable when a signal arrives, and the stop signal
received so far, if any. Without one (a command with no ranks to stop, a unit test) the waits are plain waits.
"""

from __future__ import annotations

import select
import time

from launcher.base.signals import Stopped

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Protocol, TypeVar

    T = TypeVar("T")

    class StopSource(Protocol):
        @property
        def fd(self) -> int: ...

        def stop_signal(self) -> int | None: ...

        def clear_wakeups(self) -> None: ...


def check(stop: StopSource | None) -> None:
    """``Stopped`` when a stop signal has come."""
    if stop is not None and (signum := stop.stop_signal()) is not None:
        raise Stopped(signum)


def ready_fds(fds: Iterable[int], deadline: float | None, stop: StopSource | None = None) -> list[int]:
    """The descriptors of ``fds`` that are readable before ``deadline`` (a ``time.monotonic()`` time; None: no
    deadline), or [] once it passed; ``Stopped`` as soon as a stop signal came, before or during the wait."""
    watched = list(fds)
    signal_fd = stop.fd if stop is not None else None
    while True:
        check(stop)
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return []
        readable, _, _ = select.select(watched + ([signal_fd] if signal_fd is not None else []), [], [], left)
        if signal_fd in readable:
            assert stop is not None
            stop.clear_wakeups()   # a signal that does not stop (SIGUSR1) wakes the wait, which goes on
        found = [fd for fd in readable if fd != signal_fd]
        if found:
            check(stop)
            return found


def pause(seconds: float, stop: StopSource | None = None) -> None:
    """Sleep ``seconds``; ``Stopped`` as soon as a stop signal came."""
    ready_fds((), time.monotonic() + max(0.0, seconds), stop)


def until(ready: Callable[[], T], timeout: float | None, every: float, stop: StopSource | None = None) -> T | None:
    """``ready()``'s first truthy value, asked every ``every`` seconds; None once ``timeout`` seconds passed
    (asked once more at the end); ``Stopped`` as soon as a stop signal came."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        check(stop)
        value = ready()
        if value:
            return value
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return None
        pause(every if deadline is None else min(every, deadline - now), stop)
