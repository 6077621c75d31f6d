"""The job's coordinator: the master host's dlaunch hears every host of the job and tells them all when it ends.

It serves on the job's master address (``--job-port``, by default MASTER_PORT + 1) from a selector, one
socket per host, no thread per host: a stop costs one short line per host, so a stop reaches 1,000
hosts in milliseconds (benchmarks/bench_job.py). It knows nothing of processes; it keeps four facts per
attempt: which hosts joined, the first stop (its cause), each host's result, and which hosts were lost.

- A host says "stop" (a rank failed, hung, dlaunch was interrupted or failed): every other host is told
  to stop, with the cause.
- A host is lost (its connection closed before it reported, no line for ``host_timeout`` seconds, or it
  never joined within ``join_timeout``): every host is told to stop, naming it.
- Every host that joined has reported its attempt's result (or was lost): the job's verdict goes to
  every host, the same for all (a host that never joined is not waited for once the others are done:
  its ranks could not have been part of their collectives); when the job failed and restarts are left
  (and no host was lost), it says "restart" and the next attempt begins on every host together.
"""

from __future__ import annotations

import selectors
import socket
import time
from collections.abc import Callable

from launcher.contract import ExitCode
from launcher.execute.job import protocol
from launcher.execute.job.protocol import Channel
from launcher.execute.job.restarts import common_step


class _Peer:
    """One connection: before the handshake a stranger, after it a host of the job (``index``)."""

    def __init__(self, sock: socket.socket, address: str, now: float):
        self.sock, self.address = sock, address
        self.channel = Channel("s")
        self.nonce = protocol.new_nonce()
        self.index: int | None = None
        self.heard = now
        self.out = b""
        self.closing = False


