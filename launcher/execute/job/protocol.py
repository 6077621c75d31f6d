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

The member checks the welcome proof too: a process without the secret can neither join the job nor pose
as its coordinator and stop it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets

from launcher.contract import JOB_SECRET_ENV
from launcher.errors import UsageError

PROTOCOL = 1
MAX_LINE = 1 << 20                  # a line longer than this is not the protocol: the connection is dropped
MAC_BYTES = 16


def job_secret(environ, table_text: str, run_id: str) -> bytes:
    """``DLAUNCH_JOB_SECRET`` when set (a Kubernetes secret, a Slurm job's environment, every host's
    own environment); otherwise derived from what every host of the job already holds and a stranger on the network
    does not: the rank table's servers and ranks (``link.job_identity``) and the run id."""
    given = environ.get(JOB_SECRET_ENV)
    if given:
        return hashlib.sha256(b"dlaunch-job-secret\0" + given.encode()).digest()
    return hashlib.sha256(b"dlaunch-job-table\0" + table_text.encode() + b"\0" + run_id.encode()).digest()


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

    def read(self, data: bytes):
        """``feed`` one message at a time: the next line is checked only once the caller has handled this one,
        so the handshake's last message can set the key that signs the next (a "welcome" and a "stop" that
        arrive in one read)."""
        self._buffer += data
        if len(self._buffer) > MAX_LINE and b"\n" not in self._buffer:
            raise ValueError("a line longer than the protocol allows")
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            mac, _, body = line.decode("utf-8", "replace").partition(" ")
            if self.key is not None:
                if not hmac.compare_digest(mac, self._mac(self.in_dir, self.received, body)):
                    raise ValueError("a message with a wrong signature")
                self.received += 1
            elif mac != "-":
                raise ValueError("a signed message before the handshake")
            message = json.loads(body)
            if not isinstance(message, dict) or not isinstance(message.get("t"), str):
                raise ValueError("not a message of the protocol")
            yield message


def receive(sock) -> bytes | None:
    """What a non-blocking socket has for us: None when nothing yet, b"" when the other side is gone."""
    try:
        return sock.recv(65536)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return b""


def bind_address(address: str, port: int):
    """The coordinator's listening socket on the job's master address (all interfaces when the address is
    not this host's: e.g. a name that resolves elsewhere inside a pod); UsageError when the port is taken."""
    import errno
    import socket

    for host in (address, ""):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
                continue
            raise UsageError(f"cannot listen on {address}:{port} for the job's coordinator (--job-port): "
                             f"{exc.strerror or exc}") from None
        sock.listen(1024)
        sock.setblocking(False)
        return sock
    raise UsageError(f"cannot listen on {address}:{port} for the job's coordinator: the address is not this "
                     f"host's")
