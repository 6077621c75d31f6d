"""The running job seen from the head: one selector loop over every host's channel and the head's signals.

Every host is sent its request; output streams back in whole lines, signals are forwarded as lines on
the channels, the first failure stops all hosts, and each host's end is recorded for the outcome.
"""

from __future__ import annotations

import os
import selectors
import signal
import time
from collections import deque

from launcher.base.lines import LineBuffer
from launcher.execute.ssh.plan import HostLaunch, SshPlan
from launcher.execute.ssh.protocol import encode_request, encode_signal, parse_event

STOP_MARGIN = 10.0             # beyond the grace period, for a stopped host to kill, drain and report
EXIT_STATUS_POLL = 0.05        # between a channel's EOF and its exit status (paramiko has no fd for it)
CONNECTION_LOST = 255          # as ssh(1): the exit code of a host whose connection ended without a status
STDERR_TAIL = 5                # a host's last stderr lines, quoted when it fails without a rank to blame
MAX_PENDING_LINE = 1 << 20     # a host's unterminated stdout beyond this is shown rather than held


# ---------------------------------------------------------------- execution


class HostRun:
    """One host's launch as the head sees it: its channel, unfinished output lines, events and outcome."""

    def __init__(self, host: HostLaunch, client, channel):
        self.host, self.client, self.channel = host, client, channel
        self.stdout = LineBuffer(MAX_PENDING_LINE)   # rank lines: only whole ones reach the console
        self.stderr = LineBuffer()                   # the remote launcher's events and messages
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL)
        self.started_at: float | None = None     # the host's "started" event: its first rank's start
        self.summary: dict | None = None         # the host's "summary" event
        self.summary_path: str | None = None
        self.reading = False
        self.exit_code: int | None = None
        self.ended_at: float | None = None
        self.lost: str | None = None             # why it ended without an exit status
        self.told: int | None = None             # the signal the head sent it (it did not fail on its own)
        self.abandoned = False                   # past the stop deadline: SIGKILLed and hung up on

    @property
    def server_id(self) -> str:
        return self.host.target.server_id

    @property
    def done(self) -> bool:
        return self.exit_code is not None

    def end(self, code: int, lost: str | None = None) -> None:
        self.exit_code, self.lost, self.ended_at, self.reading = code, lost, time.time(), False

    def send(self, line: str, passed_on: tuple = ()) -> None:
        """A control line for the remote launcher (``passed_on``: the signals it forwards to its ranks); a
        channel already gone needs none."""
        if self.channel is None or self.done:
            return
        try:
            self.channel.sendall(encode_signal(line, passed_on))
        except Exception as exc:  # OSError, EOFError, SSHException: the transport just died; the loop notices
            self.stderr_tail.append(f"could not send {line}: {exc or type(exc).__name__}")


def start_hosts(runs: list[HostRun]) -> None:
    """Send every waiting launcher its request: a write each, no round trip; a host that is gone has ended."""
    for run in runs:
        try:
            run.channel.sendall(encode_request(run.host.request))
            run.reading = True
        except Exception as exc:  # the connection died since the preflight: that host failed, the loop stops all
            run.end(CONNECTION_LOST, lost=f"could not send the launch request ({exc or type(exc).__name__})")


