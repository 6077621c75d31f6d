import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest

from launcher.base.stragglers import RankSteps
from launcher.execute.local.metrics import MetricsFeed, exit_class, status_class
from launcher.execute.results import AttemptResult, RankResult
from tests.launching import wait_until


def samples(text: str) -> dict[str, float]:
    """``name{labels}`` -> value of every sample of an exposition."""
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            found[name] = float(value)
    return found


def plan(tmp_path, attempt=0, max_restarts=1, policy="job"):
    return SimpleNamespace(attempt=attempt, run_dir=str(tmp_path), world_size=4,
                           ranks=[SimpleNamespace(rank=r) for r in range(4)],
                           policy=SimpleNamespace(max_restarts=max_restarts, reset_config=None, restart_policy=policy))


def process(rank, returncode=None, alive=False, waiting=False, hang=None, restarts=()):
    result = RankResult(rank, rank, rank, "h", "log", None, returncode=returncode, end=None if alive else 1.0,
                        hang=hang, restarts=list(restarts))
    return SimpleNamespace(spec=SimpleNamespace(rank=rank), result=result, alive=alive, waiting=waiting)


def test_ranks_by_state_restarts_by_reason_and_the_step_scores(tmp_path):
    feed = MetricsFeed("h")
    feed._due = lambda: True
    feed.begin(plan(tmp_path, policy="rank"))
    reader = SimpleNamespace(steps={})
    for rank, ms in enumerate((100.0, 100.0, 140.0)):
        reader.steps[rank] = RankSteps(rank, "h")
        for step in range(12):
            reader.steps[rank].add(ms, step + 1)
    ranks = [process(0, alive=True, restarts=[{"exit_code": 137, "end": 5.0}]), process(1, alive=True),
             process(2, waiting=True, returncode=3), process(3, returncode=0)]
    feed.update(ranks, reader, SimpleNamespace(budget=lambda: 42.5), plan(tmp_path, policy="rank"))
    feed.stepped(1)
    feed.publish()
    got = samples(_render(feed))
    assert got['dlaunch_ranks{host="h",state="running"}'] == 2
    assert got['dlaunch_ranks{host="h",state="restarting"}'] == 1
    assert got['dlaunch_ranks{host="h",state="succeeded"}'] == 1
    assert got['dlaunch_restarts_total{host="h",policy="rank",reason="signal"}'] == 1
    assert got['dlaunch_restarts_total{host="h",policy="rank",reason="error"}'] == 0
    assert got['dlaunch_hang_timeout_seconds{host="h"}'] == 42.5
    assert got['dlaunch_rank_last_step{rank="2",host="h"}'] == 12
    assert abs(got['dlaunch_rank_straggler_relative{rank="2",host="h"}'] - 1 / 1.4) < 0.01
    assert got['dlaunch_rank_step_seconds{rank="2",host="h"}'] == 0.14
    assert got['dlaunch_last_fault_timestamp_seconds{host="h"}'] == 5.0
    assert 'dlaunch_fault_recovery_seconds{host="h"}' in got   # rank 1 stepped after the fault
    assert 'dlaunch_checkpoint_step{host="h"}' not in got      # none saved: not said, rather than said as 0
    ranks[1].result.restarts.append({"exit_code": 1, "end": 6.0})   # in the attempt's last second: not looked at
    feed.ended(AttemptResult(attempt=0, ranks=[p.result for p in ranks]), plan(tmp_path, policy="rank"), False)
    got = samples(_render(feed))
    assert got['dlaunch_restarts_total{host="h",policy="rank",reason="signal"}'] == 1
    assert got['dlaunch_restarts_total{host="h",policy="rank",reason="error"}'] == 1
    assert got['dlaunch_ranks{host="h",state="failed"}'] == 1 and got['dlaunch_ranks{host="h",state="succeeded"}'] == 1


def _render(feed):
    return feed.body.decode()


def test_a_job_restart_counts_its_reason_and_the_notices(tmp_path):
    feed = MetricsFeed("h")
    feed.begin(plan(tmp_path))
    cause = RankResult(1, 1, 1, "h", "log", None, returncode=-9, end=10.0)
    result = AttemptResult(attempt=0, ranks=[cause], root_cause=cause, extra={"notices": 3})
    feed.ended(result, plan(tmp_path), restart=True)
    feed.begin(plan(tmp_path, attempt=1))
    got = samples(_render(feed))
    assert got['dlaunch_restarts_total{host="h",policy="job",reason="signal"}'] == 1
    assert got['dlaunch_attempts_total{host="h"}'] == 2 and got['dlaunch_attempt{host="h"}'] == 1
    assert got['dlaunch_survivor_notices_total{host="h"}'] == 3
    assert got['dlaunch_last_fault_timestamp_seconds{host="h"}'] == 10.0
    assert got['dlaunch_ranks{host="h",state="starting"}'] == 4


