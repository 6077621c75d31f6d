"""The coordinator's limits on strangers: who is closed when too many connect, when a handshake is overdue, and
a console that counts instead of flooding."""

from launcher.execute.job.strangers import PATIENCE, Strangers, Tally, stranger_cap


class Peer:
    def __init__(self, host, name):
        self.host, self.name = host, name

    def __repr__(self):
        return self.name


def test_a_flooding_address_loses_its_own_oldest_connection_to_a_newcomer_from_elsewhere():
    strangers = Strangers(handshake_timeout=5.0, cap=10)
    host = Peer("10.0.0.5", "host")
    assert strangers.admit(host, 0.0) == []
    flood = [Peer("10.9.9.9", f"s{i}") for i in range(9)]
    assert [old for i, peer in enumerate(flood) for old in strangers.admit(peer, 0.01 * i)] == []
    late = Peer("10.9.9.9", "s9")
    assert strangers.admit(late, 0.2) == [late]   # its own address's oldest is young: the newcomer goes
    newcomer = Peer("10.0.0.6", "another host")
    assert strangers.admit(newcomer, 0.3) == [flood[0]]   # the flood pays, young as it is
    assert host in strangers.waiting and newcomer in strangers.waiting
    assert strangers.per_address == {"10.0.0.5": 1, "10.9.9.9": 8, "10.0.0.6": 1}


def test_hosts_joining_side_by_side_are_not_closed_mid_handshake_but_a_stale_one_is():
    strangers = Strangers(handshake_timeout=5.0, cap=3)
    hosts = [Peer(f"10.0.0.{i}", f"h{i}") for i in range(4)]
    for i, peer in enumerate(hosts[:3]):
        assert strangers.admit(peer, 0.1 * i) == []
    assert strangers.admit(hosts[3], 0.5) == [hosts[3]]   # everyone young and one each: the newcomer retries
    assert strangers.admit(hosts[3], PATIENCE + 0.1) == [hosts[0]]   # h0 had its time to join
    assert list(strangers.waiting) == hosts[1:]


def test_the_handshake_deadline_counts_from_the_connection_not_from_its_last_byte():
    strangers = Strangers(handshake_timeout=1.0, cap=10)
    old, young = Peer("a", "old"), Peer("b", "young")
    strangers.admit(old, 0.0)
    strangers.admit(young, 0.8)
    assert strangers.overdue(1.5) == [old] and strangers.next_deadline() == 1.0
    strangers.forget(old)
    strangers.forget(old)   # twice is harmless (closed after it was evicted)
    assert strangers.overdue(1.5) == [] and strangers.per_address == {"b": 1}


def test_the_cap_follows_the_descriptor_limit():
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert 16 <= stranger_cap() <= 128 and stranger_cap() <= max(16, soft // 8)


def test_the_tally_says_each_kind_once_per_period_then_counts():
    lines = []
    tally = Tally(lines.append, every=10.0)
    start = tally.period_end - 10.0
    for i in range(3000):
        tally.note("dropped (out of protocol)", f"dropped {i}")
    tally.note("refused (wrong job secret)", "refused x")
    assert lines == ["dropped 0", "refused x"]
    tally.flush(start + 5)
    assert len(lines) == 2
    tally.flush(start + 10)
    assert lines[2] == "job coordinator: in the last 10 s: 2999 more dropped (out of protocol)"
    tally.note("dropped (out of protocol)", "dropped again")   # a new period: said again
    tally.flush(start + 11, force=True)
    assert lines[3:] == ["dropped again"]
