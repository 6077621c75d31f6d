"""The job network's pieces in-process: framing that cannot be forged or replayed, a coordinator that a
stranger cannot stop, the rules for the verdict and the common resume step."""

import contextlib
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


@contextlib.contextmanager
def serving(secret=SECRET, hosts=("h0", "h1"), **options):
    """A coordinator of ``hosts`` (h0 and h1) on 127.0.0.1, served by a thread of its own: (it, its port)."""
    listener = protocol.bind_address("127.0.0.1", 0)
    options = {"max_restarts": 0, "host_timeout": 5, "join_timeout": 30, **options}
    served = Coordinator(listener, secret, "run", list(hosts), **options)
    done = threading.Event()
    thread = threading.Thread(target=served.serve_forever, args=(done.is_set,), daemon=True)
    thread.start()
    try:
        yield served, listener.getsockname()[1]
    finally:
        done.set()
        thread.join(timeout=10)


@pytest.fixture
def coordinator():
    with serving() as running:
        yield running


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
    for index in (0, 1):   # joining tells each member the job's attempt
        assert heard[index].pop(0) == {"t": "attempt", "attempt": 0, "resume_step": None}
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
    with serving(host_timeout=0.5) as (served, port):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            assert read_lines(sock, 1)[0]["t"] == "challenge"
            started = time.monotonic()
            assert sock.recv(100) == b""   # silence: dropped
            assert time.monotonic() - started < 3


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


# ---------------------------------------------------------------- what strangers and large reports meet


def test_nesting_is_checked_before_parsing_and_strings_do_not_count():
    with pytest.raises(ValueError, match="nested deeper"):
        protocol.parse('{"t":"x","a":[[[[1]]]]}')
    with pytest.raises(ValueError, match="nested deeper"):
        protocol.parse("[" * 100000)   # once a RecursionError that ended the coordinator's thread
    deep_text = '{"t":"stack","text":"' + "[{" * 5000 + '\\" ]"}'
    assert protocol.parse(deep_text)["t"] == "stack"
    verdict = {"t": "verdict", "root_cause": {"kind": "failed", "rank": 3}, "host_exit_codes": {"a": 0},
               "lost_hosts": {}, "absent_hosts": []}
    assert protocol.parse(json.dumps(verdict)) == verdict


def test_a_stranger_gets_short_lines_and_a_joined_host_long_ones():
    stranger = protocol.Channel("s")
    stranger.feed(b"- " + b"x" * 4000)   # no newline yet, under the limit: kept
    with pytest.raises(ValueError, match=r"longer than the protocol allows \(4096 bytes\)"):
        stranger.feed(b"x" * 200)
    client, server = joined_pair()
    big = {"t": "stack", "attempt": 0, "rank": "1", "text": "y" * (600 << 10)}
    assert server.feed(client.encode(big)) == [big]
    with pytest.raises(ValueError, match="longer than"):
        server.feed(b"z" * (protocol.MAX_LINE + 1))


def test_stacks_travel_in_parts_that_fit_a_line_however_they_escape():
    text = "\x01" * (protocol.STACK_PART + 10)   # each character escapes to six: the worst case
    parts = list(protocol.stack_parts({"3": text, "4": ""}, attempt=2))
    assert [(p["rank"], len(p["text"])) for p in parts] == [("3", protocol.STACK_PART), ("3", 10), ("4", 0)]
    client, server = joined_pair()
    for part in parts:
        line = client.encode(part)
        assert len(line) < protocol.MAX_LINE and server.feed(line) == [part]


def test_the_derived_secret_takes_what_the_scheduler_gives_and_says_when_the_link_is_open():
    public = protocol.job_secret({}, "a", "r")
    assert protocol.job_secret({"MINDX_TASK_ID": "5f0c-uid"}, "a", "r") != public
    assert protocol.job_secret({"SLURM_JOB_ID": "77"}, "a", "r") != public
    warning = protocol.open_secret_warning({}, "10.0.0.1:29501")
    assert warning.startswith("warning: the job's link on 10.0.0.1:29501 is open to anyone") and \
        "DLAUNCH_JOB_SECRET" in warning
    assert "the Slurm job id" in protocol.open_secret_warning({"SLURM_JOB_ID": "77"}, "h:1")   # guessable
    assert protocol.open_secret_warning({"MINDX_TASK_ID": "5f0c-uid"}, "h:1") is None
    assert protocol.open_secret_warning({"DLAUNCH_JOB_SECRET": "s"}, "h:1") is None


