"""Each HCCL rule, from its valid and its invalid side, on the bundled tables.

Every file in rank_tables/invalid/ breaks one rule; EXPECTED names the rule, the
JSON path and a fragment of the message that must come back.  Removing a rule
from topology.py makes its row fail; over-reaching rules make the valid tables fail.
"""

import copy
import json

import pytest

from launcher.table import model as ranktable
from launcher.table import rules as topology
from launcher.table.model import MISSING
from tests.conftest import RANK_TABLES

EXPECTED = {
    "r1_three_devices.json": ("R1 device-count", "server_list[0].device", "1, 2, 4 or 8 devices"),
    "r1_multi_server_seven_devices.json": ("R1 device-count", "server_list[1].device", "all 8 devices"),
    "r2_four_devices_span_halves.json": ("R2 device-half", "server_list[0].device[2].device_id", "0-3 or all in 4-7"),
    "r3_device_id_out_of_range.json": ("R3 device-id", "server_list[0].device[7].device_id", "within 0-7"),
    "r3_device_id_repeated.json": ("R3 device-id", "server_list[0].device[3].device_id", "repeats device[2]"),
    "r3_device_ip_repeated.json": ("R3 device-ip", "server_list[1].device[3].device_ip", "must be unique"),
    "r3_device_ip_malformed.json": ("R3 device-ip", "server_list[1].device[0].device_ip", "not a valid IPv4 or IPv6"),
    "r3_device_ip_missing_multi_server.json": ("R3 device-ip", "server_list[1].device[5].device_ip",
                                               "required when the table has more than one server"),
    "r4_server_id_repeated.json": ("R4 server-id", "server_list[1].server_id", "repeats server_list[0]"),
    "r4_server_count_wrong.json": ("R4 server-count", "server_count", "says 3 but server_list holds 2"),
    "r5_rank_repeated.json": ("R5 rank-unique", "server_list[0].device[6].rank_id", "every rank must be unique"),
    "r5_rank_gap.json": ("R5 rank-contiguous", "server_list[0].device[7].rank_id", "missing 7"),
    "r5_blocks_descend.json": ("R5 rank-order", "server_list[1].device[0].rank_id", "must ascend"),
    "r5_ranks_interleaved.json": ("R5 rank-block", "server_list[0].device", "one contiguous block"),
    "r6_ip_ids_sort_as_text.json": ("R6 server-order", "server_list[1].server_id", "compare as text"),
    "r7_status_initializing.json": ("R7 status", "status", 'must be "completed"'),
    "r8_super_pod_unknown_server.json": ("R8 super-pod", "super_pod_list[0].server_list[2].server_id",
                                         "names no server"),
    "r8_super_pod_split.json": ("R8 super-pod", "super_pod_list[0]", "listed together"),
    "s_rank_id_not_a_number.json": ("S structure", "server_list[0].device[2].rank_id", "non-negative integer"),
    "s_unknown_version.json": ("S structure", "version", "not a rank-table version"),
}
VALID = sorted(p.name for p in RANK_TABLES.glob("*.json"))


def load(name):
    return ranktable.load(str(RANK_TABLES / name))


def test_every_invalid_file_has_an_expectation():
    on_disk = {p.name for p in (RANK_TABLES / "invalid").glob("*.json")} - {"s_malformed_json.json"}
    assert on_disk == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_invalid_table_reports_its_rule(name):
    rule, path, fragment = EXPECTED[name]
    problems = topology.validate(ranktable.load(str(RANK_TABLES / "invalid" / name)))
    hits = [p for p in topology.errors(problems) if p.rule == rule and p.path == path]
    assert hits, f"{name}: expected {rule} at {path}, got {[str(p) for p in problems]}"
    assert fragment in hits[0].message
    assert hits[0].fix


@pytest.mark.parametrize("name", VALID)
def test_bundled_tables_are_valid(name):
    problems = topology.validate(load(name))
    assert topology.errors(problems) == []
    assert [p for p in problems if p.severity == "warning"] == []


