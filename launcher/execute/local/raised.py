"""A Python rank's uncaught exception heard when it is raised, not when the process ends.

A rank that raised spends 1 to 8 s in its interpreter's and torch's teardown before it exits; its peers see its
sockets close at once and die in their collective before a launcher that waits for the exit can tell them
anything. Every Python rank runs ``rankhook/sitecustomize.py`` before its script (the plan puts its directory
first on the rank's PYTHONPATH, ``plan.environment.hooked_python_path``, and the hook takes it off again):
after Python's own hook printed the traceback, it sends one datagram, ``raised PID``, over a descriptor every
rank inherits. A ``--no-python`` rank gets the hook too: a wrapper that execs Python (``sh -c 'exec python
...'``, ``numactl ... python``) keeps the process dlaunch started, so that Python speaks for the rank; a Python
a shell rank starts as its child has another parent and stays silent (the rank is judged by its exit).
The event loop watches the other end, and the stop of a failed attempt starts then: the
survivors' notice, the other hosts told, every rank (the dying one too) stopped with SIGTERM and the grace. The
rank's exit code stays its exception's, 1, whatever signal ends its teardown.

The same hook says ``ending PID`` when a rank's program has ended (its atexit): what follows is its
interpreter's teardown, and the attempt is finishing (``program_ended``: the hang watch gives every rank
``--hang-timeout``, as after a rank's exit 0).
"""

from __future__ import annotations

import os
import socket

from launcher.base.border import ascii_int
from launcher.contract import RAISE_ENV

MESSAGE_LIMIT = 64   # bytes of one datagram: "raised " or "ending " and a pid
WORDS = ("raised", "ending")
SETTLE_SECONDS = 0.02   # how long a raise waits for a peer's exit that may have caused it


class RaiseChannel:
    """The datagram socket pair of one launch: the ranks' end is inherited by every rank, this end is read."""

    def __init__(self):
        self._recv, self._send = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._recv.setblocking(False)
        self._send.set_inheritable(True)

    @property
    def fd(self) -> int:
        return self._recv.fileno()

    @property
    def rank_fd(self) -> int:
        return self._send.fileno()

    def env(self) -> dict[str, str]:
        return {RAISE_ENV: f"{self._send.fileno()}:{os.getpid()}"}

    def read(self) -> list[tuple[str, int]]:
        """What the ranks said since the last read: ("raised" or "ending", pid) (a malformed datagram says
        nothing)."""
        said: list[tuple[str, int]] = []
        while True:
            try:
                data = self._recv.recv(MESSAGE_LIMIT)
            except BlockingIOError:
                return said
            word, _, pid = data.decode("ascii", "replace").partition(" ")
            number = ascii_int(pid, max_digits=10) if word in WORDS else None
            if number is not None:
                said.append((word, number))

    def close(self) -> None:
        self._recv.close()
        self._send.close()


def raised_rank(attempt, pid: int):
    """The live rank of ``attempt`` (an ``AttemptProcesses``) whose process ``pid`` said it raised, marked so
    (its exit code is its exception's, 1); returned when that starts the attempt's stop: not while it stops
    already, nor where a rank is restarted alone (``--restart-policy rank``/``group``, MindCluster's reset
    file), which is decided by its exit; nor when another rank has already ended badly and its exit is still to
    be read (SIGKILLed from outside: its peers' collectives raise at once, and the first failure is its)."""
    process = next((p for p in attempt.ranks if p.alive and p.result.pid == pid), None)
    if process is None:
        return None
    process.result.raised = True
    if attempt.stopping or attempt.plan.policy.restart_policy != "job" or attempt.reset is not None:
        return None
    others = [p for p in attempt.ranks if p is not process and p.proc is not None]
    if any(p.result.returncode not in (None, 0) for p in others) or _ended_badly(others):
        return None   # that exit, read next, starts the stop with its own root cause
    return process


def program_ended(attempt, pid: int) -> None:
    """A live rank of ``attempt`` whose process ``pid`` said its program ended: the attempt is finishing, and the
    hang watch judges every rank left by ``--hang-timeout`` (its exit, when it comes, by its code)."""
    hangs = attempt.watches.hangs if attempt.watches is not None else None
    if hangs is not None and any(p.alive and p.result.pid == pid for p in attempt.ranks):
        hangs.finishing = True


def _ended_badly(ranks: list) -> bool:
    """Whether one of ``ranks`` (alive as far as the loop knows) ends badly within SETTLE_SECONDS: a rank killed
    from outside closes its sockets a moment before its exit can be read, and its peers' collectives raise in
    that moment."""
    import select

    live = [p for p in ranks if p.alive]
    pidfds = [p.pidfd for p in live if p.pidfd is not None]
    if pidfds:
        select.select(pidfds, [], [], SETTLE_SECONDS)
    return any(p.popen.poll() not in (None, 0) for p in live)