class Pump:
    """Members driven on the test's thread against a coordinator serving on its own."""

    def __init__(self, port, count, secret=SECRET, host_timeout=5, **kw):
        import selectors

        self.heard = {i: [] for i in range(count)}
        self.selector = selectors.DefaultSelector()
        self.members = [Member("127.0.0.1", port, secret, "run", i, host_timeout=host_timeout, join_timeout=10,
                               deliver=self.heard[i].append, master_name="h0", **kw) for i in range(count)]
        for member in self.members:
            member.register(self.selector)

    def until(self, done, limit=10.0):
        deadline = time.monotonic() + limit
        while not done() and time.monotonic() < deadline:
            timeout = min(m.tick() for m in self.members)
            ready = self.selector.select(min(timeout, 0.05))
            by_fd = {m.sock.fileno(): m for m in self.members if m.sock is not None}
            for key, mask in ready:
                if key.fd in by_fd:
                    by_fd[key.fd].on_ready(mask)
        return done()

    def kinds(self, index):
        return [event["t"] for event in self.heard[index]]


def test_a_stranger_who_derives_the_secret_from_public_values_cannot_join_an_ascendjob():
    """Once a stranger joined a job without DLAUNCH_JOB_SECRET as node1 and stopped it with an invented cause;
    in an AscendJob pod the secret also holds the job's uid (MINDX_TASK_ID), which no stranger sees."""
    secret = protocol.job_secret({"MINDX_TASK_ID": "4b1d2a7e-uid"}, "table", "run")
    with serving(secret) as (served, port):
        pump = Pump(port, 2, secret=SECRET)   # everything but the uid
        assert pump.until(lambda: all(m.state == "done" for m in pump.members))
        assert all("refused this host: wrong job secret" in pump.heard[i][-1]["why"] for i in (0, 1))
        assert served.peers == {} and served.stop is None


def closed_by_coordinator(sock) -> bool:
    """The coordinator closed the connection (an end of file, or a reset when our bytes were left unread)."""
    sock.settimeout(5)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def test_nothing_a_stranger_sends_ends_the_coordinator_and_hosts_still_join():
    logged = []
    with serving(log=logged.append) as (served, port):
        for line in (b"- " + b"[" * 100000 + b"\n", b"- " + b"[" * 1500 + b"]" * 1500 + b"\n",
                     b'- {"t": "join", "index": 1e999999, "nonce": "\\ud800", "proof": 7}\n',
                     b'- {"t": "join", "index": [1], "run_id": {"a": 1}}\n', b"\xff\xfe\n"):
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(line)
                assert closed_by_coordinator(sock), line[:40]
        pump = Pump(port, 2)   # the coordinator still serves: both hosts join
        assert pump.until(lambda: all(m.state == "joined" for m in pump.members))
        assert not any("closed" in line and "error" in line for line in logged), logged   # no defect met


def test_a_host_that_joins_after_a_restart_is_told_the_jobs_attempt_and_its_stale_reports_answered():
    with serving(max_restarts=1) as (served, port):
        first = Pump(port, 1)
        assert first.until(lambda: first.members[0].state == "joined")
        first.members[0].send({"t": "stop", "attempt": 0, "cause": {"kind": "failed", "rank": 0, "exit_code": 3}})
        first.members[0].send({"t": "result", "attempt": 0, "exit_code": 3, "steps": ["s-1_1"]})
        assert first.until(lambda: "verdict" in first.kinds(0))
        assert first.heard[0][-1]["restart"] is True   # h1 never joined attempt 0: not waited for
        assert first.until(lambda: served.attempt == 1)
        late = Pump(port, 2)
        late.members = late.members[1:]   # only h1
        assert late.until(lambda: late.heard[1])
        assert late.heard[1][0] == {"t": "attempt", "attempt": 1, "resume_step": "s-1_1"}
        late.members[0].send({"t": "result", "attempt": 0, "exit_code": 0})   # a report for the attempt it ran
        assert late.until(lambda: len(late.heard[1]) == 2)
        assert late.heard[1][1]["t"] == "attempt" and late.heard[1][1]["attempt"] == 1


def test_once_the_job_stops_a_host_that_never_reports_is_lost_at_the_report_deadline():
    with serving(report_timeout=0.5) as (served, port):
        pump = Pump(port, 2)
        assert pump.until(lambda: all(m.state == "joined" for m in pump.members))
        pump.members[0].send({"t": "stop", "attempt": 0, "cause": {"kind": "failed", "rank": 0, "exit_code": 3}})
        pump.members[0].send({"t": "result", "attempt": 0, "exit_code": 3})
        # h1 keeps beating its heartbeat but never reports: a verdict comes anyway
        assert pump.until(lambda: "verdict" in pump.kinds(0), limit=5)
        verdict = pump.heard[0][-1]
        assert verdict["lost_hosts"] == {"h1": "did not report its ranks' end within 0.5 s of the job's stop"}
        assert verdict["exit_code"] == 3


