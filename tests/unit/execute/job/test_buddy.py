"""The buddy copy (execute/job/buddy.py) over real loopback sockets: a host's newest memory step kept by its
buddy, refused without the job's secret, over the budget or torn, and handed to a spare that asks."""

import os
import socket
import threading
import time

import pytest

from launcher.execute.job import buddy
from tests.launching import wait_until

SECRET = b"s" * 32


def persisted(directory, step, payload):
    """A step dlaunch persisted from a rank's memory: ``ckpt-0_<step>.pt`` in its checkpoint directory."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"ckpt-0_{step}.pt")
    with open(path, "wb") as out:
        out.write(payload)
    return path


@pytest.fixture
def keeper(tmp_path):
    made = buddy.BuddyKeeper("127.0.0.1", 0, SECRET, str(tmp_path / "area"), budget=1 << 20)
    yield made
    made.close()


def test_the_ring_gives_every_host_the_next_and_one_host_none():
    active = ["a", "b", "c"]
    assert [buddy.buddy_of(active, h) for h in active] == ["b", "c", "a"]
    assert buddy.buddy_of(["a"], "a") is None and buddy.buddy_of(active, "x") is None


def test_the_newest_step_is_kept_and_a_spare_gets_it_back_whole(tmp_path, keeper):
    ckpt = str(tmp_path / "ckpt")
    sent = {}
    for step in (5, 6, 10, 11):
        sent[step] = os.urandom(100_000 + step)
        buddy.push("127.0.0.1", keeper.port, SECRET, "host-a", 3, persisted(ckpt, step, sent[step]))
    assert [os.path.basename(p) for p in keeper.kept(3)] == ["ckpt-0_6.pt", "ckpt-0_10.pt", "ckpt-0_11.pt"]
    assert len(os.listdir(os.path.dirname(keeper.kept(3)[0]))) == buddy.KEEP   # step 5's copy is gone
    into = tmp_path / "spare" / "ckpt"
    paths = buddy.pull("127.0.0.1", keeper.port, SECRET, "spare", 3, str(into))
    assert paths == [str(into / f"ckpt-0_{step}.pt") for step in (6, 10, 11)]
    assert [open(path, "rb").read() for path in paths] == [sent[6], sent[10], sent[11]]
    assert buddy.pull("127.0.0.1", keeper.port, SECRET, "spare", 4, str(into)) == []   # nothing for rank 4


def test_without_the_secret_nothing_is_kept_or_given(tmp_path, keeper):
    path = persisted(str(tmp_path / "ckpt"), 5, b"x" * 1000)
    with pytest.raises(ConnectionError):
        buddy.push("127.0.0.1", keeper.port, b"w" * 32, "stranger", 0, path)
    assert keeper.kept(0) == []
    buddy.push("127.0.0.1", keeper.port, SECRET, "host-a", 0, path)
    with pytest.raises(ConnectionError):
        buddy.pull("127.0.0.1", keeper.port, b"w" * 32, "stranger", 0, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_a_copy_over_the_budget_is_refused_before_its_bytes(tmp_path, keeper):
    path = persisted(str(tmp_path / "ckpt"), 5, b"x" * (2 << 20))
    with pytest.raises(ConnectionError, match="over the"):
        buddy.push("127.0.0.1", keeper.port, SECRET, "host-a", 0, path)
    assert keeper.kept(0) == []


def test_a_copy_cut_short_is_never_kept(tmp_path, keeper):
    """A sender that dies in the middle of a copy (its connection closed after half the bytes) leaves the
    earlier copy as the rank's newest."""
    ckpt = str(tmp_path / "ckpt")
    buddy.push("127.0.0.1", keeper.port, SECRET, "host-a", 0, persisted(ckpt, 5, b"a" * 1000))
    line = buddy._connect("127.0.0.1", keeper.port, SECRET, "host-a")
    line.send({"t": "copy", "rank": 0, "name": "ckpt-0_6.pt", "epoch": 0, "step": 6, "length": 100_000})
    assert line.receive()["t"] == "ready"
    line.sock.sendall(b"b" * 50_000)
    line.sock.close()
    got = buddy.pull("127.0.0.1", keeper.port, SECRET, "spare", 0, str(tmp_path / "out"))
    assert [os.path.basename(path) for path in got] == ["ckpt-0_5.pt"]