def test_status_words_and_exit_codes_map_to_the_labels():
    assert [status_class(s) for s in ("running", "exited 0", "exited 3", "died of SIGKILL", "hung",
                                      "running, restarted alone 2x", "remote", "starting")] == \
        ["running", "succeeded", "failed", "failed", "hung", "running", None, "starting"]
    assert [exit_class(c) for c in (1, 137, 124, 2)] == ["error", "signal", "hang", "error"]


def test_the_server_answers_metrics_and_nothing_else(tmp_path):
    feed = MetricsFeed("h")
    feed.begin(plan(tmp_path))
    assert feed.serve("127.0.0.1", 0)
    assert feed.server is not None
    base = f"http://127.0.0.1:{feed.server.port}"
    try:
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as answer:
            assert answer.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            assert samples(answer.read().decode())['dlaunch_ranks{host="h",state="starting"}'] == 4
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{base}/", timeout=10)
        assert missing.value.code == 404
    finally:
        feed.close()

    def refused():
        try:
            urllib.request.urlopen(f"{base}/metrics", timeout=2)
        except OSError:   # refused, or reset: accepted in the backlog as the socket closed
            return True
        return False

    assert wait_until(refused, timeout=10)


def test_a_port_in_use_is_said_and_the_launch_goes_on(tmp_path, capsys):
    first, second = MetricsFeed("h"), MetricsFeed("h")
    assert first.serve("127.0.0.1", 0)
    try:
        assert not second.serve("127.0.0.1", first.server.port)
        assert "no metrics served" in capsys.readouterr().err
    finally:
        first.close()



def test_the_grafana_dashboard_names_only_metrics_dlaunch_serves():
    import json
    import re
    from pathlib import Path

    dashboard = json.loads((Path(__file__).resolve().parents[4] / "configs/grafana/dlaunch.json").read_text())
    named = {name for panel in dashboard["panels"] for target in panel["targets"]
             for name in re.findall(r"\bdlaunch_[a-z_]+", target["expr"])}
    served = {family.name for family in MetricsFeed("h").families()}
    assert named and named <= served, named - served


def test_the_checkpoint_is_the_newest_step_every_rank_of_this_host_completed(tmp_path):
    for rank, steps in ((0, (10, 20)), (1, (10,)), (2, (10, 20, 30))):
        directory = tmp_path / f"rank_{rank:03d}" / "ckpt"
        directory.mkdir(parents=True)
        for step in steps:
            (directory / f"net-1_{step}.ckpt").write_bytes(b"state")
    feed = MetricsFeed("h")
    feed.look_for_checkpoint(SimpleNamespace(run_dir=str(tmp_path), ranks=[SimpleNamespace(rank=r) for r in (0, 2)]))
    assert feed.checkpoint is not None and feed.checkpoint[0] == 20   # rank 1 is another host's
    feed.look_for_checkpoint(SimpleNamespace(run_dir=str(tmp_path), ranks=[SimpleNamespace(rank=r) for r in range(3)]))
    assert feed.checkpoint[0] == 10


def test_a_flood_of_idle_connections_costs_no_more_than_max_clients_and_scrapes_resume(tmp_path):
    import socket

    from launcher.execute.local import metrics

    feed = MetricsFeed("h")
    assert feed.serve("127.0.0.1", 0) and feed.server is not None
    idle = [socket.create_connection(("127.0.0.1", feed.server.port)) for _ in range(metrics.MAX_CLIENTS)]
    try:
        assert wait_until(lambda: scrape_fails(feed.server.port), timeout=10)   # the 17th: closed unanswered
    finally:
        for connection in idle:
            connection.close()
    try:
        assert wait_until(lambda: not scrape_fails(feed.server.port), timeout=15)
    finally:
        feed.close()


def scrape_fails(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            return answer.status != 200
    except OSError:
        return True


def test_the_roster_says_spares_standing_by_and_hosts_replaced():
    from launcher.execute.attempts import Launch

    launch = Launch.__new__(Launch)   # only what _roster_moved reads
    launch.metrics = MetricsFeed("h")
    launch.roster = SimpleNamespace(pool=SimpleNamespace(servers=[0, 1, 2]), active=(0, 1))
    launch._roster_moved(())
    assert (launch.metrics.standby, launch.metrics.replaced) == (1, 0)
    launch.roster = SimpleNamespace(pool=SimpleNamespace(servers=[0, 1, 2]), active=(0, 2))
    launch._roster_moved((0, 1))
    launch.metrics.publish()
    got = samples(launch.metrics.body.decode())
    assert got['dlaunch_spares_standing_by{host="h"}'] == 1 and got['dlaunch_hosts_replaced_total{host="h"}'] == 1
