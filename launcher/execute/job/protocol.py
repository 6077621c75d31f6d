"""The wire between the hosts of one job: framing, the per-job secret, the handshake, the exit codes.

Every message is one line: ``<mac> <json>``. Before the handshake the mac is ``-`` (the challenge and the
join carry their own proofs); after it, ``mac`` is HMAC-SHA256 (first 16 bytes, hex) under a session key
both ends derive from the job's secret and the two nonces, over the direction, a sequence number and the
JSON text, so a line cannot be forged, replayed or moved to the other direction by anyone without the
secret. Nothing is encrypted: the messages say which rank failed, nothing more.

Handshake (coordinator S, member C)::

    S -> C  {"t": "challenge", "nonce": sn, "proto": 1}
    C -> S  {"t": "join", "host", "index", "run_id", "nonce": cn, "proof": HMAC(secret, join|sn|cn|index|run_id)}
    S -> C  {"t": "welcome", "proof": HMAC(secret, welcome|sn|cn)}      or {"t": "refused", "why": ...}
            (a host replaced by a spare, in its cooldown: the refusal also says "excluded_until": epoch)

The member checks the welcome proof too: a process without the secret can neither join the job nor pose
as its coordinator and stop it. The welcome carries the job's current attempt: a host that joins after the
job restarted catches up (``link.JobLink``).

Before the handshake a peer is a stranger and gets a small budget: lines of at most ``FIRST_LINE`` bytes,
JSON nested no deeper than ``MAX_DEPTH`` (checked before parsing, so no input can recurse the parser), and
the coordinator's own limits on strangers (``strangers.py``). After it, lines may hold up to ``MAX_LINE``
bytes; a hang's stacks travel one rank and one ``STACK_PART`` at a time, so a report of any size arrives.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets

from launcher.base.border import parse_json
from launcher.contract import JOB_SECRET_ENV
from launcher.errors import UsageError

PROTOCOL = 1
FIRST_LINE = 4 << 10     # a line before the handshake (a join is about 400 bytes): longer is not the protocol
MAX_LINE = 1 << 20       # a line after it; longer drops the connection
MAX_DEPTH = 4            # the deepest message (a verdict's root cause) nests 2 levels
MAC_BYTES = 16
STACK_PART = 128 << 10   # characters of a stack per message: even escaped six-fold it stays under MAX_LINE

# What a scheduler gives every host of one job and a stranger on the network does not see: the AscendJob's
# uid (ascend-operator's env.go sets MINDX_TASK_ID to string(job.UID)), Slurm's job id (known to the
# cluster's users and guessable: said so in docs/multi-host.md).
SCHEDULER_SECRETS = (("MINDX_TASK_ID", "the AscendJob's uid", True), ("SLURM_JOB_ID", "the Slurm job id", False))


def job_secret(environ, table_text: str, run_id: str) -> bytes:
    """``DLAUNCH_JOB_SECRET`` when set (a Kubernetes secret, a Slurm job's environment, every host's
    own environment); otherwise derived from what every host of the job already holds: the rank table's
    servers and ranks (``link.job_identity``), the run id, and the scheduler's values (SCHEDULER_SECRETS)."""
    given = environ.get(JOB_SECRET_ENV)
    if given:
        return hashlib.sha256(b"dlaunch-job-secret\0" + given.encode()).digest()
    scheduler = "".join(f"\0{name}={environ[name]}" for name, _, _ in SCHEDULER_SECRETS if environ.get(name))
    return hashlib.sha256(b"dlaunch-job-table\0" + table_text.encode() + b"\0" + run_id.encode()
                          + scheduler.encode()).digest()


def open_secret_warning(environ, where: str) -> str | None:
    """The line a multi-host job says first when strangers who can reach its job port could join it: the
    secret is derived and nothing in it is private (None when it is)."""
    if environ.get(JOB_SECRET_ENV):
        return None
    used = [(what, private) for name, what, private in SCHEDULER_SECRETS if environ.get(name)]
    if any(private for _, private in used):
        return None
    known = "the rank table's servers, the run id" + "".join(f" and {what}" for what, _ in used)
    return (f"warning: the job's link on {where} is open to anyone who can reach it and knows {known}: they can "
            f"join or stop this job. Set {JOB_SECRET_ENV} to the same random value on every host "
            f"(docs/multi-host.md, 'The job's secret')")


def endpoint(host, port) -> str:
    """``host:port`` as a person writes it: ``[::1]:29501`` for an IPv6 address."""
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def new_nonce() -> str:
    return secrets.token_hex(16)


def proof(secret: bytes, *parts) -> str:
    return hmac.new(secret, "|".join(map(str, parts)).encode(), hashlib.sha256).hexdigest()


def session_key(secret: bytes, server_nonce: str, client_nonce: str) -> bytes:
    return hmac.new(secret, f"session|{server_nonce}|{client_nonce}".encode(), hashlib.sha256).digest()


