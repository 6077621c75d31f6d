"""What reaches dlaunch itself while ranks run: the stop signals, the signals it passes through, and a head's
control channel, all turned into bytes on one socket the selector watches.
"""

from __future__ import annotations

import os
import signal

from launcher.base.lines import LineBuffer
from launcher.base.signals import STOP_SIGNALS, pass_through
from launcher.execute.ssh.protocol import decode_signals

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    pass




class SignalWatch:
    """Turns SIGINT/SIGTERM/SIGHUP/SIGQUIT into bytes on a socket the selector watches.

    A launcher started by a head node over SSH also has a control channel (its
    stdin): the head sends signal names there, one a line, and the channel
    closing means the head is gone, which counts as SIGHUP.
    """

    def __init__(self, control_fd: int | None = None, control_pending: bytes = b"", forward=()):
        self.control_fd = control_fd
        self.pass_through = pass_through(forward)   # forwarded to every rank; the job goes on
        self._control = LineBuffer()
        self._control.pending = control_pending   # signal lines that came with the request
        import socket

        self._recv, self._send = socket.socketpair()
        self._recv.setblocking(False)
        self._send.setblocking(False)
        self.received: list[int] = []
        self._previous_fd = signal.set_wakeup_fd(self._send.fileno(), warn_on_full_buffer=False)
        self._previous = {sig: signal.signal(sig, self._record) for sig in (*STOP_SIGNALS, *self.pass_through)}

    def _record(self, signum, frame) -> None:
        self.received.append(signum)

    @property
    def fd(self) -> int:
        return self._recv.fileno()

    def stop_signal(self) -> int | None:
        """The first stop signal received and not yet handled by the event loop (``base.waiting``'s source)."""
        return next((sig for sig in self.received if sig not in self.pass_through), None)

    def clear_wakeups(self) -> None:
        """The wake-up bytes read, the signals kept recorded: a wait between attempts goes on after SIGUSR1."""
        try:
            while self._recv.recv(4096):
                continue
        except BlockingIOError:
            return

    def drain(self) -> list[int]:
        self.clear_wakeups()
        signals, self.received = self.received, []
        return signals

    def read_control(self) -> list[int]:
        """Signals the head sent over the control channel; EOF (the head is gone) is SIGHUP."""
        assert self.control_fd is not None   # read only while registered (attempts.py), until EOF unsets it
        try:
            chunk = os.read(self.control_fd, 4096)
        except OSError:
            chunk = b""
        if not chunk:
            self.control_fd = None
            return [signal.SIGHUP]
        return decode_signals(self._control.lines(chunk), self.pass_through)

    def pending_control(self) -> list[int]:
        """Whole signal lines that arrived with the launch request, before the selector watched the channel."""
        return decode_signals(self._control.lines(b""), self.pass_through)

    def close(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(self._previous_fd)
        self._recv.close()
        self._send.close()
