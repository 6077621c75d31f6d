"""A host's persisted memory steps kept by another host of the job, so a lost host's work outlives it.

With ``--memory-ckpt`` on a job of several hosts, each host's dlaunch sends every step it persists from a local
rank's memory (every ``--memory-persist-every``-th memory save, and the newest at the end of an attempt) to its
*buddy*, the next host of the job's active hosts in order (the last host's buddy is the first), which keeps the
newest ``KEEP`` copies per rank in its own memory area (several: the lost host's ranks may have been one persist
apart when it died, and the job needs a step every rank has). When a host is lost and a spare takes its place,
the spare asks the lost host's buddy for those copies before it reports what it can take over, writes them into
its ranks' checkpoint directories, and the job resumes from the newest step every slot has: without a shared filesystem,
and with nothing asked of the lost host. What is sent is a step every host persisted (the same step on every
rank of a synchronous job), so the survivors have it too; a lost host costs at most one persist interval.

The wire is the job's (``protocol``): lines ``<mac> <json>``, a challenge and proofs under the job's secret, then
messages signed with a session key. A copy travels as a ``copy`` line (answered ``ready``, or ``refused`` before
a byte moves), the file's bytes, and an ``end`` line carrying an HMAC of those bytes under the session key, so
neither the bytes nor their name can be forged or swapped; the receiver writes them into a temporary, checks the
HMAC, and only then replaces that rank's copy. Bounds: a copy larger than the receiver's budget per rank is
refused before a byte is read; the sender paces itself (``rate`` bytes per second) from a thread of dlaunch's,
reading the persisted file, never a rank's slot: training never waits for it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import socket
import threading
import time

from launcher.base import border, waiting
from launcher.checkpoint import names as ckptnames
from launcher.execute.job import protocol

CHUNK = 1 << 20
DEFAULT_RATE = 1 << 30          # bytes per second a host sends its buddy at most (1 GiB/s)
TIMEOUT = 10.0                   # seconds any one read or write on a buddy connection may take
HANDSHAKE_SECONDS = 10.0         # a peer proves it holds the job's secret within this, or is cut off
KEEP = 3                         # steps a buddy keeps per rank: a step every rank of the lost host reached
CONNECTIONS = 8                  # connections a host's buddy keeper answers at once
FETCH_SECONDS = 300.0            # a spare fetches a lost host's copies within this, all its ranks together
CLOSE_SECONDS = 30.0             # at the end, the newest steps still queued are sent within this, or given up
BUDDY_DIR = "buddy"              # in the receiving host's memory area: rank_NNN/<checkpoint name>


def port_of(job_port: int) -> int:
    """The port a host's buddy keeper listens on: the one after the job's port (``--job-port``), on the host's own
    address (its ``server_id``)."""
    return job_port % 65535 + 1


def buddy_of(active: list[str], host: str) -> str | None:
    """The host that keeps ``host``'s copies: the next active host in order, None for a job of one host."""
    if host not in active or len(active) < 2:
        return None
    return active[(active.index(host) + 1) % len(active)]


# ---------------------------------------------------------------------------------------------------- the wire


class Interrupted(ConnectionError):
    """A stop signal came while a spare fetched copies: it stops fetching and obeys it."""


class _Line:
    """Lines of the job's protocol over a blocking socket, and raw bytes between them. Every read waits through
    ``waiting.ready_fds``: until the line's ``deadline`` (the whole exchange's, not one read's) and, with a
    ``stop_fd``, until a stop signal makes that descriptor readable (it is left unread, for its owner)."""

    def __init__(self, sock: socket.socket, outgoing: str, deadline: float | None = None, stop_fd: int | None = None):
        self.sock, self.channel, self.pending = sock, protocol.Channel(outgoing), b""
        self.deadline = deadline   # while set, a receive past it ends the connection
        self.stop_fd = stop_fd

    def _recv(self, size: int) -> bytes:
        if self.deadline is not None or self.stop_fd is not None:
            fds = [self.sock.fileno()] + ([self.stop_fd] if self.stop_fd is not None else [])
            ready = waiting.ready_fds(fds, self.deadline)
            if self.stop_fd is not None and self.stop_fd in ready:
                raise Interrupted("a stop signal came")
            if not ready:
                raise ConnectionError("the peer took too long")
        return self.sock.recv(size)

    def send(self, message: dict) -> None:
        self.sock.sendall(self.channel.encode(message))

    def receive(self) -> dict:
        if self.pending:   # what came after the last line and was not raw bytes
            self.channel._buffer, self.pending = self.pending + self.channel._buffer, b""   # noqa: SLF001
        while True:
            for message in self.channel.read(b""):
                self.pending = self.channel._buffer   # noqa: SLF001 (raw bytes may follow this line)
                self.channel._buffer = b""             # noqa: SLF001
                return message
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise ConnectionError("the peer took too long to prove it belongs to the job")
            data = self._recv(65536)
            if not data:
                raise ConnectionError("the buddy closed the connection")
            self.channel._buffer += data               # noqa: SLF001

    def read_exactly(self, length: int, into) -> bytes:
        """``length`` raw bytes into ``into(chunk)``; returns their HMAC under the session key."""
        mac = hmac.new(self.channel.key or b"", digestmod=hashlib.sha256)
        left = length
        if self.pending:
            chunk, self.pending = self.pending[:left], self.pending[left:]
            mac.update(chunk)
            into(chunk)
            left -= len(chunk)
        while left > 0:
            chunk = self._recv(min(CHUNK, left))
            if not chunk:
                raise ConnectionError("the buddy closed the connection in the middle of a copy")
            mac.update(chunk)
            into(chunk)
            left -= len(chunk)
        self.channel._buffer = self.pending + self.channel._buffer   # noqa: SLF001
        self.pending = b""
        return mac.digest()