class Channel:
    """One end of a connection's framing: buffers bytes in, yields verified messages, frames messages out."""

    def __init__(self, outgoing: str):
        self.key: bytes | None = None
        self.out_dir = outgoing                       # "c" (member to coordinator) or "s"
        self.in_dir = "s" if outgoing == "c" else "c"
        self.sent = self.received = 0
        self._buffer = b""

    def encode(self, message: dict) -> bytes:
        body = json.dumps(message, separators=(",", ":"), default=str)
        if self.key is None:
            return b"- " + body.encode() + b"\n"
        mac = self._mac(self.out_dir, self.sent, body)
        self.sent += 1
        return f"{mac} {body}\n".encode()

    def _mac(self, direction: str, seq: int, body: str) -> str:
        assert self.key is not None
        return hmac.new(self.key, f"{direction}|{seq}|{body}".encode(), hashlib.sha256).hexdigest()[:2 * MAC_BYTES]

    def feed(self, data: bytes) -> list[dict]:
        """The whole messages in ``data`` (and what came before); raises ValueError on anything not the protocol."""
        return list(self.read(data))

    @property
    def line_limit(self) -> int:
        return FIRST_LINE if self.key is None else MAX_LINE

    def read(self, data: bytes):
        """``feed`` one message at a time: the next line is checked only once the caller has handled this one,
        so the handshake's last message can set the key that signs the next (a "welcome" and a "stop" that
        arrive in one read)."""
        self._buffer += data
        while True:
            end = self._buffer.find(b"\n", 0, self.line_limit + 1)
            if end < 0:
                if len(self._buffer) > self.line_limit:
                    raise ValueError(f"a line longer than the protocol allows ({self.line_limit} bytes)")
                return
            line, self._buffer = self._buffer[:end], self._buffer[end + 1:]
            mac, _, body = line.decode("utf-8", "replace").partition(" ")
            if self.key is not None:
                if not hmac.compare_digest(mac, self._mac(self.in_dir, self.received, body)):
                    raise ValueError("a message with a wrong signature")
                self.received += 1
            elif mac != "-":
                raise ValueError("a signed message before the handshake")
            yield parse(body)


def parse(body: str) -> dict:
    """One message's JSON through the border (its nesting checked first, without recursion: no line can exhaust
    the parser's stack, whoever sent it); a ValueError (``Refused``) for anything else."""
    message = parse_json(body, "a message", max_depth=MAX_DEPTH, constants=True)
    if not isinstance(message, dict) or not isinstance(message.get("t"), str):
        raise ValueError("not a message of the protocol")
    return message


def stack_parts(stacks: dict[str, str], attempt: int):
    """A hang's stacks (rank -> text) as messages of at most STACK_PART characters each, in order."""
    for rank, text in stacks.items():
        for start in range(0, max(len(text), 1), STACK_PART):
            yield {"t": "stack", "attempt": attempt, "rank": rank, "text": text[start:start + STACK_PART]}


def receive(sock) -> bytes | None:
    """What a non-blocking socket has for us: None when nothing yet, b"" when the other side is gone."""
    try:
        return sock.recv(65536)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return b""


_HELD: dict = {}   # (address, port) -> a listening socket node_index took for this host's coordinator


def hold_listener(address: str, port: int, sock) -> None:
    """Keep ``sock`` (listening on the job's port) for this process's coordinator (``bind_address``)."""
    _HELD[(address, port)] = sock


def listen_here(address: str, port: int):
    """(a listening socket on exactly ``address``:``port``, or None; whether the port is taken on this host):
    None when the address is not this host's, or the port is taken (another dlaunch of the job listens there,
    or a socket that never will: an outgoing connection's port).

    A name's addresses are tried in order only past those this host does not have: where the port is taken
    on one, it is the job's (``localhost`` as ``::1`` and ``127.0.0.1``: a second dlaunch that listened on the
    other would be node 0 too, and the two would each wait for the other)."""
    import errno
    import socket

    try:
        info = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None, False
    for family, kind, proto, _, where in info:
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(where)
            sock.listen(1024)   # two binds of one port can both succeed (SO_REUSEADDR): the first to listen wins
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                return None, True
            continue
        sock.setblocking(False)
        return sock, False
    return None, False


def bind_address(address: str, port: int):
    """The coordinator's listening socket on the job's master address, an IPv4 or IPv6 address or a name (all
    interfaces of its family when the address is not this host's: e.g. a name that resolves elsewhere inside
    a pod); UsageError when the port is taken. The socket ``hold_listener`` kept, when there is one."""
    import errno
    import socket

    held = _HELD.pop((address, port), None)
    if held is not None:
        return held

    try:
        family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[0][0]
    except (OSError, UnicodeError):
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
    for host in (address, ""):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
                continue
            raise UsageError(f"cannot listen on {endpoint(address, port)} for the job's coordinator (--job-port): "
                             f"{exc.strerror or exc}") from None
        sock.listen(1024)
        sock.setblocking(False)
        return sock
    raise UsageError(f"cannot listen on {endpoint(address, port)} for the job's coordinator: the address is not this "
                     f"host's")
