"""The job network's pieces in-process: framing that cannot be forged or replayed, a coordinator that a
stranger cannot stop, the rules for the verdict and the common resume step."""

import json
import socket
import threading
import time

import pytest

from launcher.execute.job import protocol
from launcher.execute.job.coordinator import Coordinator, job_verdict
from launcher.execute.job.member import Member
from launcher.execute.job.restarts import common_step

SECRET = protocol.job_secret({}, "table", "run")


def joined_pair():
    client, server = protocol.Channel("c"), protocol.Channel("s")
    client.key = server.key = protocol.session_key(SECRET, "sn", "cn")
    return client, server


def test_signed_lines_are_read_once_in_order_and_only_in_their_direction():
    client, server = joined_pair()
    first, second = client.encode({"t": "hb"}), client.encode({"t": "stop", "attempt": 0})
    assert server.feed(first + second[:5]) == [{"t": "hb"}]
    assert server.feed(second[5:]) == [{"t": "stop", "attempt": 0}]
    with pytest.raises(ValueError, match="wrong signature"):
        server.feed(first)   # a replayed line
    back = protocol.Channel("c")
    back.key = client.key
    with pytest.raises(ValueError, match="wrong signature"):
        back.feed(client.encode({"t": "hb"}))   # the member's own line sent back to it


def test_a_line_signed_with_another_secret_or_altered_is_refused():
    client, server = joined_pair()
    line = client.encode({"t": "stop", "attempt": 0, "cause": {"rank": 1}})
    with pytest.raises(ValueError):
        server.feed(line.replace(b'"rank":1', b'"rank":2'))
    stranger = protocol.Channel("c")
    stranger.key = protocol.session_key(protocol.job_secret({}, "table", "other run"), "sn", "cn")
    with pytest.raises(ValueError):
        joined_pair()[1].feed(stranger.encode({"t": "stop"}))


def test_the_secret_comes_from_the_environment_else_from_the_table_and_run_id():
    assert protocol.job_secret({"DLAUNCH_JOB_SECRET": "x"}, "a", "r") == \
        protocol.job_secret({"DLAUNCH_JOB_SECRET": "x"}, "b", "s")
    assert protocol.job_secret({}, "a", "r") != protocol.job_secret({}, "a", "s")
    assert protocol.job_secret({}, "a", "r") != protocol.job_secret({"DLAUNCH_JOB_SECRET": "x"}, "a", "r")


@pytest.fixture
def coordinator():
    listener = protocol.bind_address("127.0.0.1", 0)
    served = Coordinator(listener, SECRET, "run", ["h0", "h1"], max_restarts=0, host_timeout=5, join_timeout=30)
    done = threading.Event()
    thread = threading.Thread(target=served.serve_forever, args=(done.is_set,), daemon=True)
    thread.start()
    yield served, listener.getsockname()[1]
    done.set()
    thread.join(timeout=10)


def read_lines(sock, count):
    data = b""
    sock.settimeout(5)
    while data.count(b"\n") < count:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return [json.loads(line.split(b" ", 1)[1]) for line in data.splitlines()]


def test_a_stranger_who_speaks_before_joining_is_dropped_and_stops_nothing(coordinator):
    served, port = coordinator
    with socket.create_connection(("127.0.0.1", port)) as sock:
        assert read_lines(sock, 1)[0]["t"] == "challenge"
        sock.sendall(b'- {"t":"stop","attempt":0,"cause":{"kind":"failed"}}\n')
        sock.settimeout(5)
        assert sock.recv(100) == b""   # dropped
    assert served.stop is None and not served.peers


def test_a_stranger_with_a_wrong_proof_is_refused(coordinator):
    served, port = coordinator
    with socket.create_connection(("127.0.0.1", port)) as sock:
        challenge = read_lines(sock, 1)[0]
        guess = protocol.proof(b"a guess", "join", challenge["nonce"], "cn", 1, "run")
        sock.sendall(b"- " + json.dumps({"t": "join", "index": 1, "run_id": "run", "nonce": "cn",
                                         "proof": guess}).encode() + b"\n")
        assert read_lines(sock, 1)[0]["t"] == "refused"
    assert served.stop is None and not served.ever_joined