class Coordinator:
    """Selector-driven; ``serve_forever`` for a thread of its own, or ``register``/``on_ready``/``tick`` to
    share a selector (dlaunch's job thread does)."""

    def __init__(self, listener: socket.socket, secret: bytes, run_id: str, hosts: list[str], *, max_restarts: int,
                 host_timeout: float, join_timeout: float, log: Callable[[str], None] = lambda line: None,
                 master_index: int = 0):
        self.listener, self.secret, self.run_id, self.hosts = listener, secret, run_id, hosts
        self.max_restarts, self.host_timeout, self.log = max_restarts, host_timeout, log
        self.master_index = master_index   # the host whose run directory gathers every host's stacks
        self.heartbeat = heartbeat_interval(host_timeout)
        now = time.monotonic()
        self.join_deadline = now + join_timeout
        self.join_timeout = join_timeout
        self._next_beat = now + self.heartbeat
        self.selector: selectors.BaseSelector | None = None
        self.peers: dict[int, _Peer] = {}       # index -> the joined host's connection
        self.ever_joined: set[int] = set()
        self.attempt = 0
        self.stop: dict | None = None           # the attempt's first stop: the cause every host is told
        self.results: dict[int, dict] = {}
        self.lost: dict[int, str] = {}
        self.finished = False                   # the final verdict went out

    # ---------------------------------------------------------------- the selector

    def register(self, selector: selectors.BaseSelector) -> None:
        self.selector = selector
        selector.register(self.listener, selectors.EVENT_READ, ("coordinator", None))

    def on_ready(self, peer: _Peer | None, mask: int) -> None:
        if peer is None:
            self._accept()
            return
        if mask & selectors.EVENT_WRITE:
            self._flush(peer)
        if mask & selectors.EVENT_READ and peer.sock.fileno() >= 0:
            self._read(peer)

    def tick(self) -> float:
        """Heartbeats out, lost hosts found; returns the seconds until the next thing to do."""
        now = time.monotonic()
        if not self.finished:
            for index, peer in list(self.peers.items()):
                if now - peer.heard > self.host_timeout and index not in self.results:
                    self._lose(index, f"sent nothing for {now - peer.heard:.1f} s (--host-timeout "
                                      f"{self.host_timeout:g}): its dlaunch is stopped or its machine unreachable")
            if now >= self.join_deadline:
                for index in range(len(self.hosts)):
                    if index not in self.ever_joined and index not in self.lost:
                        self._lose(index, f"never joined the job within {self.join_timeout:g} s (--join-timeout)")
        if now >= self._next_beat:
            self._next_beat = now + self.heartbeat
            self._drop_silent_strangers(now)
            for peer in list(self.peers.values()):
                self._send(peer, {"t": "hb"})
        waits = [self._next_beat - now]
        if not self.finished and len(self.ever_joined) < len(self.hosts):
            waits.append(self.join_deadline - now)
        return max(0.0, min(waits))

    def _drop_silent_strangers(self, now: float) -> None:
        """A connection that has not joined within one host timeout holds nothing of the job: dropped."""
        assert self.selector is not None
        for key in list(self.selector.get_map().values()):
            peer = key.data[1]
            if peer is not None and peer.index is None and now - peer.heard > self.host_timeout:
                self._drop(peer)

    def serve_forever(self, until: Callable[[], bool] = lambda: False) -> None:
        selector = selectors.DefaultSelector()
        self.register(selector)
        while not until():
            for key, mask in selector.select(self.tick()):
                self.on_ready(key.data[1], mask)

    def close(self) -> None:
        """Whatever is still queued for a host (the last verdict) goes out first, within a second."""
        for peer in list(self.peers.values()):
            if peer.out and peer.sock.fileno() >= 0:
                try:
                    peer.sock.settimeout(1.0)
                    peer.sock.sendall(peer.out)
                except OSError:
                    pass   # that host is gone too: it has nothing to hear
            self._drop(peer)
        if self.selector is not None:
            self.selector.unregister(self.listener)
        self.listener.close()

    # ---------------------------------------------------------------- connections

    def _accept(self) -> None:
        while True:
            try:
                sock, address = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:   # out of descriptors: refuse this one, keep serving the others
                self.log(f"job coordinator: cannot accept a connection: {exc.strerror or exc}")
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer = _Peer(sock, f"{address[0]}:{address[1]}", time.monotonic())
            assert self.selector is not None
            self.selector.register(sock, selectors.EVENT_READ, ("coordinator", peer))
            self._send(peer, {"t": "challenge", "nonce": peer.nonce, "proto": protocol.PROTOCOL})

    def _send(self, peer: _Peer, message: dict) -> None:
        if peer.sock.fileno() < 0:
            return
        peer.out += peer.channel.encode(message)
        self._flush(peer)

    def _flush(self, peer: _Peer) -> None:
        try:
            sent = peer.sock.send(peer.out) if peer.out else 0
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._gone(peer)
            return
        peer.out = peer.out[sent:]
        want = selectors.EVENT_READ | (selectors.EVENT_WRITE if peer.out else 0)
        assert self.selector is not None
        self.selector.modify(peer.sock, want, ("coordinator", peer))
        if peer.closing and not peer.out:
            self._drop(peer)

    def _read(self, peer: _Peer) -> None:
        data = protocol.receive(peer.sock)
        if data is None:
            return
        if not data:
            self._gone(peer)
            return
        peer.heard = time.monotonic()
        try:
            for message in peer.channel.read(data):
                self._on_message(peer, message)
        except (ValueError, KeyError, TypeError) as exc:
            self.log(f"job coordinator: dropped {peer.address}: {exc}")
            self._gone(peer)

    def _gone(self, peer: _Peer) -> None:
        index = peer.index
        self._drop(peer)
        if index is not None and not self.finished and index not in self.results:
            self._lose(index, "closed its connection before its ranks ended (its dlaunch is gone)")

    def _drop(self, peer: _Peer) -> None:
        if peer.index is not None and self.peers.get(peer.index) is peer:
            del self.peers[peer.index]
        if peer.sock.fileno() >= 0:
            assert self.selector is not None
            self.selector.unregister(peer.sock)
            peer.sock.close()

    def _refuse(self, peer: _Peer, why: str) -> None:
        self.log(f"job coordinator: refused {peer.address}: {why}")
        self._send(peer, {"t": "refused", "why": why})
        peer.closing = True
        self._flush(peer)

    # ---------------------------------------------------------------- the job

    def _on_message(self, peer: _Peer, message: dict) -> None:
        kind = message["t"]
        if peer.index is None:
            if kind != "join":
                raise ValueError("spoke before joining")
            self._join(peer, message)
            return
        if kind == "stop" and message.get("attempt") == self.attempt:
            if self.stop is None:
                self.stop = {**message["cause"], "host": self.hosts[peer.index]}
                self._broadcast({"t": "stop", "attempt": self.attempt, "cause": self.stop}, skip=peer.index)
        elif kind == "result" and message.get("attempt") == self.attempt:
            self.results[peer.index] = message
            self._maybe_verdict()

    def _join(self, peer: _Peer, message: dict) -> None:
        index = message.get("index")
        expected = protocol.proof(self.secret, "join", peer.nonce, message.get("nonce"), index, message.get("run_id"))
        if not isinstance(message.get("proof"), str) or not protocol.hmac.compare_digest(message["proof"], expected):
            self._refuse(peer, "wrong job secret (DLAUNCH_JOB_SECRET, or a different rank table or --run-id)")
        elif message.get("run_id") != self.run_id:
            self._refuse(peer, f"run id {message.get('run_id')!r} is not this job's ({self.run_id!r})")
        elif not isinstance(index, int) or not 0 <= index < len(self.hosts) or index in self.lost:
            self._refuse(peer, f"server index {index!r} is not a host this job waits for")
        elif self.finished:
            self._refuse(peer, "the job has already ended")
        elif index in self.peers:
            self._refuse(peer, f"host {self.hosts[index]} has already joined this job")
        else:
            peer.index = index
            self.peers[index] = peer
            self.ever_joined.add(index)
            self._send(peer, {"t": "welcome", "proof": protocol.proof(self.secret, "welcome", peer.nonce,
                                                                          message["nonce"]),
                              "attempt": self.attempt})
            peer.channel.key = protocol.session_key(self.secret, peer.nonce, message["nonce"])
            if self.stop is not None:   # it arrived after the job began to stop: it stops at once
                self._send(peer, {"t": "stop", "attempt": self.attempt, "cause": self.stop})

    def _broadcast(self, message: dict, skip: int | None = None) -> None:
        for index, peer in list(self.peers.items()):
            if index != skip:
                self._send(peer, message)

    def _lose(self, index: int, why: str) -> None:
        self.lost[index] = why
        peer = self.peers.get(index)
        if peer is not None:
            self._drop(peer)
        self.log(f"job coordinator: lost host {self.hosts[index]}: {why}")
        if self.stop is None:
            self.stop = {"kind": "lost", "host": self.hosts[index], "why": why, "exit_code": ExitCode.HOST_LOST,
                         "end": time.time()}
            self._broadcast({"t": "stop", "attempt": self.attempt, "cause": self.stop})
        self._maybe_verdict()

    def _maybe_verdict(self) -> None:
        if self.finished or any(i not in self.results and i not in self.lost for i in self.ever_joined):
            return
        if not self.results and not self.lost:
            return
        verdict = job_verdict(self.stop, self.results, self.lost, self.hosts)
        verdict["absent_hosts"] = [self.hosts[i] for i in range(len(self.hosts))
                                   if i not in self.ever_joined and i not in self.lost]
        verdict["restart"] = (verdict["status"] == "failed" and not self.lost and self.attempt < self.max_restarts
                              and (self.stop or {}).get("kind") in ("failed", "hung"))
        verdict.update(t="verdict", attempt=self.attempt)
        stacks = {rank: {"host": self.hosts[i], "text": text} for i, r in sorted(self.results.items())
                  for rank, text in (r.get("stacks") or {}).items()}
        if stacks and self.master_index in self.peers:   # a hang: every rank's stack, gathered on one host
            self._send(self.peers[self.master_index], {"t": "stacks", "attempt": self.attempt, "stacks": stacks})
        if verdict["restart"]:
            verdict["resume_step"] = common_step([r.get("steps") or [] for _, r in sorted(self.results.items())])
        self._broadcast(verdict)
        if verdict["restart"]:
            self.attempt += 1
            self.stop, self.results = None, {}
        else:
            self.finished = True


def job_verdict(stop: dict | None, results: dict[int, dict], lost: dict[int, str], hosts: list[str]) -> dict:
    """THE rule for a job of hosts that talk: the first stop is the root cause (every other host was stopped
    because of it); its exit code is the job's. With no stop, the first host's non-zero code, or 0."""
    codes = {hosts[i]: r.get("exit_code") for i, r in sorted(results.items())}
    codes.update({hosts[i]: None for i in lost})
    lost_hosts = {hosts[i]: why for i, why in sorted(lost.items())}
    if stop is not None:
        kind = stop.get("kind")
        status = "interrupted" if kind == "interrupted" else "failed"
        return {"status": status, "exit_code": stop.get("exit_code") or 1, "root_cause": stop,
                "host_exit_codes": codes, "lost_hosts": lost_hosts}
    failed = [code for code in codes.values() if code]
    return {"status": "failed" if failed else "succeeded", "exit_code": failed[0] if failed else 0,
            "root_cause": None, "host_exit_codes": codes, "lost_hosts": lost_hosts}


def heartbeat_interval(host_timeout: float) -> float:
    """Five heartbeats fit in one host timeout: one lost packet or a busy second never looks like a lost host."""
    return max(0.02, host_timeout / 5)
