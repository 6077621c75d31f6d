"""One host's end of the job: connects to the coordinator on the master address, joins, keeps it alive.

It keeps trying to connect until ``join_timeout`` (a host may start long before the master host's dlaunch:
Slurm and operators start hosts in any order), proves it holds the job's secret and checks that the
coordinator does too, then sends a heartbeat every ``host_timeout / 5`` seconds and expects one back. What
it hears for dlaunch (stop, verdict) and what it concludes (the master host is lost) it hands to
``deliver``; it never touches a process.
"""

from __future__ import annotations

import errno
import math
import selectors
import socket
import time
from collections.abc import Callable

from launcher.execute.job import protocol
from launcher.execute.job.coordinator import heartbeat_interval
from launcher.execute.job.protocol import Channel

RETRY_SECONDS = 0.1   # between connection attempts while the master host's dlaunch is not up yet


class Member:
    """States: ``waiting`` (to retry), ``connecting``, ``handshake``, ``joined``, ``done``."""

    def __init__(self, address: str, port: int, secret: bytes, run_id: str, index: int, *, host_timeout: float,
                 join_timeout: float, deliver: Callable[[dict], None], master_name: str):
        self.address, self.port, self.secret, self.run_id, self.index = address, port, secret, run_id, index
        self.endpoint = protocol.endpoint(address, port)
        self.host_timeout, self.join_timeout = host_timeout, join_timeout
        self.heartbeat = heartbeat_interval(host_timeout)
        self.deliver, self.master_name = deliver, master_name
        now = time.monotonic()
        self.join_deadline = now + join_timeout
        self.state = "waiting"
        self.retry_at = now
        self.sock: socket.socket | None = None
        self.selector: selectors.BaseSelector | None = None
        self.channel = Channel("c")
        self.nonce = protocol.new_nonce()
        self.server_nonce = ""
        self.heard = self.next_beat = now
        self.out = b""
        self.queue: list[dict] = []     # messages for the coordinator, kept until the handshake is done
        self.final = False              # the last verdict arrived: the coordinator closing is expected

    def register(self, selector: selectors.BaseSelector) -> None:
        self.selector = selector

    def send(self, message: dict) -> None:
        if self.state == "joined":
            self._write(message)
        elif self.state != "done":
            self.queue.append(message)

    # ---------------------------------------------------------------- the selector

    def tick(self) -> float:
        now = time.monotonic()
        if self.state == "waiting" and now >= self.retry_at:
            self._connect()
        if self.state in ("waiting", "connecting") and now >= self.join_deadline:
            self._lost(f"the master host's dlaunch never answered at {self.endpoint} within "
                       f"{self.join_timeout:g} s (--join-timeout)")
        elif self.state in ("handshake", "joined") and now - self.heard > self.host_timeout:
            self._lost(f"the master host {self.master_name} sent nothing for {now - self.heard:.1f} s "
                       f"(--host-timeout {self.host_timeout:g}): its dlaunch is stopped or its machine unreachable")
        elif self.state == "joined" and now >= self.next_beat:
            self._write({"t": "hb"})
        waits = {"waiting": self.retry_at - now, "connecting": self.join_deadline - now,
                 "handshake": self.heard + self.host_timeout - now,
                 "joined": min(self.next_beat, self.heard + self.host_timeout) - now}
        return max(0.0, waits.get(self.state, 3600.0))

    def on_ready(self, mask: int) -> None:
        if self.state == "connecting":
            self._connected()
            return
        if mask & selectors.EVENT_WRITE:
            self._flush()
        if mask & selectors.EVENT_READ and self.sock is not None:
            self._read()

    # ---------------------------------------------------------------- connecting

    def _connect(self) -> None:
        try:   # an IPv4 or IPv6 address, or a name (resolved each try: a pod's name appears when it starts)
            family, kind, proto, _, address = socket.getaddrinfo(self.address, self.port, type=socket.SOCK_STREAM)[0]
        except (OSError, UnicodeError):   # a name that does not resolve (yet): retry until the deadline
            self.retry_at = time.monotonic() + RETRY_SECONDS
            return
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            code = sock.connect_ex(address)
        except OSError as exc:
            code = exc.errno or errno.EHOSTUNREACH
        if code not in (0, errno.EINPROGRESS):
            sock.close()
            self.retry_at = time.monotonic() + RETRY_SECONDS
            return
        self.sock, self.state = sock, "connecting"
        assert self.selector is not None
        self.selector.register(sock, selectors.EVENT_WRITE, ("member", None))

    def _connected(self) -> None:
        assert self.sock is not None and self.selector is not None
        if self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            self._close()
            self.state, self.retry_at = "waiting", time.monotonic() + RETRY_SECONDS
            return
        self.state, self.heard = "handshake", time.monotonic()
        self.selector.modify(self.sock, selectors.EVENT_READ, ("member", None))

    def _close(self) -> None:
        if self.sock is not None:
            assert self.selector is not None
            self.selector.unregister(self.sock)
            self.sock.close()
            self.sock = None

    # ---------------------------------------------------------------- talking

    def _write(self, message: dict) -> None:
        self.out += self.channel.encode(message)
        self.next_beat = time.monotonic() + self.heartbeat
        self._flush()

    def _flush(self) -> None:
        if self.sock is None:
            return
        try:
            sent = self.sock.send(self.out) if self.out else 0
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._eof()
            return
        self.out = self.out[sent:]
        assert self.selector is not None
        self.selector.modify(self.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if self.out else 0),
                             ("member", None))

    def _read(self) -> None:
        assert self.sock is not None
        data = protocol.receive(self.sock)
        if data is None:
            return
        if not data:
            self._eof()
            return
        self.heard = time.monotonic()
        try:
            for message in self.channel.read(data):
                self._on_message(message)
                if self.state == "done":
                    return
        except (ValueError, KeyError, TypeError) as exc:
            self._lost(f"the coordinator at {self.endpoint} spoke out of protocol ({exc})")

    def _on_message(self, message: dict) -> None:
        kind = message["t"]
        if self.state == "handshake":
            if kind == "challenge":
                self._write({"t": "join", "index": self.index, "run_id": self.run_id, "nonce": self.nonce,
                             "proof": protocol.proof(self.secret, "join", message["nonce"], self.nonce, self.index,
                                                     self.run_id)})
                self.server_nonce = message["nonce"]
            elif kind == "welcome":
                expected = protocol.proof(self.secret, "welcome", self.server_nonce, self.nonce)
                if not protocol.hmac.compare_digest(str(message.get("proof")), expected):
                    self._lost(f"{self.endpoint} answered without this job's secret: not its coordinator")
                    return
                self.channel.key = protocol.session_key(self.secret, self.server_nonce, self.nonce)
                self.state = "joined"
                self.deliver({"t": "attempt", "attempt": message.get("attempt"),
                              "resume_step": message.get("resume_step"),
                              **({"active": message["active"]} if "active" in message else {})})
                for queued in self.queue:
                    self._write(queued)
                self.queue = []
            elif kind == "refused":
                until = message.get("excluded_until")
                self._lost(f"the job's coordinator at {self.endpoint} refused this host: {message.get('why')}",
                           refused=True, excluded_until=until if isinstance(until, (int, float))
                           and not isinstance(until, bool) and math.isfinite(until) else None)
            return
        if kind in ("stop", "verdict", "stack", "attempt"):
            if kind == "verdict" and not message.get("restart"):
                self.final = True
            self.deliver(message)

    def _eof(self) -> None:
        if self.final:
            self._close()
            self.state = "done"
        elif self.state == "handshake" and not self.channel.key:
            self._close()   # the coordinator is not listening properly yet, or went away mid-handshake: retry
            self.state, self.retry_at = "waiting", time.monotonic() + RETRY_SECONDS
        else:
            self._lost(f"the master host {self.master_name} closed the job's connection (its dlaunch is gone)")

    def _lost(self, why: str, **facts) -> None:
        """The job is out of reach (``facts``: ``refused``, and ``excluded_until`` for a replaced host)."""
        self._close()
        self.state = "done"
        self.deliver({"t": "lost", "host": self.master_name, "why": why, **facts})
