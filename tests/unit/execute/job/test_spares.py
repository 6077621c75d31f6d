"""Spares on the job's link: the coordinator swaps a lost or unfit host for a spare (restarts.spare_swap),
a spare that leaves stops nothing, a replaced host waits out its cooldown. Real sockets on 127.0.0.1, no
process (tests/unit/execute/job/test_protocol.py's coordinator and members)."""

import time

import pytest

from launcher.contract import ExitCode
from launcher.errors import UsageError
from launcher.execute.job.restarts import spare_swap
from tests.unit.execute.job.test_protocol import Pump, serving

HOSTS = ["h0", "h1", "h2"]


def test_a_lost_host_is_swapped_for_a_spare_that_reported_in_its_slot():
    results = {0: {"exit_code": 75, "steps": ["s1", "s2"]}, 2: {"exit_code": 0, "slots": {"1": ["s1"]}}}
    swap = spare_swap([0, 1], results, {1: "gone"}, [0, 2], HOSTS, excluded={}, master=0)
    assert swap["active"] == [0, 2] and swap["replaced"] == {"h1": {"by": "h2", "why": "gone"}}
    assert swap["steps"] == [["s1", "s2"], ["s1"]] and swap["unfit"] == [1]


def test_an_unfit_host_exit_92_is_swapped_too():
    results = {0: {"exit_code": 75}, 1: {"exit_code": ExitCode.UNHEALTHY}, 2: {"exit_code": 0}}
    swap = spare_swap([0, 1], results, {}, [0, 1, 2], HOSTS, excluded={}, master=0)
    assert swap["active"] == [0, 2] and swap["replaced"]["h1"]["why"] == "its health gate found it unfit"


def test_no_swap_without_a_fit_spare_past_its_cooldown_nor_for_the_master():
    lost = {1: "gone"}
    assert spare_swap([0, 1], {0: {"exit_code": 75}}, lost, [0], HOSTS, excluded={}, master=0) is None
    interrupted = {0: {"exit_code": 75}, 2: {"exit_code": 143}}
    assert spare_swap([0, 1], interrupted, lost, [0, 2], HOSTS, excluded={}, master=0) is None
    cooling = {0: {"exit_code": 75}, 2: {"exit_code": 0}}
    assert spare_swap([0, 1], cooling, lost, [0, 2], HOSTS, excluded={2: time.time() + 60}, master=0) is None
    assert spare_swap([0, 1], cooling, {0: "gone"}, [1, 2], HOSTS, excluded={}, master=0) is None
    assert spare_swap([0, 1], {0: {"exit_code": 3}, 1: {"exit_code": 75}, 2: {"exit_code": 0}}, {}, [0, 1, 2],
                      HOSTS, excluded={}, master=0) is None   # a rank failed: an ordinary restart, no swap


def joined(pump):
    return pump.until(lambda: all(m.state == "joined" for m in pump.members))


def test_the_coordinator_restarts_with_the_spare_in_the_lost_hosts_slot_and_keeps_it_out_for_its_cooldown():
    with serving(hosts=HOSTS, max_restarts=1, active=[0, 1], cooldown=60) as (served, port):
        pump = Pump(port, 3)
        assert joined(pump)
        assert all(pump.heard[i][0].get("active") == [0, 1] for i in range(3))   # the welcome says who runs
        pump.members[1].sock.close()   # h1's dlaunch is gone
        pump.members = pump.members[::2]
        assert pump.until(lambda: "stop" in pump.kinds(2))   # the spare hears the stop too
        pump.members[0].send({"t": "result", "attempt": 0, "exit_code": ExitCode.HOST_LOST, "steps": ["s-1_1",
                                                                                                      "s-1_2"]})
        pump.members[1].send({"t": "result", "attempt": 0, "exit_code": 0, "steps": [],
                              "slots": {"0": ["s-1_1"], "1": ["s-1_1"]}})
        assert pump.until(lambda: "verdict" in pump.kinds(0) and "verdict" in pump.kinds(2))
        verdict = pump.heard[0][-1]
        assert verdict["restart"] is True and verdict["active"] == [0, 2]
        assert verdict["resume_step"] == "s-1_1"   # the newest step the spare can see of h1's ranks
        assert verdict["replaced"] == {"h1": {"by": "h2", "why": "closed its connection before its ranks ended "
                                                              "(its dlaunch is gone)"}}
        assert verdict["roster"]["active"] == ["h0", "h2"] and "h1" in verdict["roster"]["excluded"]
        assert pump.heard[2][-1] == verdict
        back = Pump(port, 2)
        back.members = back.members[1:]   # h1 comes back at once: still cooling down
        assert back.until(lambda: back.heard[1])
        refused = back.heard[1][-1]
        assert "was replaced by a spare and is excluded from the job until" in refused["why"]
        assert "(--exclude-cooldown;" in refused["why"] and 50 < refused["excluded_until"] - time.time() <= 60


