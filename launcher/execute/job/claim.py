"""``--nnodes MIN:MAX`` without ``--node-rank``: a host's node index given on arrival, as torchrun's c10d
rendezvous gives node ranks (PyTorch's own test_launch_elastic* start agents that way).

The host that can listen on the job's port at the master address itself (the rendezvous endpoint is one of its
addresses, and no other dlaunch there listens yet) is node 0 and runs the job's coordinator: it keeps that
socket for it (``protocol.hold_listener``), so no other host can take the part meanwhile. Every other host asks
that coordinator for an index over a short connection of the job's protocol: it proves the job's secret, is
given the lowest free index (kept for it for the join timeout), and then joins the job as that node.
"""

from __future__ import annotations

import socket
import time

from launcher.errors import UsageError
from launcher.execute.job import protocol
from launcher.execute.job.protocol import Channel

RETRY_SECONDS = 0.1
TAKEN_SECONDS = 2.0   # the job's port taken here, yet refusing connections this long: no dlaunch holds it


def _taken(address: str, port: int) -> str:
    return (f"the job's port {protocol.endpoint(address, port)}, where its coordinator must listen, is taken "
            f"on this host by a socket that does not listen (an outgoing connection's port?): no dlaunch can "
            f"coordinate the job there; give every host the same free --job-port, or another rendezvous port (the "
            f"job's link takes the one after it)")


def node_index(address: str, port: int, secret: bytes, run_id: str, timeout: float) -> int:
    """This host's node index: 0 when it listens for the job (and so runs its coordinator), else the one the
    coordinator gives; UsageError when none is given within ``timeout``, or at once (TAKEN_SECONDS) when the
    port is taken on this host by a socket that refuses connections, which no dlaunch's would: torchrun's
    ``--rdzv-endpoint`` port was checked free, the next one (the job's link) was not."""
    listener, taken_here = protocol.listen_here(address, port)
    if listener is not None:
        protocol.hold_listener(address, port, listener)
        return 0
    deadline = time.monotonic() + timeout
    refused_since = None
    why = "no answer"
    while time.monotonic() < deadline:
        try:
            return _ask(address, port, secret, run_id, deadline)
        except ConnectionRefusedError as exc:
            why = exc.strerror or str(exc)
            refused_since = refused_since or time.monotonic()
            if taken_here and time.monotonic() - refused_since >= TAKEN_SECONDS:
                listener, taken_here = protocol.listen_here(address, port)   # freed meanwhile: this host's now
                if listener is not None:
                    protocol.hold_listener(address, port, listener)
                    return 0
                if taken_here:
                    raise UsageError(_taken(address, port)) from None
            time.sleep(RETRY_SECONDS)
        except OSError as exc:   # not listening yet, or gone mid-way: again, until the deadline
            why, refused_since = exc.strerror or str(exc), None
            time.sleep(RETRY_SECONDS)
    raise UsageError(f"no node index for this host from the job's coordinator at {protocol.endpoint(address, port)} "
                     f"within {timeout:g} s (--join-timeout): {why}")


def _ask(address: str, port: int, secret: bytes, run_id: str, deadline: float) -> int:
    channel = Channel("c")
    nonce = protocol.new_nonce()
    with socket.create_connection((address, port), timeout=max(0.1, deadline - time.monotonic())) as sock:
        messages = _messages(sock, channel, deadline)
        challenge = next(messages)
        if challenge.get("t") != "challenge":
            raise UsageError(f"the job's coordinator at {protocol.endpoint(address, port)} spoke out of protocol")
        server_nonce = str(challenge["nonce"])
        sock.sendall(channel.encode({"t": "join", "index": None, "run_id": run_id, "nonce": nonce,
                                     "proof": protocol.proof(secret, "join", server_nonce, nonce, None, run_id)}))
        answer = next(messages)
    if answer.get("t") == "refused":
        raise UsageError(f"the job's coordinator at {protocol.endpoint(address, port)} gave this host no node index: "
                         f"{answer.get('why')}")
    index = answer.get("index")
    expected = protocol.proof(secret, "assigned", server_nonce, nonce, index)
    if answer.get("t") != "assigned" or not isinstance(index, int) or \
            not protocol.hmac.compare_digest(str(answer.get("proof")), expected):
        raise UsageError(f"{protocol.endpoint(address, port)} answered without this job's secret: not its coordinator")
    return index


def _messages(sock: socket.socket, channel: Channel, deadline: float):
    while True:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        data = sock.recv(65536)
        if not data:
            raise ConnectionResetError("the job's coordinator closed the connection")
        yield from channel.read(data)
