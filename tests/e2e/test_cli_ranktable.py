"""validate-ranktable, gen-ranktable and merge-ranktable through the real CLI process."""

import json
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import RANK_TABLES, ROOT, dlaunch


def test_valid_table_exits_0_and_lists_servers():
    result = dlaunch("validate-ranktable", RANK_TABLES / "rank_table_16pcs.json")
    assert result.returncode == 0, result.stderr
    assert "valid (version 1.0, 2 server(s), 16 device(s); profile atlas910)" in result.stdout
    assert "server 10.0.0.2: devices [0, 1, 2, 3, 4, 5, 6, 7], ranks 8-15" in result.stdout


def test_invalid_table_exits_1_with_path_value_and_fix():
    result = dlaunch("validate-ranktable", RANK_TABLES / "invalid" / "r5_rank_gap.json")
    assert result.returncode == 1
    line = next(x for x in result.stdout.splitlines() if "R5 rank-contiguous" in x)
    assert 'server_list[0].device[7].rank_id = "9"' in line and "Fix:" in line


def test_every_problem_is_reported_at_once(tmp_path):
    obj = json.loads((RANK_TABLES / "rank_table_16pcs.json").read_text())
    obj["server_count"] = "5"
    obj["server_list"][1]["device"][2]["device_id"] = "9"
    obj["status"] = "initializing"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(obj))
    result = dlaunch("validate-ranktable", "--json", bad)
    assert result.returncode == 1
    verdict = json.loads(result.stdout)
    assert verdict["valid"] is False
    assert {p["rule"] for p in verdict["problems"]} == {"R4 server-count", "R3 device-id", "R7 status"}
    assert {p["path"] for p in verdict["problems"]} == {"server_count", "server_list[1].device[2].device_id",
                                                         "status"}


def test_malformed_json_exits_2_naming_line_and_column():
    result = dlaunch("validate-ranktable", RANK_TABLES / "invalid" / "s_malformed_json.json")
    assert result.returncode == 2
    assert "line 4, column 3" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_file_exits_2_without_traceback(tmp_path):
    result = dlaunch("validate-ranktable", tmp_path / "nope.json")
    assert result.returncode == 2 and "cannot read" in result.stderr and "Traceback" not in result.stderr


def test_profile_a2_accepts_three_devices(tmp_path):
    table = dlaunch("gen-ranktable", "--devices", "0-2", "--server-id", "10.1.1.1", "--profile", "a2").stdout
    path = tmp_path / "three.json"
    path.write_text(table)
    assert dlaunch("validate-ranktable", path).returncode == 1
    assert dlaunch("validate-ranktable", "--profile", "a2", path).returncode == 0


def test_wait_polls_until_the_writer_completes(tmp_path):
    path = tmp_path / "rt.json"
    obj = json.loads((RANK_TABLES / "rank_table_8pcs.json").read_text())
    obj["status"] = "initializing"
    path.write_text(json.dumps(obj))

    def finish():
        time.sleep(0.8)
        obj["status"] = "completed"
        path.write_text(json.dumps(obj))

    writer = threading.Thread(target=finish)
    writer.start()
    started = time.monotonic()
    result = dlaunch("validate-ranktable", "--wait", "10", path)
    writer.join()
    assert result.returncode == 0, result.stdout
    assert 0.7 < time.monotonic() - started < 8


def test_wait_gives_up_with_the_status_error(tmp_path):
    path = tmp_path / "rt.json"
    obj = json.loads((RANK_TABLES / "rank_table_8pcs.json").read_text())
    obj["status"] = "initializing"
    path.write_text(json.dumps(obj))
    result = dlaunch("validate-ranktable", "--wait", "0.6", path)
    assert result.returncode == 1 and "R7 status" in result.stdout


def test_gen_reads_hccn_conf_and_writes_a_valid_table(tmp_path):
    conf = tmp_path / "hccn.conf"
    conf.write_text("".join(f"address_{i}=192.98.{i}.1\nnetmask_{i}=255.255.255.0\n" for i in range(8)))
    out = tmp_path / "rt.json"
    result = dlaunch("gen-ranktable", "--devices", "4,5", "--server-id", "10.9.9.9", "--hccn-conf", conf, "-o", out)
    assert result.returncode == 0, result.stderr
    obj = json.loads(out.read_text())
    assert obj["server_list"][0]["server_id"] == "10.9.9.9"
    assert [(d["device_id"], d["device_ip"], d["rank_id"]) for d in obj["server_list"][0]["device"]] == [
        ("4", "192.98.4.1", "0"), ("5", "192.98.5.1", "1")]
    assert dlaunch("validate-ranktable", out).returncode == 0


def test_gen_without_hccn_conf_leaves_device_ip_empty(tmp_path):
    result = dlaunch("gen-ranktable", "--devices", "0-3", "--hccn-conf", tmp_path / "absent")
    assert result.returncode == 0
    obj = json.loads(result.stdout)
    assert {d["device_ip"] for d in obj["server_list"][0]["device"]} == {""}
    assert obj["server_list"][0]["server_id"]


@pytest.mark.parametrize("devices,fragment", [("2-5", "R2 device-half"), ("0-2", "R1 device-count"),
                                              ("0,0", "more than once"), ("a-b", "bad device list"),
                                              ("0-9", "R1 device-count")])
def test_gen_refuses_bad_device_sets_with_one_line(devices, fragment):
    result = dlaunch("gen-ranktable", "--devices", devices, "--server-id", "h")
    assert result.returncode == 2
    assert fragment in result.stderr and len(result.stderr.strip().splitlines()) == 1


