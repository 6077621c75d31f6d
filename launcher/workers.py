"""Start, watch and stop the local rank processes: the only module here with process side effects.

One thread, one selector: rank exits arrive as readable pidfds, console output
as readable pipes, and signals to dlaunch through ``signal.set_wakeup_fd``; no
polling threads.  Every rank runs in its own session (so a signal to its
process group reaches the children it spawns too); stopping sends the signal to
every group, waits one shared grace deadline, then SIGKILLs what is left.

A forked ``Reaper`` outlives a SIGKILLed launcher: it holds the read end of a
pipe only the launcher writes to, and when that pipe closes without a goodbye
it SIGKILLs every rank's process group and any process that still carries this
launcher's id in its environment (children that left their group).
"""

from __future__ import annotations

import errno
import os
import selectors
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field

from .environment import format_env
from .hangs import HANG_EXIT_CODE, HangWatch, describe_hang, dump_stacks
from .logs import ConsoleTee
from .plan import LaunchPlan, RankSpec

LAUNCHER_ID_VAR = "DLAUNCH_LAUNCHER_ID"
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PIPE_DRAIN_SECONDS = 1.0


@dataclass
class RankResult:
    rank: int
    local_rank: int
    device_id: int
    server_id: str
    log_file: str
    error_file: str
    pid: int | None = None
    start: float | None = None
    end: float | None = None
    returncode: int | None = None   # as Popen: negative for "killed by signal"
    spawn_error: str | None = None
    hang: str | None = None          # why dlaunch judged this rank hung, if it did
    stack_file: str | None = None

    @property
    def exit_code(self) -> int | None:
        """The shell's convention: 128+N for a rank killed by signal N."""
        if self.returncode is None:
            return None
        return 128 - self.returncode if self.returncode < 0 else self.returncode

    @property
    def signal_name(self) -> str | None:
        if self.returncode is None or self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"

    def to_dict(self) -> dict:
        return {"rank": self.rank, "local_rank": self.local_rank, "device_id": self.device_id,
                "host": self.server_id, "pid": self.pid, "start": self.start, "end": self.end,
                "exit_code": self.exit_code, "signal": self.signal_name, "log": self.log_file,
                **({"spawn_error": self.spawn_error} if self.spawn_error else {}),
                **({"hung": True, "reason": self.hang} if self.hang else {}),
                **({"stack_file": self.stack_file} if self.stack_file else {})}


@dataclass
class AttemptResult:
    attempt: int
    ranks: list[RankResult]
    root_cause: RankResult | None = None
    interrupted_by: int | None = None     # the signal dlaunch received, if that ended the attempt
    stopped_at: float | None = None
    extra: dict = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        if self.root_cause is not None:
            return HANG_EXIT_CODE if self.root_cause.hang else (self.root_cause.exit_code or 1)
        if self.interrupted_by is not None:
            return 128 + self.interrupted_by
        return 0