def test_a_spare_that_leaves_stops_nothing():
    logged = []
    with serving(hosts=HOSTS, active=[0, 1], log=logged.append) as (served, port):
        pump = Pump(port, 3)
        assert joined(pump)
        pump.members[2].sock.close()
        assert pump.until(lambda: any("spare host h2 left" in line for line in logged))
        assert served.stop is None
        for index in (0, 1):
            pump.members[index].send({"t": "result", "attempt": 0, "exit_code": 0})
        assert pump.until(lambda: "verdict" in pump.kinds(0))
        assert pump.heard[0][-1]["status"] == "succeeded" and pump.heard[0][-1]["host_exit_codes"] == {"h0": 0,
                                                                                                      "h1": 0}


def test_a_spare_that_never_comes_is_not_waited_for():
    with serving(hosts=HOSTS, active=[0, 1], join_timeout=0.5) as (served, port):
        pump = Pump(port, 2)   # h0 and h1 only
        assert joined(pump)
        time.sleep(0.7)
        assert pump.until(lambda: served.stop is None, limit=0.3) and served.lost == {}


def test_an_elastic_job_forms_once_its_max_joined_and_gives_node_indices_on_arrival():
    from launcher.execute.job.claim import node_index
    from tests.unit.execute.job.test_protocol import SECRET

    with serving(hosts=HOSTS, elastic=(1, 30.0)) as (served, port):
        index = node_index("127.0.0.1", port, SECRET, "run", timeout=5)   # the port is the coordinator's: ask it
        assert index == 1 and served.active is None
        pump = Pump(port, 3)
        assert pump.until(lambda: all(m.state == "joined" for m in pump.members))
        assert pump.until(lambda: all(any("active" in e for e in pump.heard[i]) for i in range(3)))
        assert served.active == [0, 1, 2]   # MAX (3) joined: formed at once, no last call
        with pytest.raises(UsageError, match="the job has all its 3 host"):   # a fourth host: no index left
            node_index("127.0.0.1", port, SECRET, "run", timeout=1)


def test_an_elastic_job_forms_with_min_after_the_last_call_and_not_below_min():
    with serving(hosts=HOSTS, elastic=(2, 0.3)) as (served, port):
        pump = Pump(port, 2)   # h0 and h1 of at most 3
        assert pump.until(lambda: served.active == [0, 1], limit=5)
    logged = []
    with serving(hosts=HOSTS, elastic=(2, 0.3), join_timeout=0.5, log=logged.append) as (served, port):
        pump = Pump(port, 1)   # only h0: fewer than MIN
        assert pump.until(lambda: "verdict" in pump.kinds(0), limit=5)
        verdict = pump.heard[0][-1]
        assert verdict["exit_code"] == ExitCode.HOST_LOST and "only 1 of at least 2 host(s) joined" in \
            verdict["root_cause"]["why"]


def test_an_elastic_job_forms_again_with_the_hosts_there():
    from launcher.execute.job.restarts import elastic_form

    results = {0: {"exit_code": 75, "steps": ["s1"]}, 1: {"exit_code": 3, "steps": ["s1"]}, 2: {"exit_code": 0}}
    grown = elastic_form([0, 1], results, {}, [0, 1, 2], HOSTS, excluded={}, master=0, least=1)
    assert grown["active"] == [0, 1, 2] and grown["steps"] == [[]]   # a new world size: no per-rank step
    same = elastic_form([0, 1], {0: results[0], 1: results[1]}, {}, [0, 1], HOSTS, excluded={}, master=0, least=1)
    assert same["active"] == [0, 1] and same["steps"] == [["s1"], ["s1"]]
    shrunk = elastic_form([0, 1], {0: results[0]}, {1: "gone"}, [0], HOSTS, excluded={}, master=0, least=1)
    assert shrunk["active"] == [0] and shrunk["unfit"] == [1]
    assert elastic_form([0, 1], {0: results[0]}, {1: "gone"}, [0], HOSTS, excluded={}, master=0, least=2) is None


def test_a_refused_host_is_told_why_and_a_replaced_one_until_when_in_local_time():
    from launcher.execute.job.spares import refusal_error

    until = time.time() + 600
    said = str(refusal_error({"why": "cooling down", "excluded_until": until}, "h1"))
    assert said.startswith(f"host h1 was replaced by a spare and is excluded from the job until "
                           f"{time.strftime('%H:%M:%S', time.localtime(until))} (--exclude-cooldown, ")
    assert "choose another --run-id" not in said
    assert str(refusal_error({"why": "host h1 has already joined this job"}, "h1")) == \
        "host h1 has already joined this job; nothing was started"