def test_a_hang_report_larger_than_a_line_reaches_the_master_host_whole():
    """Once, 8 ranks' stacks of ~165 KiB each made one message over the 1 MiB line limit: the host was taken
    as lost and job_stacks/ held 1 of 9 stacks. Now each stack goes in parts; both hosts get one verdict."""
    frames = "  File \"train.py\", line 1, in step\n" * 4700
    with serving() as (served, port):
        stacks = {str(rank): f"# rank {rank}\n" + frames for rank in range(1, 9)}
        pump = Pump(port, 2)
        assert pump.until(lambda: all(m.state == "joined" for m in pump.members))
        pump.members[1].send({"t": "stop", "attempt": 0, "cause": {"kind": "hung", "rank": 1, "exit_code": 124}})
        for part in protocol.stack_parts(stacks, 0):
            pump.members[1].send(part)
        pump.members[1].send({"t": "result", "attempt": 0, "exit_code": 124})
        for part in protocol.stack_parts({"0": "# rank 0\n"}, 0):
            pump.members[0].send(part)
        pump.members[0].send({"t": "result", "attempt": 0, "exit_code": 75})
        assert pump.until(lambda: "verdict" in pump.kinds(0) and "verdict" in pump.kinds(1), limit=20)
        gathered = {}
        for event in pump.heard[0]:
            if event["t"] == "stack":
                gathered[event["rank"]] = gathered.get(event["rank"], "") + event["text"]
        assert sum(map(len, stacks.values())) > 1 << 20
        assert gathered == {**stacks, "0": "# rank 0\n"}
        assert "stack" not in pump.kinds(1)   # only the master host gathers them
        assert pump.heard[0][-1] == pump.heard[1][-1] and pump.heard[0][-1]["lost_hosts"] == {}



def test_an_unfit_pod_told_to_reschedule_leaves_without_being_lost_and_its_new_pod_takes_its_index():
    """An unfit pod (exit 192) stops the attempt; the job restarts; the pod's connection closing is its going
    away to be rescheduled, not a lost host; the rescheduled pod joins the next attempt as the same index."""
    with serving(max_restarts=1) as (served, port):
        pump = Pump(port, 2)
        assert pump.until(lambda: all(m.state == "joined" for m in pump.members))
        cause = {"kind": "unhealthy", "reschedule": True, "exit_code": 192}
        pump.members[1].send({"t": "stop", "attempt": 0, "cause": cause})
        pump.members[1].send({"t": "result", "attempt": 0, "exit_code": 192})
        pump.members[0].send({"t": "result", "attempt": 0, "exit_code": 75})
        assert pump.until(lambda: "verdict" in pump.kinds(0) and "verdict" in pump.kinds(1))
        assert pump.heard[0][-1]["restart"] is True
        assert pump.until(lambda: served.leaving == {1})   # set just after the verdict went out
        pump.members[1].sock.close()   # the unfit pod exits 192
        assert pump.until(lambda: served.leaving == set(), limit=5)
        assert served.stop is None and served.lost == {}
        again = Pump(port, 2)
        again.members = again.members[1:]   # the rescheduled pod, index 1
        assert again.until(lambda: again.heard[1])
        assert again.heard[1][0]["t"] == "attempt" and again.heard[1][0]["attempt"] == 1


def test_a_port_taken_on_a_names_first_address_is_the_jobs(monkeypatch):
    """A name with two addresses of this host (``localhost``: ``::1`` and ``127.0.0.1``): when another dlaunch
    listens on the first, this one must not listen on the second and call itself node 0 as well."""
    taken = socket.socket()
    taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    both = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (host, port)) for host in ("127.0.0.1", "127.0.0.2")]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: both)
    try:
        assert protocol.listen_here("twohomed", port) == (None, True)
    finally:
        taken.close()
    mine, taken = protocol.listen_here("twohomed", port)   # the port free again: the first address is this one's
    try:
        assert mine is not None and not taken and mine.getsockname() == ("127.0.0.1", port)
    finally:
        if mine is not None:
            mine.close()


def test_a_job_port_held_by_a_socket_that_does_not_listen_is_said_at_once():
    """The job's port taken on this host by a socket that refuses connections (an outgoing connection's port):
    no coordinator can ever listen there, so ``--nnodes MIN:MAX`` says so within seconds instead of waiting out
    --join-timeout (PyTorch's test_launch_elastic_multiple_agents gives a port get_free_port() checked, and
    the job's link takes the next)."""
    from launcher.errors import UsageError
    from launcher.execute.job import claim

    holder = socket.socket()   # bound, never listening, and without SO_REUSEADDR: the port is taken
    holder.bind(("127.0.0.1", 0))
    port = holder.getsockname()[1]
    began = time.monotonic()
    try:
        with pytest.raises(UsageError, match="is taken on this host by a socket that does not listen"):
            claim.node_index("127.0.0.1", port, SECRET, "run", timeout=60)
    finally:
        holder.close()
    assert time.monotonic() - began < claim.TAKEN_SECONDS + 5
