"""The job's table made from a pool with spares (launcher/table/spares.py): pure, no file."""

import pytest

from launcher.errors import UsageError
from launcher.table.model import dumps, loads
from launcher.table.rules import errors, validate
from launcher.table.spares import Roster, job_table, replace_hosts


def pool(servers=3, devices=8, version="1.0"):
    text = {"version": version, "server_count": str(servers), "status": "completed", "server_list": [
        {"server_id": f"10.0.0.{s + 1}", "host_nic_ip": "reserve", "device": [
            {"device_id": str(d), "device_ip": f"192.168.{s}.{d}", "rank_id": str(s * devices + d)}
            for d in range(devices)]} for s in range(servers)]}
    import json

    return loads(json.dumps(text))


def test_the_job_table_holds_the_active_servers_in_slot_order_ranks_numbered_again():
    table = job_table(pool(), [0, 2])
    assert [s.server_id for s in table.servers] == ["10.0.0.1", "10.0.0.3"]
    assert [d.rank_id for s in table.servers for d in s.devices] == [str(r) for r in range(16)]
    assert [d.device_ip for d in table.servers[1].devices] == [f"192.168.2.{d}" for d in range(8)]
    assert table.server_count == "2" and table.status == "completed" and table.servers[1].extra == {
        "host_nic_ip": "reserve"}
    assert errors(validate(table, "atlas910")) == []   # 8 x N, contiguous, unique
    assert '"server_count": "2"' in dumps(table)


def test_a_spare_in_the_first_slot_takes_rank_0():
    table = job_table(pool(), [2, 1])
    assert table.servers[0].server_id == "10.0.0.3" and table.servers[0].devices[0].rank_id == "0"


def test_super_pods_list_only_the_servers_the_job_runs():
    table = pool(version="1.2")
    table.super_pods = [{"super_pod_id": "0", "server_list": [{"server_id": f"10.0.0.{s}"} for s in (1, 2, 3)]}]
    made = job_table(table, [0, 2])
    assert made.super_pods == [{"super_pod_id": "0", "server_list": [{"server_id": "10.0.0.1"},
                                                                     {"server_id": "10.0.0.3"}]}]


def test_the_roster_says_each_hosts_slot_and_moves_with_the_active_list():
    roster = Roster.first(pool(), 1, own=2, profile="atlas910")
    assert roster.active == (0, 1) and roster.slot is None and roster.standing_by() == [2]
    moved = roster.moved([0, 2])
    assert moved.slot == 1 and moved.table().servers[1].server_id == "10.0.0.3"
    assert Roster.first(pool(), 1, own=0, profile="atlas910").slot == 0


@pytest.mark.parametrize("spares", [0, 3, 4])
def test_a_pool_needs_a_server_to_run_and_one_to_stand_by(spares):
    with pytest.raises(UsageError, match="at least one must run the job and at least one stand by"):
        Roster.first(pool(), spares, own=0, profile="atlas910")


def test_replace_hosts_swaps_in_place_or_says_there_are_too_few():
    assert replace_hosts([0, 1, 2], [1], [3, 4]) == [0, 3, 2]
    assert replace_hosts([0, 1, 2], [0, 2], [4, 3]) == [4, 1, 3]
    assert replace_hosts([0, 1], [0, 1], [2]) is None
