"""base/waiting.py: one wait that ends when something is ready, at its deadline, or at once on a stop signal."""

from __future__ import annotations

import signal
import socket
import time

import pytest

from launcher.base.signals import Stopped
from launcher.base.waiting import pause, ready_fds, until


class FakeStop:
    """A stop source as SignalWatch is one: a socket that wakes the wait, and the signals received."""

    def __init__(self):
        self.recv, self.send = socket.socketpair()
        self.recv.setblocking(False)
        self.received: list[int] = []

    @property
    def fd(self) -> int:
        return self.recv.fileno()

    def stop_signal(self):
        return next((s for s in self.received if s != signal.SIGUSR1), None)

    def clear_wakeups(self):
        try:
            while self.recv.recv(64):
                continue
        except BlockingIOError:
            return

    def arrive(self, signum: int) -> None:
        self.received.append(signum)
        self.send.send(b"x")


def test_until_returns_the_first_ready_value():
    answers = iter([None, 0, "ready"])
    assert until(lambda: next(answers), 10, 0.001) == "ready"


def test_until_gives_none_at_its_deadline_after_one_last_look():
    looks = []
    assert until(lambda: looks.append(1), 0.05, 0.01) is None
    assert len(looks) >= 2


def test_a_stop_signal_already_received_ends_every_wait_before_it_starts():
    stop = FakeStop()
    stop.arrive(signal.SIGTERM)
    looks = []
    with pytest.raises(Stopped) as caught:
        until(lambda: looks.append(1), 60, 1.0, stop)
    assert caught.value.signum == signal.SIGTERM and looks == []
    with pytest.raises(Stopped):
        pause(60, stop)
    with pytest.raises(Stopped):
        ready_fds([], None, stop)


def test_a_stop_signal_during_a_wait_ends_it_and_a_passing_signal_does_not():
    import threading

    stop = FakeStop()
    threading.Timer(0.05, stop.arrive, (signal.SIGUSR1,)).start()   # wakes the wait, which goes on
    threading.Timer(0.3, stop.arrive, (signal.SIGINT,)).start()
    with pytest.raises(Stopped) as caught:
        ready_fds([], time.monotonic() + 60, stop)
    assert caught.value.signum == signal.SIGINT and stop.received == [signal.SIGUSR1, signal.SIGINT]


def test_ready_fds_names_the_readable_descriptor():
    one, other = socket.socketpair()
    other.send(b"x")
    assert ready_fds([one.fileno()], time.monotonic() + 5, FakeStop()) == [one.fileno()]
    assert ready_fds([other.fileno()], time.monotonic() + 0.01) == []