def _handshake_client(line: _Line, secret: bytes, host: str) -> None:
    challenge = line.receive()
    if challenge.get("t") != "challenge" or not isinstance(challenge.get("nonce"), str):
        raise ConnectionError("the buddy did not speak dlaunch's protocol")
    nonce = protocol.new_nonce()
    line.send({"t": "hello", "host": host, "nonce": nonce, "proof": protocol.proof(secret, "buddy", challenge["nonce"],
                                                                                  nonce, host)})
    welcome = line.receive()
    expected = protocol.proof(secret, "buddy-welcome", challenge["nonce"], nonce)
    if welcome.get("t") != "welcome" or not hmac.compare_digest(str(welcome.get("proof")), expected):
        raise ConnectionError("the buddy could not prove it belongs to this job")
    line.channel.key = protocol.session_key(secret, challenge["nonce"], nonce)


def _handshake_server(line: _Line, secret: bytes) -> str:
    nonce = protocol.new_nonce()
    line.send({"t": "challenge", "nonce": nonce, "proto": protocol.PROTOCOL})
    hello = line.receive()
    client, host = hello.get("nonce"), hello.get("host")
    if hello.get("t") != "hello" or not isinstance(client, str) or not isinstance(host, str) or \
            not hmac.compare_digest(str(hello.get("proof")), protocol.proof(secret, "buddy", nonce, client, host)):
        raise ConnectionError("a connection without the job's secret")
    line.send({"t": "welcome", "proof": protocol.proof(secret, "buddy-welcome", nonce, client)})
    line.channel.key = protocol.session_key(secret, nonce, client)
    return host


def _connect(address: str, port: int, secret: bytes, host: str, deadline: float | None = None,
             stop_fd: int | None = None) -> _Line:
    left = TIMEOUT if deadline is None else max(0.001, min(TIMEOUT, deadline - time.monotonic()))
    sock = socket.create_connection((address, port), timeout=left)
    line = _Line(sock, "c", deadline, stop_fd)
    try:
        _handshake_client(line, secret, host)
    except BaseException:
        sock.close()
        raise
    return line


def _send_bytes(line: _Line, fd: int, length: int, rate: float, give_up=None) -> bytes:
    mac = hmac.new(line.channel.key or b"", digestmod=hashlib.sha256)
    sent, started = 0, time.monotonic()
    while sent < length:
        if give_up is not None and give_up():
            raise ConnectionError("given up: dlaunch is ending")
        chunk = os.pread(fd, min(CHUNK, length - sent), sent)
        if not chunk:
            raise OSError(f"the slot ended {length - sent} bytes short")
        line.sock.sendall(chunk)
        mac.update(chunk)
        sent += len(chunk)
        ahead = sent / rate - (time.monotonic() - started)
        if ahead > 0:
            time.sleep(ahead)   # the bandwidth bound: this thread only, never a rank
    return mac.digest()


# ---------------------------------------------------------------------------------------------------- sending