class Session:
    """The one selector loop: channels' output, their ends, the head's signals, the shared stop deadline."""

    def __init__(self, plan: SshPlan, runs: list[HostRun], signals, out_fd: int = 1, err_fd: int = 2):
        self.plan, self.runs, self.signals = plan, runs, signals
        self.fds = {"out": out_fd, "err": err_fd}
        self.selector = selectors.DefaultSelector()
        self.stop_deadline: float | None = None
        self.interrupted_by: int | None = None
        self.killed = False

    def run(self) -> None:
        self.selector.register(self.signals.fd, selectors.EVENT_READ, None)
        for run in self.runs:
            if run.reading:
                self.selector.register(run.channel.fileno(), selectors.EVENT_READ, run)
        try:
            self._after_events()
            while not all(run.done for run in self.runs):
                for key, _ in self.selector.select(self._timeout()):
                    if key.data is None:
                        self._on_signals(self.signals.drain())
                    else:
                        self._pump(key.data)
                self._after_events()
        finally:
            self.selector.close()

    def _timeout(self) -> float | None:
        waits = []
        if any(not run.reading and not run.done for run in self.runs):
            waits.append(EXIT_STATUS_POLL)
        if self.stop_deadline is not None:
            waits.append(max(0.0, self.stop_deadline - time.monotonic()))
        return min(waits) if waits else None

    def _after_events(self) -> None:
        """Collect exit statuses, stop everything on a failure, give up on hosts past the deadline."""
        for run in self.runs:
            if not run.reading and not run.done and run.channel.exit_status_ready():
                self._ended(run)
        for run in self.runs:   # with spares, the hosts' job link decides: a spare may take the failed host's place
            if self._failed_on_its_own(run) and self.stop_deadline is None and not self.plan.spares:
                self._stop_all(signal.SIGTERM)
        if self.stop_deadline is not None and time.monotonic() >= self.stop_deadline:
            self._abandon_stragglers()

    def _failed_on_its_own(self, run: HostRun) -> bool:
        reported = run.summary is not None and run.summary.get("exit_code") not in (0, None)
        return run.told is None and (reported or run.exit_code not in (0, None))

    def _ended(self, run: HostRun) -> None:
        """The channel closed: its exit status, or -1 when there was none (connection lost, launcher killed)."""
        status = run.channel.recv_exit_status()
        if status >= 0:
            run.end(status)
            return
        transport = run.client.get_transport()
        alive = transport is not None and transport.is_active()
        run.end(CONNECTION_LOST, lost="its remote launcher ended without an exit status (killed?)" if alive
                else "SSH connection lost")

    def _stop_all(self, sig: int) -> None:
        """Tell every other host still running to stop (it SIGTERMs its ranks, waits its grace, SIGKILLs).

        A host that failed by itself is left alone: it is stopping already, and
        being "told" would hide that it is a root-cause candidate.
        """
        for run in self.runs:
            if not run.done and run.told is None and not self._failed_on_its_own(run):
                run.told = sig
                run.send(signal.Signals(sig).name)
        self.stop_deadline = time.monotonic() + self.plan.grace_period + STOP_MARGIN

    def _on_signals(self, signals: list[int]) -> None:
        """First SIGINT/SIGTERM/SIGHUP: forwarded to every host; a later SIGINT: SIGKILL everywhere at once.
        SIGUSR1/SIGUSR2 (and --forward-signals): to every host still running, whose launcher passes them to
        its ranks; the job goes on."""
        for sig in signals:
            if sig in self.signals.pass_through:
                for run in self.runs:
                    if not run.done:
                        run.send(signal.Signals(sig).name, self.signals.pass_through)
                continue
            if self.stop_deadline is None:
                self.interrupted_by = sig
                self._stop_all(sig)
            elif sig == signal.SIGINT and not self.killed:
                self.killed = True
                for run in self.runs:
                    run.send("SIGKILL")

    def _abandon_stragglers(self) -> None:
        """Past the grace period and margin: SIGKILL and hang up on hosts that have not finished."""
        for run in self.runs:
            if not run.done:
                run.send("SIGKILL")
                if run.reading:
                    self.selector.unregister(run.channel.fileno())
                run.channel.close()
                run.abandoned = True
                run.end(CONNECTION_LOST, lost=f"did not stop within {self.plan.grace_period:g} s grace + "
                                              f"{STOP_MARGIN:g} s; sent SIGKILL and hung up")

    def _pump(self, run: HostRun) -> None:
        """Drain a readable channel: stdout lines through, stderr lines as events or prefixed; notice its EOF."""
        channel = run.channel
        while channel.recv_ready():
            self._stdout(run, channel.recv(65536))
        while channel.recv_stderr_ready():
            self._stderr(run, channel.recv_stderr(65536))
        if (channel.eof_received or channel.closed) and not channel.recv_ready() and not channel.recv_stderr_ready():
            # paramiko's pipe stays readable after EOF: stop watching it, then poll for the exit status
            self.selector.unregister(channel.fileno())
            run.reading = False
            if run.stdout.pending:
                self._stdout(run, b"\n")
            if run.stderr.pending:
                self._stderr(run, b"\n")

    def _stdout(self, run: HostRun, data: bytes) -> None:
        """Rank output, already prefixed ``[server][rankN]: `` remotely: only whole lines pass, never half one."""
        whole = run.stdout.feed(data)
        if whole:
            self._write("out", whole if whole.endswith(b"\n") else whole + b"\n")

    def _stderr(self, run: HostRun, data: bytes) -> None:
        """The remote launcher's stderr: events for the head, everything else shown as ``[server] line``."""

        lines = run.stderr.lines(data)
        shown = []
        for raw in lines:
            text = raw.decode("utf-8", "replace")
            event = parse_event(text)
            if event is not None:
                self._event(run, event)
            else:
                run.stderr_tail.append(text)
                shown.append(f"[{run.server_id}] ".encode() + raw + b"\n")
        if shown:
            self._write("err", b"".join(shown))

    def _event(self, run: HostRun, event: dict) -> None:
        if event.get("event") == "started":
            run.started_at = float(event["at"]) if event.get("at") is not None else time.time()
        elif event.get("event") == "summary" and isinstance(event.get("summary"), dict):
            run.summary, run.summary_path = event["summary"], event.get("path")

    def _write(self, stream: str, data: bytes) -> None:
        """All of ``data`` to the head's "out" or "err"; a closed console (``| head``) does not stop the job."""
        from launcher.execute.local.tee import _write_all

        try:
            _write_all(self.fds[stream], data)
        except BrokenPipeError:
            self.fds[stream] = os.open(os.devnull, os.O_WRONLY)