def _host_table(tmp_path, name, server_id, ints=False):
    num = (lambda x: x) if ints else str
    obj = {"version": "1.0", "server_count": num(1), "status": "completed", "server_list": [
        {"server_id": server_id, "host_nic_ip": "reserve",
         "device": [{"device_id": num(d), "device_ip": f"192.{d}.{server_id.split('.')[-1]}.1", "rank_id": num(d)}
                    for d in range(8)]}]}
    path = tmp_path / name
    path.write_text(json.dumps(obj))
    return path


@pytest.mark.parametrize("ints", [False, True])
def test_merge_orders_by_server_id_and_renumbers(tmp_path, ints):
    a = _host_table(tmp_path, "a.json", "10.0.0.9", ints)
    b = _host_table(tmp_path, "b.json", "10.0.0.10", ints)
    c = _host_table(tmp_path, "c.json", "10.0.0.2", ints)
    outs = []
    for order in ([a, b, c], [c, a, b]):
        out = tmp_path / f"merged{len(outs)}.json"
        result = dlaunch("merge-ranktable", *order, "-o", out)
        assert result.returncode == 0, result.stderr
        outs.append(out.read_text())
    assert outs[0] == outs[1]
    merged = json.loads(outs[0])
    assert [s["server_id"] for s in merged["server_list"]] == ["10.0.0.10", "10.0.0.2", "10.0.0.9"]
    ranks = [d["rank_id"] for s in merged["server_list"] for d in s["device"]]
    assert ranks == [r if ints else str(r) for r in range(24)]
    assert merged["server_count"] == (3 if ints else "3")
    assert dlaunch("validate-ranktable", tmp_path / "merged0.json").returncode == 0


def test_merge_refuses_duplicate_servers(tmp_path):
    a = _host_table(tmp_path, "a.json", "10.0.0.1")
    b = _host_table(tmp_path, "b.json", "10.0.0.1")
    result = dlaunch("merge-ranktable", a, b, "-o", tmp_path / "m.json")
    assert result.returncode == 2 and "appears in both" in result.stderr
    assert not (tmp_path / "m.json").exists()


def test_merge_refuses_a_result_that_breaks_the_rules(tmp_path):
    a = _host_table(tmp_path, "a.json", "10.0.0.1")
    obj = json.loads(a.read_text())
    obj["server_list"][0]["server_id"] = "10.0.0.2"
    obj["server_list"][0]["device"] = obj["server_list"][0]["device"][:4]
    b = tmp_path / "b.json"
    b.write_text(json.dumps(obj))
    result = dlaunch("merge-ranktable", a, b, "-o", tmp_path / "m.json")
    assert result.returncode == 2 and "R1 device-count" in result.stderr
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize("command", [[], ["validate-ranktable"], ["gen-ranktable"], ["merge-ranktable"]])
def test_help_is_useful_for_every_command(command):
    result = dlaunch(*command, "--help")
    assert result.returncode == 0
    assert "usage: dlaunch" in result.stdout and len(result.stdout.splitlines()) > 5


def test_usage_errors_exit_2():
    result = dlaunch("validate-ranktable")
    assert result.returncode == 2 and "usage:" in result.stderr
    assert dlaunch().returncode == 2


def test_console_script_is_installed():
    result = subprocess.run([str(__import__("pathlib").Path(sys.executable).parent / "dlaunch"), "--version"],
                            capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("dlaunch ")


def test_cli_does_not_import_heavy_modules():
    probe = ("import sys; from launcher import cli; cli.main(['validate-ranktable', '-q', "
             f"{str(RANK_TABLES / 'rank_table_8pcs.json')!r}]); "
             "print(sorted(m for m in ('torch', 'paramiko', 'jinja2', 'yaml', 'psutil') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_one_mistake_on_every_device_is_one_line_naming_all_places(tmp_path):
    obj = json.loads((RANK_TABLES / "rank_table_16pcs.json").read_text())
    for server in obj["server_list"]:
        for device in server["device"]:
            device["device_ip"] = ""
    bad = tmp_path / "no_ips.json"
    bad.write_text(json.dumps(obj))
    result = dlaunch("validate-ranktable", bad)
    assert result.returncode == 1
    assert "INVALID: 16 error(s), 0 warning(s)" in result.stdout
    lines = [line for line in result.stdout.splitlines() if "R3 device-ip" in line]
    assert len(lines) == 1, result.stdout
    assert 'server_list[0..1].device[0..7].device_ip = ""' in lines[0] and "(16 places)" in lines[0]
    verdict = json.loads(dlaunch("validate-ranktable", "--json", bad).stdout)
    assert len(verdict["problems"]) == 16
    assert verdict["problems"][15]["path"] == "server_list[1].device[7].device_ip"


def test_grouped_paths_work_on_any_path_text():
    from launcher.table.model import Problem
    from launcher.table.rules import compact_paths, grouped

    assert compact_paths([f"rank_list[{i}].device_ip" for i in (0, 1, 2, 5, 7, 8)]) == \
        "rank_list[0..2,5,7..8].device_ip"
    assert compact_paths([f"server_list[{s}].device[{d}].rank_id" for s in range(2) for d in range(8 - 4 * s)]) == \
        "server_list[0].device[0..7].rank_id, server_list[1].device[0..3].rank_id"
    assert compact_paths(["a[1].b[2]", "a[3].b[5]", "a[4].b[0]", "a[6].b[9]", "a[8].b[8]"]) == \
        "a[1].b[2], a[3].b[5], a[4].b[0] and 2 more"
    same = [Problem(f"rank_list[{i}].rank_id", "x", "is bad.", "fix it.", "S structure") for i in range(3)]
    other = Problem("rank_list[3].rank_id", "y", "is bad.", "fix it.", "S structure")   # another value
    assert [(p.path, n) for p, n in grouped([*same, other])] == [("rank_list[0..2].rank_id", 3),
                                                                  ("rank_list[3].rank_id", 1)]