def push(address: str, port: int, secret: bytes, host: str, rank: int, path: str, rate: float = DEFAULT_RATE,
         give_up=None) -> None:
    """Send rank ``rank``'s checkpoint file ``path`` (a step dlaunch persisted from its memory) to the buddy at
    ``address``:``port``, which keeps it among that rank's newest copies. Raises OSError/ConnectionError when the buddy
    cannot be reached, refuses it (over its budget) or does not confirm it kept it whole."""
    name = os.path.basename(path)
    parsed = ckptnames.parse_dlaunch(name)
    if parsed is None:
        raise ValueError(f"{path} is not a checkpoint dlaunch names")
    fd = border.open_fd(path)   # the rank's checkpoint directory: a link or a FIFO put there is not sent
    if fd is None:
        raise OSError(f"{path} is not a regular file")
    try:
        length = os.fstat(fd).st_size
        line = _connect(address, port, secret, host)
        try:
            line.send({"t": "copy", "rank": rank, "name": name, "epoch": parsed[1], "step": parsed[2],
                       "length": length})
            ready = line.receive()   # refused before a byte is sent (over the budget), or ready
            if ready.get("t") != "ready":
                raise ConnectionError(f"the buddy refused the copy: {str(ready.get('why'))[:200]}")
            digest = _send_bytes(line, fd, length, rate, give_up)
            line.send({"t": "end", "mac": digest.hex()})
            answer = line.receive()
        finally:
            line.sock.close()
    finally:
        os.close(fd)
    if answer.get("t") != "kept":
        raise ConnectionError(f"the buddy did not keep the copy: {str(answer.get('why'))[:200]}")


def pull(address: str, port: int, secret: bytes, host: str, rank: int, into: str, deadline: float | None = None,
         stop_fd: int | None = None) -> list[str]:
    """Ask the buddy at ``address``:``port`` for the copies it keeps of rank ``rank``'s steps and write them into the
    checkpoint directory ``into`` (store.py's guarantees: each whole or absent); returns their paths, oldest first
    (none when the buddy has none). ConnectionError past ``deadline`` (``time.monotonic()``), ``Interrupted`` as
    soon as ``stop_fd`` is readable (a stop signal)."""
    from launcher.checkpoint import store

    line = _connect(address, port, secret, host, deadline, stop_fd)
    written: list[str] = []
    try:
        line.send({"t": "get", "rank": rank})
        while True:
            answer = line.receive()
            if answer.get("t") == "none":   # the end of the copies
                return written
            copy = _checked_copy(answer, limit=None)

            def write(tmp: str, copy=copy) -> None:
                with open(tmp, "wb") as out:
                    digest = line.read_exactly(copy["length"], out.write)
                    end = line.receive()
                    if end.get("t") != "end" or not hmac.compare_digest(str(end.get("mac")), digest.hex()):
                        raise ConnectionError("the buddy's copy did not arrive whole")

            written.append(store.store_file(write, into, copy["name"], copy["prefix"]))
    finally:
        line.sock.close()


def _checked_copy(message: dict, limit: int | None) -> dict:
    """A ``copy`` message's fields, checked (it comes from another host: outside text, whatever its proof)."""
    if message.get("t") != "copy":
        raise ConnectionError(f"not a copy: {str(message.get('t'))[:40]}")
    name = border.expect(message.get("name"), str, "a copy's name")
    parsed = ckptnames.parse_dlaunch(name)
    if parsed is None or os.sep in name or name.startswith("."):
        raise border.Refused(f"a copy's name {name[:80]!r} is not a checkpoint's")
    fields = {key: border.whole_number(message.get(key), f"a copy's {key}", low=0)
              for key in ("rank", "epoch", "step", "length")}
    if (fields["epoch"], fields["step"]) != parsed[1:]:
        raise border.Refused(f"a copy's name {name} is not its step {fields['epoch']}_{fields['step']}")
    if limit is not None and fields["length"] > limit:
        raise border.Refused(f"a copy of {fields['length']} bytes is over the {limit} bytes a rank may keep here")
    return {**fields, "name": name, "prefix": parsed[0]}


class BuddySender:
    """This host's side of sending: one thread that sends each rank's newest persisted step to the buddy
    ``target()`` names at the time ((address, port), or None with no buddy), a newer step replacing one not yet
    sent. A buddy that cannot be reached is said once per failure run, and the next step tried again."""

    def __init__(self, target, secret: bytes, host: str, log, rate: float = DEFAULT_RATE):
        self.target, self.secret, self.host, self.log, self.rate = target, secret, host, log, rate
        self._queue: dict[int, str] = {}
        self._lock = threading.Condition()
        self._closed = False
        self._failing = False
        self._given_up = False   # close() waited long enough: the copy in flight stops at its next chunk
        self.sent: list[tuple[int, str]] = []   # (rank, file name) in the order the buddy kept them
        self.thread = threading.Thread(target=self._run, name="dlaunch-buddy-send", daemon=True)
        self.thread.start()

    def offer(self, rank: int, path: str) -> None:
        with self._lock:
            self._queue[rank] = path
            self._lock.notify()

    def close(self, timeout: float = CLOSE_SECONDS) -> None:
        """Send what is queued (a failure's newest steps) within ``timeout`` seconds, then stop: a buddy that
        stalls never holds dlaunch's exit (the copy in flight is given up, the buddy keeps no part of it)."""
        with self._lock:
            self._closed = True
            self._lock.notify()
        self.thread.join(timeout)
        if self.thread.is_alive():
            self._given_up = True
            self.log(f"gave up sending the newest steps to the buddy host after {timeout:.0f} s")

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closed:
                    self._lock.wait()
                if not self._queue or self._given_up:
                    return
                rank, path = self._queue.popitem()
            where = self.target()
            if where is None:
                continue
            try:
                push(where[0], where[1], self.secret, self.host, rank, path, self.rate, lambda: self._given_up)
            except (OSError, ConnectionError, ValueError) as exc:
                if not self._failing:
                    self.log(f"cannot send rank {rank}'s step {os.path.basename(path)} to its buddy host "
                             f"{protocol.endpoint(*where)}: {exc}; a lost host then resumes from an older step")
                self._failing = True
                continue
            self._failing = False
            self.sent.append((rank, os.path.basename(path)))