def table_with(devices_per_server, ips=True, server_ids=None):
    """A well-formed table with the given device ids per server, ranks in order."""
    servers, rank = [], 0
    for s, devices in enumerate(devices_per_server):
        sid = server_ids[s] if server_ids else f"10.0.1.{s + 1}"
        entries = []
        for d in devices:
            entries.append({"device_id": str(d), "device_ip": f"192.168.{s}.{d + 1}" if ips else "",
                            "rank_id": str(rank)})
            rank += 1
        servers.append({"server_id": sid, "device": entries})
    return ranktable.from_obj({"version": "1.0", "server_count": str(len(servers)), "server_list": servers,
                               "status": "completed"})


def rules_hit(table, profile="atlas910"):
    return {p.rule for p in topology.errors(topology.validate(table, profile))}


@pytest.mark.parametrize("devices", [[0], [0, 1], [4, 5], [0, 1, 2, 3], [4, 5, 6, 7], list(range(8))])
def test_r1_r2_accept_the_single_server_shapes(devices):
    assert rules_hit(table_with([devices])) == set()


@pytest.mark.parametrize("devices", [[0, 1, 2], [0, 1, 2, 3, 4], [3, 4], [0, 5]])
def test_r1_r2_refuse_other_single_server_shapes(devices):
    assert rules_hit(table_with([devices])) & {"R1 device-count", "R2 device-half"}


def test_r1_multi_server_needs_eight_each_but_a2_relaxes_it():
    four_each = table_with([[0, 1, 2, 3], [0, 1, 2, 3]])
    assert "R1 device-count" in rules_hit(four_each)
    assert rules_hit(four_each, "a2") == set()
    uneven = table_with([[0, 1, 2, 3], [0, 1]])
    assert "R1 device-count" in rules_hit(uneven, "a2")
    assert rules_hit(table_with([[0, 1, 2]]), "a2") == set()


def test_structure_profile_ignores_hccl_rules_but_not_shape():
    assert rules_hit(table_with([list(range(3))], ips=False), "structure") == set()
    broken = ranktable.from_obj({"version": "1.0", "server_list": [{"server_id": "a", "device": "oops"}]})
    assert rules_hit(broken, "structure") == {"S structure"}


def test_r3_single_server_without_device_ip_is_only_a_warning():
    problems = topology.validate(table_with([[0, 1]], ips=False))
    assert topology.errors(problems) == []
    assert {(p.rule, p.severity) for p in problems} == {("R3 device-ip", "warning")}


def test_r3_ipv6_device_ips_are_accepted():
    table = table_with([[0, 1]])
    table.servers[0].devices[0].device_ip = "fe80::1"
    table.servers[0].devices[1].device_ip = "fe80::2"
    assert rules_hit(table) == set()


def test_r4_missing_server_id_is_reported():
    table = table_with([list(range(8)), list(range(8))])
    table.servers[1].server_id = MISSING
    problems = [p for p in topology.validate(table) if p.rule == "R4 server-id"]
    assert problems and problems[0].path == "server_list[1].server_id" and problems[0].message == "is missing."


def test_r6_plain_text_ids_follow_string_order():
    assert rules_hit(table_with([list(range(8))] * 2, server_ids=["node-a", "node-b"])) == set()
    assert "R6 server-order" in rules_hit(table_with([list(range(8))] * 2, server_ids=["node-b", "node-a"]))


def test_r7_missing_status_is_a_warning():
    table = table_with([[0]])
    table.status = MISSING
    problems = topology.validate(table)
    assert [(p.rule, p.severity) for p in problems] == [("R7 status", "warning")]


def test_r8_applies_only_to_version_1_2():
    obj = json.loads((RANK_TABLES / "invalid" / "r8_super_pod_unknown_server.json").read_text())
    obj["version"] = "1.0"
    obj.pop("super_pod_list")
    assert rules_hit(ranktable.from_obj(obj)) == set()
    obj["version"] = "1.2"
    assert "R8 super-pod" in rules_hit(ranktable.from_obj(obj))


