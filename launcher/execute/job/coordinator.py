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
- A host that joins, or speaks, for an attempt the job has left behind (it came after a restart) is told
  the job's attempt and catches up; once an attempt stops, every host that joined must report within
  ``report_timeout`` or it is lost: no host ever waits for a verdict that cannot come.

Strangers (connections that have not proven the secret) are held to ``strangers.py``'s limits, and no
input from anyone ends the coordinator: a connection that sends what the protocol does not say is closed.
"""

from __future__ import annotations

import errno
import selectors
import socket
import time
from collections.abc import Callable

from launcher.contract import ExitCode
from launcher.execute.blame import blamed_cause
from launcher.execute.budget import RestartBudget
from launcher.execute.job import protocol
from launcher.execute.job.membership import Membership
from launcher.execute.job.protocol import Channel
from launcher.execute.job.restarts import common_step
from launcher.execute.job.strangers import Strangers, Tally

STACKS_TOTAL = 64 << 20   # characters of stacks gathered from every host after a hang; the rest stay on their hosts


class _Peer:
    """One connection: before the handshake a stranger, after it a host of the job (``index``)."""

    def __init__(self, sock: socket.socket, address: tuple, now: float):
        self.sock, self.host = sock, str(address[0])
        self.address = protocol.endpoint(address[0], address[1])
        self.channel = Channel("s")
        self.nonce = protocol.new_nonce()
        self.index: int | None = None
        self.heard = now
        self.out = b""
        self.closing = False


class Coordinator(Membership):
    """Selector-driven; ``serve_forever`` for a thread of its own, or ``register``/``on_ready``/``tick`` to
    share a selector (dlaunch's job thread does)."""

    def __init__(self, listener: socket.socket, secret: bytes, run_id: str, hosts: list[str], *, max_restarts: int,
                 host_timeout: float, join_timeout: float, log: Callable[[str], None] = lambda line: None,
                 master_index: int = 0, report_timeout: float | None = None, stranger_cap: int | None = None,
                 budget: RestartBudget | None = None, active: list[int] | None = None, cooldown: float = 600.0,
                 elastic: tuple[int, float] | None = None):
        self.listener, self.secret, self.run_id, self.hosts = listener, secret, run_id, hosts
        self.max_restarts, self.host_timeout, self.log = max_restarts, host_timeout, log
        self.report_timeout = report_timeout if report_timeout is not None else 2 * host_timeout + 60
        self.budget = budget or RestartBudget()
        self.strangers = Strangers(handshake_timeout=max(1.0, min(host_timeout, 10.0)), cap=stranger_cap)
        self.tally = Tally(log)
        self._spare: socket.socket | None = socket.socket()   # given up to refuse a connection when out of fds
        self._accept_paused_until = 0.0
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
        self.stop_at = 0.0
        self.resume_step: str | None = None     # the step the current attempt resumed from (after a restart)
        self.results: dict[int, dict] = {}
        self.stacks: dict[str, dict] = {}       # after a hang: global rank -> {"host", "text"}
        self.stack_chars = 0
        self.lost: dict[int, str] = {}
        self.finished = False                   # the final verdict went out
        self.leaving: set[int] = set()          # unfit pods going away to be rescheduled (not lost)
        self.init_membership(active, cooldown, elastic)

    # ---------------------------------------------------------------- the selector

    def register(self, selector: selectors.BaseSelector) -> None:
        self.selector = selector
        selector.register(self.listener, selectors.EVENT_READ, ("coordinator", None))

    def on_ready(self, peer: _Peer | None, mask: int) -> None:
        if peer is None:
            self._accept()
            return
        try:
            if mask & selectors.EVENT_WRITE:
                self._flush(peer)
            if mask & selectors.EVENT_READ and peer.sock.fileno() >= 0:
                self._read(peer)
        except Exception as exc:   # a defect met on one connection closes that connection, never the job's link
            self.tally.note(f"closed (after {type(exc).__name__})",
                            f"job coordinator: closed {peer.address} after an error: {type(exc).__name__}: {exc}")
            self._gone(peer)

    def tick(self) -> float:
        """Heartbeats out, lost hosts found; returns the seconds until the next thing to do."""
        now = time.monotonic()
        forming = self._forming(now)
        if not self.finished:
            for index, peer in list(self.peers.items()):
                if now - peer.heard > self.host_timeout and index not in self.results:
                    self._lose(index, f"sent nothing for {now - peer.heard:.1f} s (--host-timeout "
                                      f"{self.host_timeout:g}): its dlaunch is stopped or its machine unreachable")
            if now >= self.join_deadline:
                for index in self._running():
                    if index not in self.ever_joined and index not in self.lost:
                        self._lose(index, f"never joined the job within {self.join_timeout:g} s (--join-timeout)")
            if self.stop is not None and now - self.stop_at > self.report_timeout:
                for index in sorted(self.ever_joined - set(self.results) - set(self.lost)):
                    self._lose(index, f"did not report its ranks' end within {self.report_timeout:g} s of the "
                                      f"job's stop")
        for peer in self.strangers.overdue(now):
            self._stranger_out(peer, "dropped (no handshake in time)",
                               f"took longer than {self.strangers.handshake_timeout:g} s to join")
        if self._accept_paused_until and now >= self._accept_paused_until:
            self._resume_accepting()
        if now >= self._next_beat:
            self._next_beat = now + self.heartbeat
            for peer in list(self.peers.values()):
                self._send(peer, {"t": "hb"})
        self.tally.flush(now)
        waits = [self._next_beat - now, self.tally.period_end - now] + ([forming] if forming is not None else [])
        if not self.finished and not set(self._running()) <= self.ever_joined:
            waits.append(self.join_deadline - now)
        if self.stop is not None and not self.finished:
            waits.append(self.stop_at + self.report_timeout - now)
        for deadline in (self.strangers.next_deadline(), self._accept_paused_until or None):
            if deadline is not None:
                waits.append(deadline - now)
        return max(0.0, min(waits))

    def _stranger_out(self, peer: _Peer, kind: str, why: str) -> None:
        """Close a stranger's connection, counted rather than said each time (``Tally``)."""
        self.tally.note(kind, f"job coordinator: {kind.split(' (')[0]} {peer.address}: {why}")
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
        self.tally.flush(time.monotonic(), force=True)
        if self.selector is not None and not self._accept_paused_until:
            self.selector.unregister(self.listener)
        self.listener.close()
        if self._spare is not None:
            self._spare.close()

    # ---------------------------------------------------------------- connections

    def _accept(self) -> None:
        for _ in range(64):   # then the selector again: the job's own sockets are served between storms
            try:
                sock, address = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    self._out_of_descriptors(exc)
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            now = time.monotonic()
            peer = _Peer(sock, address, now)
            assert self.selector is not None
            self.selector.register(sock, selectors.EVENT_READ, ("coordinator", peer))
            closed = self.strangers.admit(peer, now)
            for old in closed:
                self._stranger_out(old, "closed (too many strangers)", "too many connections that have not joined "
                                   f"(at most {self.strangers.cap}; the address with the most loses its oldest)")
            if peer not in closed:
                self._send(peer, {"t": "challenge", "nonce": peer.nonce, "proto": protocol.PROTOCOL})

    def _out_of_descriptors(self, exc: OSError) -> None:
        """EMFILE: the spare descriptor is given up to take the waiting connection and close it, and the
        oldest stranger goes too, so ``accept`` never spins; with no spare left, accepting pauses briefly."""
        self.tally.note("refused (out of descriptors)", f"job coordinator: cannot accept a connection: "
                                                          f"{exc.strerror or exc}; strangers are being closed")
        oldest = self.strangers.oldest()
        if oldest is not None:
            self._drop(oldest)
        if self._spare is not None:
            self._spare.close()
            self._spare = None
            try:
                self.listener.accept()[0].close()
            except OSError:
                pass   # nothing was waiting after all, or it went: either way nothing is held
        try:
            self._spare = socket.socket()
        except OSError:
            assert self.selector is not None
            self.selector.unregister(self.listener)
            self._accept_paused_until = time.monotonic() + 0.1

    def _resume_accepting(self) -> None:
        self._accept_paused_until = 0.0
        assert self.selector is not None
        self.selector.register(self.listener, selectors.EVENT_READ, ("coordinator", None))
        if self._spare is None:
            try:
                self._spare = socket.socket()
            except OSError:
                pass   # taken the next time EMFILE comes

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
            if peer.index is None:
                self._stranger_out(peer, "dropped (out of protocol)", str(exc))
            else:
                self.log(f"job coordinator: dropped {peer.address} (host {self.hosts[peer.index]}): {exc}")
                self._gone(peer)

    def _gone(self, peer: _Peer) -> None:
        index = peer.index
        self._drop(peer)
        if index in self.leaving:   # an unfit pod told to go: its rescheduled pod takes the index again
            self.leaving.discard(index)
            self.ever_joined.discard(index)
            return
        if index is not None and not self.finished and index not in self.results:
            self._lose(index, "closed its connection before its ranks ended (its dlaunch is gone)")

    def _drop(self, peer: _Peer) -> None:
        self.strangers.forget(peer)
        if peer.index is not None and self.peers.get(peer.index) is peer:
            del self.peers[peer.index]
        if peer.sock.fileno() >= 0:
            assert self.selector is not None
            self.selector.unregister(peer.sock)
            peer.sock.close()

    def _refuse(self, peer: _Peer, why: str, excluded_until: float | None = None) -> None:
        """``why`` said to the host refused; a replaced host in its cooldown is also told until when (epoch),
        which it says in its own local time."""
        self.tally.note(f"refused ({why.split(' (')[0]})", f"job coordinator: refused {peer.address}: {why}")
        self._send(peer, {"t": "refused", "why": why,
                          **({"excluded_until": excluded_until} if excluded_until is not None else {})})
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
        attempt = message.get("attempt")
        if kind in ("stop", "result", "stack") and isinstance(attempt, int) and attempt < self.attempt:
            self._send(peer, self._attempt_message())   # a host behind the job (it joined late): catch up
        elif kind == "stop" and attempt == self.attempt:
            cause = {**message["cause"], "host": self.hosts[peer.index]}
            if self.stop is None:
                self._stopping(cause, skip=peer.index)
            elif cause.get("stopped_first") and self.stop.get("kind") == "hung" and not self.stop.get("stopped_first"):
                self.stop = cause   # a hang called on two hosts: the job's cause is the rank the others wait for
        elif kind == "stack" and attempt == self.attempt:
            self._gather_stack(peer.index, str(message["rank"]), str(message["text"]))
        elif kind == "result" and attempt == self.attempt:
            self.results[peer.index] = message
            self._maybe_verdict()

    def _stopping(self, cause: dict, skip: int | None = None) -> None:
        """The attempt's first stop: every other host is told; the report deadline starts."""
        self.stop, self.stop_at = cause, time.monotonic()
        self._broadcast({"t": "stop", "attempt": self.attempt, "cause": cause}, skip=skip)

    def _gather_stack(self, index: int, rank: str, text: str) -> None:
        """One part of a rank's stack; past STACKS_TOTAL in all, a note says where the rest is."""
        entry = self.stacks.setdefault(rank, {"host": self.hosts[index], "text": "", "cut": False})
        kept = text[:max(0, STACKS_TOTAL - self.stack_chars)]
        entry["text"] += kept
        self.stack_chars += len(kept)
        if len(kept) < len(text) and not entry["cut"]:
            entry["cut"] = True
            entry["text"] += (f"\n[dlaunch: cut here: the job's stacks exceed {STACKS_TOTAL >> 20} MiB; the whole "
                              f"stack is in this rank's stack.txt on host {self.hosts[index]}]\n")

    def _join(self, peer: _Peer, message: dict) -> None:
        index = message.get("index")
        expected = protocol.proof(self.secret, "join", peer.nonce, message.get("nonce"), index, message.get("run_id"))
        if not isinstance(message.get("proof"), str) or not protocol.hmac.compare_digest(message["proof"], expected):
            self._refuse(peer, "wrong job secret (DLAUNCH_JOB_SECRET, or a different rank table or --run-id)")
        elif message.get("run_id") != self.run_id:
            self._refuse(peer, f"run id {message.get('run_id')!r} is not this job's ({self.run_id!r})")
        elif index is None and self.elastic is not None:   # a host asking for a node index (claim.py)
            self._assign(peer, str(message.get("nonce")))
        elif not isinstance(index, int) or not 0 <= index < len(self.hosts) or index in self.lost:
            self._refuse(peer, f"server index {index!r} is not a host this job waits for")
        elif self.excluded.get(index, 0.0) > time.time():
            until = self.excluded[index]
            self._refuse(peer, f"host {self.hosts[index]} was replaced by a spare and is excluded from the job until "
                               f"{time.strftime('%H:%M:%S', time.localtime(until))} (--exclude-cooldown; "
                               f"{until - time.time():.0f} s from now)", excluded_until=until)
        elif self.finished:
            self._refuse(peer, "the job has already ended")
        elif index in self.peers:
            self._refuse(peer, f"host {self.hosts[index]} has already joined this job")
        else:
            peer.index = index
            self.strangers.forget(peer)
            self.peers[index] = peer
            self.ever_joined.add(index)
            self._send(peer, {"t": "welcome", "proof": protocol.proof(self.secret, "welcome", peer.nonce,
                                                                          message["nonce"]),
                              "attempt": self.attempt, "resume_step": self.resume_step, **self._active_said()})
            peer.channel.key = protocol.session_key(self.secret, peer.nonce, message["nonce"])
            if self.stop is not None:   # it arrived after the job began to stop: it stops at once
                self._send(peer, {"t": "stop", "attempt": self.attempt, "cause": self.stop})
            self._forming(time.monotonic())

    def _broadcast(self, message: dict, skip: int | None = None) -> None:
        for index, peer in list(self.peers.items()):
            if index != skip:
                self._send(peer, message)

    def _lose(self, index: int, why: str) -> None:
        peer = self.peers.get(index)
        if peer is not None:
            self._drop(peer)
        if index not in self._running():   # a spare: one fewer to take a place, nothing stops
            self.ever_joined.discard(index)
            self.results.pop(index, None)
            self.log(f"job coordinator: spare host {self.hosts[index]} left: {why}")
            self._maybe_verdict()
            return
        self.lost[index] = why
        self.log(f"job coordinator: lost host {self.hosts[index]}: {why}")
        if self.stop is None:
            self._stopping({"kind": "lost", "host": self.hosts[index], "why": why, "exit_code": ExitCode.HOST_LOST,
                            "end": time.time()})
        self._maybe_verdict()

    def _maybe_verdict(self) -> None:
        running = self._running()
        if self.finished or any(i not in self.results and i not in self.lost for i in self.ever_joined
                                if i in running):
            return
        if self.stop is not None and any(i not in self.results for i in self.peers if i not in running):
            return   # the spares report what they could take over once the job stops (at once)
        results = {i: r for i, r in self.results.items() if i in running}
        if not results and not self.lost:
            return
        if self.stacks and self.stop is not None and self.stop.get("kind") == "hung":
            self.stop = blamed_cause(self.stop, self.stacks)
        verdict = job_verdict(self.stop, results, self.lost, self.hosts)
        verdict["absent_hosts"] = [self.hosts[i] for i in running if i not in self.ever_joined and i not in self.lost]
        stop = self.stop or {}
        verdict["restart"] = (verdict["status"] == "failed" and not self.lost and self.attempt < self.max_restarts
                              and (stop.get("kind") in ("failed", "hung") or stop.get("order") == "unrecovered"
                                   or bool(stop.get("reschedule") and self.active is None)))
        verdict.update(t="verdict", attempt=self.attempt)
        master = self.peers.get(self.master_index)
        if self.stacks and master is not None:   # a hang: every rank's stack, gathered on one host, in parts
            for rank, entry in sorted(self.stacks.items(), key=lambda item: int(item[0])):
                for part in protocol.stack_parts({rank: entry["text"]}, self.attempt):
                    self._send(master, {**part, "host": entry["host"]})
        swap = self._replacements(verdict) if self.active is not None else None
        if swap:
            verdict.update(restart=True, replaced=swap["replaced"])
        if self.active is not None:
            verdict.update(active=swap["active"] if swap else self.active, roster=self._roster(swap))
        if verdict["restart"]:
            verdict["resume_step"] = common_step(swap["steps"] if swap else
                                                 [r.get("steps") or [] for _, r in sorted(results.items())])
            refused = self.budget.refuses(verdict["resume_step"], time.time())
            if refused:   # restarts left, but they would loop: every host exits "do not requeue"
                verdict.update(restart=False, no_restart=refused, exit_code=ExitCode.NO_PROGRESS)
        self._broadcast(verdict)
        if verdict["restart"] and swap:
            self._exclude(swap)
        elif verdict["restart"] and stop.get("reschedule"):   # the unfit pod leaves; the one rescheduled joins
            self.leaving.add(self.hosts.index(str(stop.get("host"))))
            self.join_deadline = time.monotonic() + self.join_timeout
        if verdict["restart"]:
            self.attempt += 1
            self.resume_step = verdict["resume_step"]
            self.stop, self.results, self.stacks, self.stack_chars = None, {}, {}, 0
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