@pytest.fixture
def silent_buddy():
    """A listener that takes connections and never says a word (a buddy host that hangs)."""
    server = socket.create_server(("127.0.0.1", 0))
    yield server.getsockname()[1]
    server.close()


def test_a_spare_fetching_from_a_silent_buddy_gives_up_at_its_deadline_or_at_a_stop_signal(tmp_path, silent_buddy):
    with pytest.raises(ConnectionError, match="took too long"):   # the deadline's words, not a socket's timeout
        buddy.pull("127.0.0.1", silent_buddy, SECRET, "spare", 0, str(tmp_path / "out"),
                   deadline=time.monotonic() + 0.3)
    read, write = os.pipe()
    os.write(write, b"\0")   # the signal watch's descriptor, readable: a SIGTERM came
    with pytest.raises(buddy.Interrupted):
        buddy.pull("127.0.0.1", silent_buddy, SECRET, "spare", 0, str(tmp_path / "out"), stop_fd=read)
    assert os.read(read, 1) == b"\0"   # left for its owner to read
    os.close(read)
    os.close(write)


def test_the_sender_gives_up_a_stalled_buddy_at_the_end_and_never_sends_a_fifo(tmp_path, silent_buddy):
    said = []
    sender = buddy.BuddySender(lambda: ("127.0.0.1", silent_buddy), SECRET, "host-a", said.append)
    sender.offer(0, persisted(str(tmp_path / "ckpt"), 5, b"x" * 1000))
    sender.close(timeout=0.3)
    assert any("gave up sending" in line for line in said), said
    os.mkfifo(tmp_path / "ckpt" / "ckpt-0_6.pt")   # no writer: a plain open() would wait for one forever
    with pytest.raises(OSError, match="not a regular file"):
        buddy.push("127.0.0.1", silent_buddy, SECRET, "host-a", 0, str(tmp_path / "ckpt" / "ckpt-0_6.pt"))


def test_a_crowd_of_silent_strangers_is_turned_away_and_cut_off_at_the_handshake_deadline(tmp_path):
    """More connections than the keeper answers at once, none saying a word: the extra ones are closed at once,
    the silent ones cut off at the handshake deadline, and a host of the job is then kept as before; the
    keeper's threads never outnumber its bound."""
    made = buddy.BuddyKeeper("127.0.0.1", 0, SECRET, str(tmp_path / "area"), budget=1 << 20, handshake_seconds=0.5)
    crowd = [socket.create_connection(("127.0.0.1", made.port)) for _ in range(3 * buddy.CONNECTIONS)]
    try:
        peers = [t for t in threading.enumerate() if t.name == "dlaunch-buddy-peer"]
        assert len(peers) <= buddy.CONNECTIONS
        path = persisted(str(tmp_path / "ckpt"), 5, b"x" * 1000)

        def kept_now():
            try:
                buddy.push("127.0.0.1", made.port, SECRET, "host-a", 0, path)
            except (OSError, ConnectionError):
                return False   # turned away while the crowd holds every place
            return True
        assert wait_until(kept_now, timeout=30, interval=0.1)
        assert [os.path.basename(p) for p in made.kept(0)] == ["ckpt-0_5.pt"]
        heard = []
        for conn in crowd:   # each read to its end: the keeper closed every stranger's line
            conn.settimeout(30)
            data = b""
            while chunk := conn.recv(1 << 16):
                data += chunk
            heard.append(data)
        assert sum(bool(data) for data in heard) <= buddy.CONNECTIONS   # a challenge only to those it answered
    finally:
        for conn in crowd:
            conn.close()
        made.close()