class SignalWatch:
    """Turns SIGINT/SIGTERM/SIGHUP into bytes on a socket the selector watches.

    A launcher started by a head node over SSH also has a control channel (its
    stdin): the head sends signal names there, one a line, and the channel
    closing means the head is gone, which counts as SIGHUP.
    """

    def __init__(self, control_fd: int | None = None, control_pending: bytes = b""):
        self.control_fd = control_fd
        self._control_buffer = control_pending
        import socket

        self._recv, self._send = socket.socketpair()
        self._recv.setblocking(False)
        self._send.setblocking(False)
        self.received: list[int] = []
        self._previous_fd = signal.set_wakeup_fd(self._send.fileno(), warn_on_full_buffer=False)
        self._previous = {sig: signal.signal(sig, self._record) for sig in FORWARDED_SIGNALS}

    def _record(self, signum, frame) -> None:
        self.received.append(signum)

    @property
    def fd(self) -> int:
        return self._recv.fileno()

    def drain(self) -> list[int]:
        try:
            while self._recv.recv(4096):
                pass
        except BlockingIOError:
            pass
        signals, self.received = self.received, []
        return signals

    def read_control(self) -> list[int]:
        """Signals the head sent over the control channel; EOF (the head is gone) is SIGHUP."""
        try:
            chunk = os.read(self.control_fd, 4096)
        except OSError:
            chunk = b""
        if not chunk:
            self.control_fd = None
            return [signal.SIGHUP]
        *lines, self._control_buffer = (self._control_buffer + chunk).split(b"\n")
        found = []
        for line in lines:
            name = line.strip().decode("ascii", "replace")
            if name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGKILL"):
                found.append(int(getattr(signal, name)))
        return found

    def pending_control(self) -> list[int]:
        """Whole signal lines that arrived with the launch request, before the selector watched the channel."""
        *lines, self._control_buffer = self._control_buffer.split(b"\n")
        return [int(getattr(signal, l.strip().decode())) for l in lines
                if l.strip() in (b"SIGINT", b"SIGTERM", b"SIGHUP", b"SIGKILL")]

    def close(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(self._previous_fd)
        self._recv.close()
        self._send.close()


class Reaper:
    """A forked watchdog that kills every rank if the launcher dies without saying goodbye."""

    def __init__(self, launcher_id: str):
        read_fd, self._fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the reaper: never returns
            status = 0
            try:
                os.close(self._fd)
                _keep_only_fd(read_fd)  # hold none of the launcher's pipes, sockets or SSH channel open
                os.setsid()  # out of the launcher's group: a killpg of the launcher must not take us too
                for sig in FORWARDED_SIGNALS:
                    signal.signal(sig, signal.SIG_IGN)
                _reap_when_orphaned(read_fd, launcher_id.encode())
            except BaseException:
                status = 1
            finally:
                os._exit(status)
        os.close(read_fd)
        self.pid = pid

    def watch(self, pgid: int) -> None:
        os.write(self._fd, b"+%d\n" % pgid)

    def close(self) -> None:
        """Normal exit: the launcher has stopped its ranks itself, so the reaper leaves quietly."""
        try:
            os.write(self._fd, b"bye\n")
        finally:
            os.close(self._fd)
            os.waitpid(self.pid, 0)


def _keep_only_fd(keep: int) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    os.closerange(3, keep)
    os.closerange(keep + 1, 65536)


def _reap_when_orphaned(read_fd: int, launcher_id: bytes) -> None:
    groups: set[int] = set()
    buffer = b""
    while True:
        chunk = os.read(read_fd, 4096)
        if not chunk:
            break
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line == b"bye":
                return
            if line.startswith(b"+"):
                groups.add(int(line[1:]))
    for pgid in groups:
        _killpg(pgid, signal.SIGKILL)
    marker = LAUNCHER_ID_VAR.encode() + b"=" + launcher_id
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as fh:
                    if marker in fh.read().split(b"\0"):
                        os.kill(int(name), signal.SIGKILL)
            except OSError:
                continue  # gone, or not ours to read


def _killpg(pgid: int, sig: int) -> bool:
    """Signal a rank's process group; False when it no longer exists."""
    try:
        os.killpg(pgid, sig)
        return True
    except OSError as exc:
        if exc.errno in (errno.ESRCH, errno.EPERM):
            return False
        raise


class _Rank:
    """A running rank: its Popen, exit watch and output pipe."""

    def __init__(self, spec: RankSpec, result: RankResult):
        self.spec, self.result = spec, result
        self.proc: subprocess.Popen | None = None
        self.pidfd: int | None = None


class LocalWorkers:
    """Runs one attempt of a plan on this host and reports how every rank ended."""

    def __init__(self, signals: SignalWatch, console_fd: int = 1, prefix_host: bool = False,
                 hang_timeout: float | None = None):
        self.signals = signals
        self.hang_timeout = hang_timeout
        self.console_fd = console_fd
        self.prefix_host = prefix_host
        self.launcher_id = uuid.uuid4().hex
        self.reaper = Reaper(self.launcher_id)
        self.on_started = None  # optional callback(list[RankResult]) once every rank is running

    def close(self) -> None:
        self.reaper.close()

    def run(self, plan: LaunchPlan) -> AttemptResult:
        selector = selectors.DefaultSelector()
        tee = ConsoleTee(self.console_fd)
        ranks: list[_Rank] = []
        result = AttemptResult(attempt=plan.attempt, ranks=[])
        stopping_deadline: float | None = None
        killed = False
        selector.register(self.signals.fd, selectors.EVENT_READ, ("signal", None))
        if self.signals.control_fd is not None:
            selector.register(self.signals.control_fd, selectors.EVENT_READ, ("control", None))
        self.signals.received.extend(self.signals.pending_control())
        try:
            for spec in plan.ranks:
                rank = _Rank(spec, RankResult(spec.rank, spec.local_rank, spec.device_id, spec.server_id,
                                              spec.log_file, spec.error_file))
                ranks.append(rank)
                result.ranks.append(rank.result)
                self._spawn(rank, selector, tee)
                if rank.result.spawn_error:
                    result.root_cause = rank.result
                    break
                pending = self.signals.drain() if self.signals.received else []
                if pending:
                    result.interrupted_by = pending[0]
                    break
            if result.root_cause or result.interrupted_by:
                stopping_deadline = self._stop(ranks, result.interrupted_by or signal.SIGTERM, plan.grace_period)
                result.stopped_at = time.time()
            elif self.on_started:
                self.on_started([r.result for r in ranks])
            hangs = HangWatch(self.hang_timeout, time.time()) if self.hang_timeout else None
            while any(r.result.returncode is None and r.proc for r in ranks) or self._pipes(selector):
                if all(r.result.returncode is not None or not r.proc for r in ranks):
                    self._kill_groups(ranks)  # leaders are gone: nothing of theirs may linger
                    drain_until = time.monotonic() + PIPE_DRAIN_SECONDS
                    while self._pipes(selector) and time.monotonic() < drain_until:
                        self._dispatch(selector, tee, ranks, max(0.0, drain_until - time.monotonic()))
                    break
                timeout = None
                if stopping_deadline is not None:
                    timeout = max(0.0, stopping_deadline - time.monotonic())
                elif hangs:
                    timeout = hangs.interval
                events = self._dispatch(selector, tee, ranks, timeout)
                if hangs and stopping_deadline is None and hangs.due():
                    hung = self._check_hangs(hangs, ranks, plan.attempt)
                    if hung:
                        result.root_cause = hung
                        result.stopped_at = time.time()
                        stopping_deadline = self._stop(ranks, signal.SIGTERM, plan.grace_period)
                for kind, value in events:
                    if kind == "exit" and stopping_deadline is None and value.returncode != 0:
                        result.root_cause = value
                        result.stopped_at = time.time()
                        stopping_deadline = self._stop(ranks, signal.SIGTERM, plan.grace_period)
                    elif kind == "signal":
                        if stopping_deadline is None:
                            result.interrupted_by = value
                            result.stopped_at = time.time()
                            stopping_deadline = self._stop(ranks, value, plan.grace_period)
                        elif value in (signal.SIGINT, signal.SIGKILL) and not killed:  # a second Ctrl-C: no more patience
                            self._kill_groups(ranks)
                            killed = True
                if stopping_deadline is not None and not killed and time.monotonic() >= stopping_deadline:
                    self._kill_groups(ranks)
                    killed = True
        finally:
            self._kill_groups(ranks)
            for rank in ranks:
                if rank.proc and rank.result.returncode is None:
                    rank.result.returncode = rank.proc.wait()
                    rank.result.end = time.time()
                if rank.pidfd is not None:
                    os.close(rank.pidfd)
            for key in list(self._pipe_keys(selector)):
                selector.unregister(key.fileobj)
                tee.close(key.data[1])
                os.close(key.fd)
            selector.close()
        return result

    def _check_hangs(self, hangs: HangWatch, ranks: list[_Rank], attempt: int) -> RankResult | None:
        """If a rank has hung: record every live rank's stack, and return the hung rank's result."""
        live = [r for r in ranks if r.proc and r.result.returncode is None]
        found = hangs.find_hung([r.spec for r in live])
        if not found:
            return None
        spec, silent_for = found
        hung = next(r.result for r in live if r.spec is spec)
        hung.hang = describe_hang(spec, silent_for)
        files, why = dump_stacks([(r.spec, r.proc.pid) for r in live], attempt)
        for rank in live:
            rank.result.stack_file = files.get(rank.spec.rank)
        if why:
            print(f"dlaunch: {why}", file=sys.stderr)
        return hung

    def _spawn(self, rank: _Rank, selector, tee: ConsoleTee) -> None:
        spec = rank.spec
        os.makedirs(spec.ckpt_dir, exist_ok=True)
        with open(spec.env_log, "w", encoding="utf-8") as fh:
            fh.write(format_env({**os.environ, **spec.env}))
        env = {**os.environ, **spec.env, LAUNCHER_ID_VAR: self.launcher_id}
        log_fd = os.open(spec.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        read_fd = None
        try:
            if spec.console:
                read_fd, write_fd = os.pipe()
                stdout = write_fd
            else:
                stdout = log_fd
            rank.result.start = time.time()
            try:
                rank.proc = subprocess.Popen(spec.argv, cwd=spec.cwd, env=env, stdin=subprocess.DEVNULL,
                                             stdout=stdout, stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as exc:
                rank.result.spawn_error = f"cannot start {spec.argv[0]}: {exc.strerror or exc}"
                rank.result.returncode = 126 if exc.errno == errno.EACCES else 127
                rank.result.end = time.time()
                os.write(log_fd, f"dlaunch: {rank.result.spawn_error}\n".encode())
                if read_fd is not None:
                    os.close(read_fd)
                    os.close(write_fd)
                    read_fd = None
                return
            self.reaper.watch(rank.proc.pid)
            rank.result.pid = rank.proc.pid
            if spec.console:
                os.close(write_fd)
                prefix = f"[{spec.server_id}][rank{spec.rank}]: " if self.prefix_host else f"[rank{spec.rank}]: "
                tee.add(spec.rank, prefix, log_fd)
                selector.register(read_fd, selectors.EVENT_READ, ("pipe", spec.rank))
                log_fd = None
            try:
                rank.pidfd = os.pidfd_open(rank.proc.pid)
                selector.register(rank.pidfd, selectors.EVENT_READ, ("exit", rank))
            except (AttributeError, OSError):
                rank.pidfd = None  # old kernel: _dispatch polls instead
        finally:
            if log_fd is not None:
                os.close(log_fd)

    def _pipe_keys(self, selector):
        return [key for key in selector.get_map().values() if key.data[0] == "pipe"]

    def _pipes(self, selector) -> bool:
        return bool(self._pipe_keys(selector))

    def _dispatch(self, selector, tee: ConsoleTee, ranks: list[_Rank], timeout):
        """Wait for one batch of events; returns ("exit", RankResult) and ("signal", signum) items."""
        polling = any(r.pidfd is None and r.proc and r.result.returncode is None for r in ranks)
        if polling:
            timeout = 0.05 if timeout is None else min(timeout, 0.05)
        happened = []
        for key, _ in selector.select(timeout):
            kind, data = key.data
            if kind == "pipe":
                try:
                    chunk = os.read(key.fd, 65536)
                except OSError:
                    chunk = b""
                if chunk:
                    tee.feed(data, chunk)
                else:
                    selector.unregister(key.fd)
                    os.close(key.fd)
                    tee.close(data)
            elif kind == "exit":
                selector.unregister(key.fd)
                happened.append(("exit", self._reap(data)))
            elif kind == "control":
                found = self.signals.read_control()
                if self.signals.control_fd is None:
                    selector.unregister(key.fd)
                happened.extend(("signal", sig) for sig in found)
            else:
                happened.extend(("signal", sig) for sig in self.signals.drain())
        if polling:
            for rank in ranks:
                if rank.pidfd is None and rank.proc and rank.result.returncode is None and rank.proc.poll() is not None:
                    happened.append(("exit", self._reap(rank)))
        return happened

    def _reap(self, rank: _Rank) -> RankResult:
        rank.result.returncode = rank.proc.wait()
        rank.result.end = time.time()
        return rank.result

    def _stop(self, ranks: list[_Rank], sig: int, grace: float) -> float:
        """Send ``sig`` to every live rank's process group; returns the shared SIGKILL deadline."""
        for rank in ranks:
            if rank.proc and rank.result.returncode is None:
                _killpg(rank.proc.pid, sig)
        return time.monotonic() + grace

    def _kill_groups(self, ranks: list[_Rank]) -> None:
        for rank in ranks:
            if rank.proc:
                _killpg(rank.proc.pid, signal.SIGKILL)