def test_every_problem_can_be_printed_on_one_line():
    for name in EXPECTED:
        for problem in topology.validate(ranktable.load(str(RANK_TABLES / "invalid" / name))):
            assert "\n" not in str(problem)
            json.dumps(problem.as_dict())


def test_integers_and_strings_are_equivalent():
    obj = json.loads((RANK_TABLES / "rank_table_16pcs.json").read_text())
    as_ints = copy.deepcopy(obj)
    as_ints["server_count"] = 2
    for server in as_ints["server_list"]:
        for dev in server["device"]:
            dev["device_id"], dev["rank_id"] = int(dev["device_id"]), int(dev["rank_id"])
    assert topology.validate(ranktable.from_obj(as_ints)) == topology.validate(ranktable.from_obj(obj))


# ---------------------------------------------------------------- issue 38, item 4: a repeated rank, every profile

@pytest.mark.parametrize("profile", sorted(topology.PROFILES))
def test_every_profile_refuses_a_repeated_or_out_of_range_rank(profile):
    table = table_with([[0, 1, 2, 3]])
    table.servers[0].devices[3].rank_id = "2"
    assert "R5 rank-unique" in rules_hit(table, profile)
    table.servers[0].devices[3].rank_id = "7"
    assert "R5 rank-contiguous" in rules_hit(table, profile)


def test_the_refusal_of_a_repeated_rank_suggests_no_profile():
    table = ranktable.loads((RANK_TABLES / "invalid" / "r5_rank_repeated.json").read_text())
    with pytest.raises(topology.UsageError) as refused:
        topology.require_valid(table, "atlas910", "rank table rt.json")
    assert "no profile accepts it" in str(refused.value) and "structure" not in str(refused.value)


# ---------------------------------------------------------------- issue 38, item 14: a pasted server block, said once

@pytest.mark.parametrize("profile", sorted(topology.PROFILES))
def test_a_server_block_pasted_twice_is_one_problem_naming_the_copy(profile):
    obj = ranktable.to_obj(table_with([list(range(8)), list(range(8))]))
    obj["server_list"].insert(1, copy.deepcopy(obj["server_list"][0]))   # server_count still says 2
    table = ranktable.from_obj(obj)
    found = topology.errors(topology.validate(table, profile))
    assert [(p.path, p.rule) for p in found] == [("server_list[1]", "R4 server-id")], [str(p) for p in found]
    assert "is a copy of server_list[0]" in found[0].message and found[0].value == "10.0.1.1"


def test_every_copy_names_the_first_block_and_equal_values_match_whatever_their_order_or_type():
    """Copies are found by a key per server (issue 45): JSON objects with their keys in another order are the
    same block, a number and its string are not, and a value that is a list or an object does not break it."""
    obj = ranktable.to_obj(table_with([list(range(8)), list(range(8))]))
    first = obj["server_list"][0]
    first["host_nic_ip"], first["device"][0]["extra"] = ["a", {"b": 1, "c": 2}], {"x": [1, 2]}
    reordered = copy.deepcopy(first)
    reordered["host_nic_ip"][1] = {"c": 2, "b": 1}
    numeric = copy.deepcopy(first)
    numeric["device"][0]["rank_id"] = 0   # "0" in the block it was pasted from: not the same block
    obj["server_list"][1:1] = [copy.deepcopy(first), reordered, numeric]
    found = topology.errors(topology.validate(ranktable.from_obj(obj), "structure"))
    said = [(p.path, p.message) for p in found if "is a copy" in p.message]
    assert said == [(f"server_list[{s}]", "is a copy of server_list[0] (the same server_id, devices, IPs and ranks).")
                    for s in (1, 2)], [str(p) for p in found]


def test_a_server_that_only_shares_its_id_is_not_called_a_copy():
    table = table_with([list(range(8)), list(range(8))], server_ids=["a", "a"])
    assert "is a copy" not in " ".join(p.message for p in topology.validate(table))
    assert "R4 server-id" in rules_hit(table)