def test_members_join_hear_a_stop_and_one_verdict(coordinator):
    import selectors

    served, port = coordinator
    heard = {0: [], 1: []}
    selector = selectors.DefaultSelector()
    members = [Member("127.0.0.1", port, SECRET, "run", i, host_timeout=5, join_timeout=10,
                      deliver=heard[i].append, master_name="h0") for i in (0, 1)]
    for member in members:
        member.register(selector)

    def pump(until, limit=10.0):
        deadline = time.monotonic() + limit
        while not until() and time.monotonic() < deadline:
            timeout = min(m.tick() for m in members)
            ready = selector.select(min(timeout, 0.05))
            by_fd = {m.sock.fileno(): m for m in members if m.sock is not None}
            for key, mask in ready:
                if key.fd in by_fd:
                    by_fd[key.fd].on_ready(mask)

    pump(lambda: all(m.state == "joined" for m in members))
    members[1].send({"t": "stop", "attempt": 0, "cause": {"kind": "failed", "rank": 1, "exit_code": 3}})
    pump(lambda: heard[0])
    assert heard[0][0]["t"] == "stop" and heard[0][0]["cause"]["host"] == "h1"
    for index, code in ((0, 75), (1, 3)):
        members[index].send({"t": "result", "attempt": 0, "exit_code": code})
    pump(lambda: heard[1])
    assert heard[1][0]["t"] == "verdict" and heard[0][-1] == heard[1][0]
    assert (heard[1][0]["exit_code"], heard[1][0]["host_exit_codes"], heard[1][0]["restart"]) == (
        3, {"h0": 75, "h1": 3}, False)


def test_the_verdict_rule_and_the_common_step():
    assert job_verdict(None, {0: {"exit_code": 0}, 1: {"exit_code": 0}}, {}, ["a", "b"])["status"] == "succeeded"
    lost = job_verdict({"kind": "lost", "exit_code": 69}, {0: {"exit_code": 69}}, {1: "gone"}, ["a", "b"])
    assert (lost["status"], lost["exit_code"], lost["lost_hosts"]) == ("failed", 69, {"b": "gone"})
    assert job_verdict({"kind": "interrupted", "exit_code": 143}, {}, {}, ["a"])["status"] == "interrupted"
    assert common_step([["s-1_1", "s-1_2", "s-2_1"], ["s-1_1", "s-1_2"], ["s-1_2", "s-2_1"]]) == "s-1_2"
    assert common_step([["s-1_1"], []]) is None and common_step([]) is None


def test_a_connection_that_never_joins_is_dropped_after_one_host_timeout():
    listener = protocol.bind_address("127.0.0.1", 0)
    served = Coordinator(listener, SECRET, "run", ["h0", "h1"], max_restarts=0, host_timeout=0.5, join_timeout=30)
    done = threading.Event()
    thread = threading.Thread(target=served.serve_forever, args=(done.is_set,), daemon=True)
    thread.start()
    try:
        with socket.create_connection(("127.0.0.1", listener.getsockname()[1])) as sock:
            assert read_lines(sock, 1)[0]["t"] == "challenge"
            started = time.monotonic()
            assert sock.recv(100) == b""   # silence: dropped
            assert time.monotonic() - started < 3
    finally:
        done.set()
        thread.join(timeout=10)


def test_the_welcome_and_a_signed_message_in_one_read_are_both_understood():
    """The coordinator sends "welcome" and, to a host joining a job that is already stopping, a signed "stop"
    at once: read together, the second line is checked with the key the first one made."""
    coordinator, member = protocol.Channel("s"), protocol.Channel("c")
    welcome = coordinator.encode({"t": "welcome"})
    coordinator.key = protocol.session_key(SECRET, "sn", "cn")
    data = welcome + coordinator.encode({"t": "stop", "attempt": 0})
    got = []
    for message in member.read(data):
        got.append(message)
        if message["t"] == "welcome":
            member.key = protocol.session_key(SECRET, "sn", "cn")
    assert got == [{"t": "welcome"}, {"t": "stop", "attempt": 0}]


def test_a_verdict_delivered_with_the_signal_that_ends_the_wait_is_still_taken():
    """srun ends a job with SIGTERM the moment the first host exits, just after the coordinator sent the verdict
    to every host: a host whose wait wakes on that signal while the network thread is handing it the verdict
    (here: delivered during the wait's second look) keeps the job's verdict instead of ending without it."""
    from launcher.execute.job.link import JobLink

    link = JobLink(hosts=["a", "b"], index=1, master_index=0, address="127.0.0.1", port=1, secret=SECRET,
                   run_id="run", host_timeout=15, join_timeout=180, max_restarts=0)
    verdict = {"t": "verdict", "attempt": 0, "status": "failed", "exit_code": 3, "restart": False}
    looks = []

    def drain(sock):   # the network thread's delivery, racing the signal: seen from the second look on
        looks.append(sock)
        if len(looks) == 2:
            link._events.append(verdict)

    link._drain = drain
    signal_r, signal_w = socket.socketpair()
    signal_w.send(b"x")   # a signal is already waiting when the wait begins

    class Failed:
        exit_code = 3

    try:
        assert link.finish(Failed(), signal_r.fileno()) == verdict
    finally:
        for sock in (signal_r, signal_w, link._main_r, link._thread_w, link._thread_r, link._main_w):
            sock.close()