# ---------------------------------------------------------------------------------------------------- keeping


class BuddyKeeper:
    """This host's side: a listening thread that keeps the copies other hosts send (the newest KEEP per rank, under
    ``area/buddy/``) and hands them to a spare that asks."""

    def __init__(self, address: str, port: int, secret: bytes, area: str, budget: int,
                 handshake_seconds: float = HANDSHAKE_SECONDS):
        self.secret, self.budget, self.handshake_seconds = secret, budget, handshake_seconds
        self.directory = os.path.join(area, BUDDY_DIR)
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        self.sock = socket.create_server((address, port), reuse_port=False)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stopped = threading.Event()
        self._busy = threading.BoundedSemaphore(CONNECTIONS)
        self.thread = threading.Thread(target=self._serve, name="dlaunch-buddy", daemon=True)
        self.thread.start()

    def kept(self, rank: int) -> list[str]:
        """The paths of the copies kept for ``rank``, oldest step first."""
        folder = os.path.join(self.directory, f"rank_{rank:03d}")
        try:
            names = [(parsed[1:], name) for name in os.listdir(folder) if (parsed := ckptnames.parse_dlaunch(name))]
        except OSError:
            return []
        return [os.path.join(folder, name) for _, name in sorted(names)]

    def close(self) -> None:
        self.stopped.set()
        self.thread.join()
        self.sock.close()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            if self._busy.acquire(blocking=False):   # at most CONNECTIONS at once: a crowd is turned away
                threading.Thread(target=self._connection, args=(conn,), name="dlaunch-buddy-peer",
                                 daemon=True).start()
            else:
                conn.close()

    def _connection(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(TIMEOUT)
            with conn, contextlib.suppress(OSError, ValueError, ConnectionError):   # a bad peer loses its line
                self._answer(_Line(conn, "s"))
        finally:
            self._busy.release()

    def _answer(self, line: _Line) -> None:
        line.deadline = time.monotonic() + self.handshake_seconds   # a stranger trickling bytes is cut off
        _handshake_server(line, self.secret)
        line.deadline = None
        message = line.receive()
        if message.get("t") == "get":
            rank = border.whole_number(message.get("rank"), "a request's rank", low=0)
            self._give(line, rank)
        elif message.get("t") == "copy":
            try:
                copy = _checked_copy(message, self.budget)
            except border.Refused as refused:
                line.send({"t": "refused", "why": str(refused)})
                return
            line.send({"t": "ready"})
            self._keep(line, copy)

    def _keep(self, line: _Line, copy: dict) -> None:
        folder = os.path.join(self.directory, f"rank_{copy['rank']:03d}")
        os.makedirs(folder, mode=0o700, exist_ok=True)
        tmp = os.path.join(folder, f".incoming.{os.getpid()}.{threading.get_ident()}")
        try:
            with open(tmp, "wb") as out:
                digest = line.read_exactly(copy["length"], out.write)
            end = line.receive()
            whole = end.get("t") == "end" and hmac.compare_digest(str(end.get("mac")), digest.hex())
            if not whole:
                line.send({"t": "refused", "why": "the copy did not arrive whole"})
                return
            os.replace(tmp, os.path.join(folder, copy["name"]))
            for old in self.kept(copy["rank"])[:-KEEP]:   # the newest KEEP steps only
                os.unlink(old)
            line.send({"t": "kept"})
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def _give(self, line: _Line, rank: int) -> None:
        for path in self.kept(rank):
            name = os.path.basename(path)
            parsed = ckptnames.parse_dlaunch(name)
            if parsed is None:   # kept() lists checkpoint names only
                continue
            _, epoch, step = parsed
            with open(path, "rb") as source:
                length = os.fstat(source.fileno()).st_size
                line.send({"t": "copy", "rank": rank, "name": name, "epoch": epoch, "step": step, "length": length})
                digest = _send_bytes(line, source.fileno(), length, DEFAULT_RATE)
            line.send({"t": "end", "mac": digest.hex()})
        line.send({"t": "none"})
