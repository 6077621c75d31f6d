"""dlaunch check-network and cluster --check-network, against a stand-in hccn_tool (tests/programs/hccn_tool).

These machines have no NPUs; the stand-in answers as the documented tool does for the devices a JSON
state file describes (addresses, links, TLS, net health that turns Success only after -netdetect set a
reachable peer) and injects faults (hangs, failures, floods, hostile text). Everything else is real: the
CLI in a fresh interpreter, subprocesses bounded by timeouts, and for --ssh the suite's real sshd hosts.

Formats the stand-in speaks and the parsers read, and where they are documented:
- ``-ip -g`` -> ``ipaddr:IP`` / ``netmask:MASK``: Ascend/msit msprechecker/msprechecker/collectors/hccl.py
  (regex ``ipaddr:([\\d.]+)``) and vllm-ascend's multi-node guide (``hccn_tool -i $i -ip -g | grep ipaddr``);
- ``-link -g`` -> ``link status: UP``: MindCluster's fault-collection guide (hiascend.com, "Query the RoCE
  physical link connection status"), msit's regex ``link status: (\\w+)``;
- ``-net_health -g`` -> ``net health status: Success`` / ``Fault`` / ``Init``: MindCluster's resumable-training
  guide ("constructing an NPU fault") and the collection guide; the other statuses (Socket fail, Receive
  timeout, Unreachable, Time exceeded, Thread error, Detect ip set) from a public SHMEM environment check
  script that maps hccn_tool's codes 0-8;
- ``-netdetect -g`` -> ``netdetect address: 11.12.165.1``: msit's regex ``netdetect address:\\s*([\\d.]+)`` and
  HDK's hccn_tool reference (hccntool_009, "query the network detection object IP");
- ``-tls -g`` -> ``dev_id:0, tls switch[0](0:disable, 1:enable), tls preconfigured[1]...``: the HDK hccn_tool
  reference ("hccn_tool -g -tls -i 0") and msit's regex ``tls switch\\[(\\d)\\]``;
- ``npu-smi info``'s NPU rows (``| 0     910B3     | OK     | ...``): Ascend's npu-smi reference.
"""

import json
import os
import shlex
import stat
import sys
import time

import psutil
import pytest
from sshd_hosts import cluster_fixture

from launcher.host import hccn as tool
from tests.launching import ROOT, run_dlaunch

STAND_IN = ROOT / "tests" / "programs" / "hccn_tool"
HOSTS = ("127.0.0.2", "127.0.0.3")
GATEWAY = "10.99.0.1"

ssh_cluster = cluster_fixture(2)


def device_ip(server: int, device: int) -> str:
    return f"10.{server}.0.{device + 1}"


def install_tool(where, hosts, **extra):
    """The stand-in in ``where`` (run by this Python), its state file beside it; returns the tool's path."""
    where.mkdir(parents=True, exist_ok=True)
    path = where / "hccn_tool"
    path.write_text(f"#!{sys.executable} -S\n" + STAND_IN.read_text())
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    state = {"hosts": hosts, "detect_seconds": 0.2, "reachable": [GATEWAY], **extra}
    (where / "hccn_state.json").write_text(json.dumps(state))
    return path


def healthy_hosts(devices=2, changes=None):
    """Every host's devices as the table below describes them, detection at the gateway; ``changes``:
    {(server, device): {field: value}}."""
    changes = changes or {}
    hosts = {}
    for s, host in enumerate(HOSTS):
        hosts[host] = {"devices": {str(d): {"ip": device_ip(s, d), "link": "UP", "tls": 0, "netdetect": GATEWAY,
                                            **changes.get((s, d), {})} for d in range(devices)}}
    return hosts


def write_table(path, devices=2, stale=None):
    """A two-server table whose device_ip values are the stand-in's, except ``stale``: {(server, device): ip}."""
    stale = stale or {}
    servers = [{"server_id": host, "device": [
        {"device_id": str(d), "device_ip": stale.get((s, d), device_ip(s, d)), "rank_id": str(s * devices + d)}
        for d in range(devices)]} for s, host in enumerate(HOSTS)]
    path.write_text(json.dumps({"version": "1.0", "server_count": str(len(HOSTS)), "server_list": servers,
                                "status": "completed"}))
    return path


def calls(tool_path):
    return [json.loads(line) for line in (tool_path.parent / "hccn_state.json.run" / "calls.log").read_text()
            .splitlines()]


def check_local(tmp_path, tool_path, *extra, host=HOSTS[0], table=None, timeout=60):
    """check-network on one host (the stand-in plays ``host``)."""
    table = table or write_table(tmp_path / "rt.json")
    return run_dlaunch("check-network", table, "--server-id", host, "--hccn-tool", tool_path,
                       "--health-timeout", "5", *extra, cwd=tmp_path, timeout=timeout,
                       env={"HCCN_FAKE_HOST": host, "HCCN_FAKE_STATE": ""})


def result_rows(stdout):
    return {(row["host"], row["device"]): row for host in json.loads(stdout)["hosts"] for row in host["devices"]}


# ------------------------------------------------------------ the formats, read tolerantly


def test_documented_formats_and_their_variants_are_read():
    assert tool.parse_ip("ipaddr:192.98.92.100\nnetmask:255.255.255.0\n") == "192.98.92.100"
    assert tool.parse_ip("warning: something\n  IPADDR : 10.1.2.3\r\nnetmask: 255.255.0.0") == "10.1.2.3"
    assert tool.parse_link("link status: UP\n") == "UP"
    assert tool.parse_link("Link Status:down") == "DOWN"
    assert tool.parse_health("net health status: Success\n") == "Success"
    assert tool.parse_health("NET HEALTH STATUS :  receive   timeout  \n") == "Receive timeout"
    assert tool.parse_health("net health status: Fault") == "Fault"
    assert tool.parse_netdetect("netdetect address: 11.12.165.1\n") == "11.12.165.1"
    assert tool.parse_netdetect("netdetect address: 0.0.0.0") is None
    assert tool.parse_netdetect("") is None
    tls = ("dev_id:0, tls switch[1](0:disable, 1:enable), tls preconfigured[1](0:non-preset, 1:preset), "
           "tls alarm time threshold[60]days\ndev_id:0, [pub cert] info:\n         issuer[/C=CN/ST=GD/O=HUAWEI]\n")
    assert tool.parse_tls(tls) == 1
    npu_smi = """\
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B3               | OK            | 93.4        36                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          3161 / 65536         |
+===========================+===============+====================================================+
| 1     910B3               | Critical      | 90.1        35                0    / 0             |
| 0                         | 0000:C2:00.0  | 0           0    / 0          3161 / 65536         |
+===========================+===============+====================================================+
"""
    assert tool.parse_npu_health(npu_smi) == {0: "OK", 1: "Critical"}
    for bad, parse in (("ipaddr:", tool.parse_ip), ("link status: \x1b[2J", tool.parse_link),
                       ("something else", tool.parse_health), ("tls switch[x]", tool.parse_tls)):
        with pytest.raises(tool.ToolError):
            parse(bad)


# ------------------------------------------------------------ one host


def test_one_host_passes_and_the_detection_address_is_put_back(tmp_path):
    tool_path = install_tool(tmp_path / "driver", healthy_hosts())
    result = check_local(tmp_path, tool_path)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["host", "device", "expected", "IP", "actual", "IP", "link", "health", "peer",
                                "result"]
    assert lines[1].split() == [HOSTS[0], "0", device_ip(0, 0), device_ip(0, 0), "UP", "Success", device_ip(1, 0),
                                "ok"]
    assert lines[2].split() == [HOSTS[0], "1", device_ip(0, 1), device_ip(0, 1), "UP", "Success", device_ip(1, 1),
                                "ok"]
    assert lines[-1] == "network check passed: 2 device(s) on 1 host(s)"
    made = [c["argv"] for c in calls(tool_path)]
    for d in (0, 1):
        sets = [argv[-1] for argv in made if argv[:2] == ["-i", str(d)] and argv[2:4] == ["-netdetect", "-s"]]
        assert sets == [device_ip(1, d), GATEWAY]   # the peer, then the address it had before
    assert all(c["host"] == HOSTS[0] for c in calls(tool_path))


def test_a_stale_address_fails_naming_the_device_and_its_fix_regenerates_the_table(tmp_path):
    tool_path = install_tool(tmp_path / "driver", healthy_hosts())
    table = write_table(tmp_path / "rt.json", stale={(0, 1): "10.0.0.77"})
    result = check_local(tmp_path, tool_path, table=table)
    assert result.returncode == 1, result.stdout + result.stderr
    failure = [line for line in result.stdout.splitlines() if line.startswith(f"host {HOSTS[0]} device 1:")]
    assert len(failure) == 1, result.stdout
    assert f"the device's address is {device_ip(0, 1)}, the rank table says 10.0.0.77" in failure[0]
    assert "device 0:" not in result.stdout
    assert result.stdout.splitlines()[-1] == "network check FAILED: 1 of 2 device(s)"
    # the fix is a command: run it (without hccn.conf it reads the addresses from hccn_tool -ip -g)
    fix = failure[0].split(f"on {HOSTS[0]}: ", 1)[1].split(" (addresses from", 1)[0]
    argv = shlex.split(fix)
    assert argv[:2] == ["dlaunch", "gen-ranktable"]
    generated = run_dlaunch(*argv[1:], "--hccn-conf", tmp_path / "no-hccn.conf", cwd=tmp_path,
                            env={"HCCN_FAKE_HOST": HOSTS[0], "HCCN_FAKE_STATE": ""})
    assert generated.returncode == 0, generated.stderr
    made = json.loads((tmp_path / f"{HOSTS[0]}.json").read_text())
    assert [d["device_ip"] for d in made["server_list"][0]["device"]] == [device_ip(0, 0), device_ip(0, 1)]
    assert made["server_list"][0]["server_id"] == HOSTS[0]


def test_gen_ranktable_without_the_tool_keeps_device_ip_empty(tmp_path):
    result = run_dlaunch("gen-ranktable", "--devices", "0,1", "--server-id", "10.1.1.1", "--hccn-conf",
                         tmp_path / "absent.conf", cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert [d["device_ip"] for d in json.loads(result.stdout)["server_list"][0]["device"]] == ["", ""]


def test_a_link_down_fails_at_once_without_waiting_for_health(tmp_path):
    tool_path = install_tool(tmp_path / "driver", healthy_hosts(changes={(0, 0): {"link": "DOWN"}}))
    started = time.monotonic()
    result = check_local(tmp_path, tool_path, "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    rows = result_rows(result.stdout)
    down = rows[(HOSTS[0], 0)]
    assert (down["link"], down["health"]) == ("DOWN", "skipped")
    assert [f["check"] for f in down["failures"]] == ["link"]
    assert rows[(HOSTS[0], 1)]["failures"] == []
    assert json.loads(result.stdout)["passed"] is False
    assert time.monotonic() - started < 30   # not the 5 s health wait per device, sequentially or otherwise


def test_an_unreachable_peer_fails_after_the_health_timeout(tmp_path):
    tool_path = install_tool(tmp_path / "driver", healthy_hosts(changes={(0, 1): {"blocked": [device_ip(1, 1)]}}))
    result = check_local(tmp_path, tool_path, "--health-timeout", "1.5")
    assert result.returncode == 1, result.stdout + result.stderr
    failure = [line for line in result.stdout.splitlines() if line.startswith(f"host {HOSTS[0]} device 1:")]
    assert len(failure) == 1, result.stdout
    assert f"net health towards {device_ip(1, 1)} is Fault after 1.5 s" in failure[0]
    assert f"-ping -g address {device_ip(1, 1)}" in failure[0]
    row = result.stdout.splitlines()[2].split()
    assert row[5:] == ["Fault", device_ip(1, 1), "FAIL"]
    restores = [c["argv"][-1] for c in calls(tool_path) if c["argv"][:4] == ["-i", "1", "-netdetect", "-s"]]
    assert restores == [device_ip(1, 1), GATEWAY]


NPU_SMI = """\
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
+===========================+===============+====================================================+
| 0     910B3               | OK            | 93.4        36                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          3161 / 65536         |
| 1     910B3               | OK            | 93.4        36                0    / 0             |
| 0                         | 0000:C2:00.0  | 0           0    / 0          3161 / 65536         |
| 2     910B3               | Warning       | 93.4        36                0    / 0             |
| 0                         | 0000:C3:00.0  | 0           0    / 0          3161 / 65536         |
"""


def test_tls_switches_that_differ_and_npu_smi_health_fail_their_devices(tmp_path):
    tool_path = install_tool(tmp_path / "driver", healthy_hosts(devices=3, changes={(0, 1): {"tls": 1},
                                                                                    (0, 0): {"netdetect": "0.0.0.0"}}))
    npu_smi = tool_path.parent / "npu-smi"   # found beside hccn_tool, where the driver installs both
    npu_smi.write_text(f"#!/bin/sh\ncat <<'END'\n{NPU_SMI}END\n")
    npu_smi.chmod(0o755)
    result = check_local(tmp_path, tool_path, "--json", table=write_table(tmp_path / "rt.json", devices=3))
    assert result.returncode == 1, result.stdout + result.stderr
    rows = result_rows(result.stdout)
    assert [f["check"] for f in rows[(HOSTS[0], 1)]["failures"]] == ["tls"]
    assert [f["detail"] for f in rows[(HOSTS[0], 2)]["failures"]] == ["npu-smi info says Health Warning"]
    assert rows[(HOSTS[0], 0)]["failures"] == []
    assert [rows[(HOSTS[0], d)]["npu_health"] for d in range(3)] == ["OK", "OK", "Warning"]
    # a device that had no detection address keeps the peer; the others get theirs back
    assert [rows[(HOSTS[0], d)]["restored"] for d in range(3)] == [None, GATEWAY, GATEWAY]


def test_without_hccn_tool_one_line_says_the_checks_need_the_driver_tools(tmp_path):
    table = write_table(tmp_path / "rt.json")
    assert not os.path.exists(tool.DRIVER_TOOLS + "/hccn_tool")
    result = run_dlaunch("check-network", table, "--server-id", HOSTS[0], cwd=tmp_path,
                         env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"dlaunch: error: {tool.MISSING}"]
    result = run_dlaunch("check-network", table, "--server-id", HOSTS[0], "--hccn-tool", tmp_path / "nope",
                         cwd=tmp_path)
    assert (result.returncode, result.stderr.count("\n")) == (2, 1), result.stderr
    assert "--hccn-tool" in result.stderr and "Traceback" not in result.stderr


def stand_ins_running(tool_path):
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(str(tool_path) == part for part in proc.info["cmdline"] or []):
            found.append(proc.pid)
    return found


def test_a_hanging_tool_is_killed_after_the_tool_timeout(tmp_path):
    tool_path = install_tool(tmp_path / "driver", healthy_hosts(changes={(0, 0): {"hang": ["link"]},
                                                                   (0, 1): {"slow": 0.3}}))
    started = time.monotonic()
    result = check_local(tmp_path, tool_path, "--tool-timeout", "1", "--json")
    took = time.monotonic() - started
    assert result.returncode == 1, result.stdout + result.stderr
    rows = result_rows(result.stdout)
    hung = rows[(HOSTS[0], 0)]
    assert hung["failures"][0]["check"] == "tool"
    assert "-link -g: no answer within 1 s (killed)" in hung["failures"][0]["detail"]
    assert rows[(HOSTS[0], 1)]["failures"] == [] and rows[(HOSTS[0], 1)]["health"] == "Success"  # slow is fine
    assert took < 30, took
    assert stand_ins_running(tool_path) == []


def test_hostile_and_huge_tool_output_is_bounded_and_shown_escaped(tmp_path):
    hostile = {"ip": "ipaddr:\x1b]0;owned\x07\u202e10.0.0.1\n", "link": "link status: \x1b[2J\u202eUP\n"}
    tool_path = install_tool(tmp_path / "driver", healthy_hosts(changes={(0, 0): {"say": hostile},
                                                                   (0, 1): {"flood": ["ip", "tls"]}}))
    started = time.monotonic()
    result = check_local(tmp_path, tool_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert time.monotonic() - started < 30
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout and "\x07" not in result.stdout
    assert len(result.stdout) < 10_000
    lines = result.stdout.splitlines()
    assert any(line.startswith(f"host {HOSTS[0]} device 0:") and "no ipaddr" in line for line in lines), lines
    assert any(line.startswith(f"host {HOSTS[0]} device 0:") and "no link status" in line for line in lines), lines
    assert any(line.startswith(f"host {HOSTS[0]} device 1:") and "no ipaddr" in line for line in lines), lines
    assert stand_ins_running(tool_path) == []


# ------------------------------------------------------------ every host over SSH


def python_with_this_tree(where):
    """What the hosts run as Python: this interpreter with this checkout first on its path (sshd gives a
    minimal environment, and the interpreter's own site-packages may hold another dlaunch)."""
    path = where / "python"
    path.write_text(f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(ROOT))} exec {shlex.quote(sys.executable)} \"$@\"\n")
    path.chmod(0o755)
    return path


def check_ssh(cluster, tmp_path, tool_path, table, *extra):
    return run_dlaunch("check-network", table, "--ssh", "--ssh-config", cluster.ssh_config, "--hccn-tool", tool_path,
                       "--remote-python", python_with_this_tree(tmp_path), "--health-timeout", "5", *extra,
                       cwd=tmp_path, timeout=90, env={"HCCN_FAKE_STATE": "", "HCCN_FAKE_HOST": ""})


def test_every_host_over_ssh_in_one_table(ssh_cluster, tmp_path):
    tool_path = install_tool(tmp_path / "driver", healthy_hosts())
    table = write_table(tmp_path / "rt.json")
    result = check_ssh(ssh_cluster, tmp_path, tool_path, table)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line.split() for line in result.stdout.splitlines()[1:5]]
    assert rows == [[HOSTS[s], str(d), device_ip(s, d), device_ip(s, d), "UP", "Success", device_ip(1 - s, d), "ok"]
                    for s in (0, 1) for d in (0, 1)]
    assert result.stdout.splitlines()[-1] == "network check passed: 4 device(s) on 2 host(s)"
    assert {c["host"] for c in calls(tool_path)} == set(HOSTS)   # each host asked its own devices


def test_over_ssh_a_stale_address_on_the_second_host_is_named(ssh_cluster, tmp_path):
    tool_path = install_tool(tmp_path / "driver", healthy_hosts())
    table = write_table(tmp_path / "rt.json", stale={(1, 1): "10.1.0.99"})
    result = check_ssh(ssh_cluster, tmp_path, tool_path, table, "--health-timeout", "1", "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    rows = result_rows(result.stdout)
    assert [f["check"] for f in rows[(HOSTS[1], 1)]["failures"]] == ["ip"]
    assert rows[(HOSTS[1], 1)]["actual_ip"] == device_ip(1, 1)
    # host 1's device 1 detects the table's (stale) address of its peer: nothing answers there
    assert [f["check"] for f in rows[(HOSTS[0], 1)]["failures"]] == ["health"]
    assert rows[(HOSTS[0], 0)]["failures"] == rows[(HOSTS[1], 0)]["failures"] == []


def test_over_ssh_a_host_that_is_down_is_reported_and_the_others_checked(tmp_path):
    from sshd_hosts import require_sshd, start_cluster

    require_sshd()
    with start_cluster(tmp_path / "sshd", 2) as cluster:
        cluster.stop_host(1)
        tool_path = install_tool(tmp_path / "driver", healthy_hosts())
        result = check_ssh(cluster, tmp_path, tool_path, write_table(tmp_path / "rt.json"), "--health-timeout", "1",
                           "--connect-timeout", "3")
    assert result.returncode == 1, result.stdout + result.stderr
    assert any(line.startswith(f"host {HOSTS[1]}: cannot connect") for line in result.stdout.splitlines()), \
        result.stdout
    assert f"{HOSTS[0]}  0" in result.stdout or any(line.split()[:2] == [HOSTS[0], "0"]
                                                   for line in result.stdout.splitlines())


# ------------------------------------------------------------ cluster --check-network


def test_cluster_check_network_refuses_to_start_a_job_with_a_stale_address(tmp_path):
    tool_path = install_tool(tmp_path / "driver", healthy_hosts())
    table = write_table(tmp_path / "rt.json", stale={(0, 0): "10.0.0.55"})
    marker = tmp_path / "ran"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(marker)!r}, 'a').write('x')\n")
    result = run_dlaunch("cluster", script, "--rank-table", table, "--server-id", HOSTS[0], "--profile", "structure",
                         "--check-network", "--hccn-tool", tool_path, "--health-timeout", "1",
                         "--output-dir", tmp_path / "runs", cwd=tmp_path,
                         env={"HCCN_FAKE_HOST": HOSTS[0], "HCCN_FAKE_STATE": ""})
    assert result.returncode == 1, result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith(f"dlaunch: error: --check-network: host {HOSTS[0]} device 0: the device's address is "
                           f"{device_ip(0, 0)}, the rank table says 10.0.0.55"), last
    assert last.endswith("no rank was started")
    assert not marker.exists() and not (tmp_path / "runs").exists()


def test_cluster_ssh_check_network_refuses_before_any_host_starts(ssh_cluster, tmp_path):
    tool_path = install_tool(tmp_path / "driver", healthy_hosts())
    table = write_table(tmp_path / "rt.json", stale={(1, 0): "10.1.0.42"})
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit(3)\n")
    result = run_dlaunch("cluster", script, "--rank-table", table, "--ssh", "--ssh-config", ssh_cluster.ssh_config,
                         "--remote-python", python_with_this_tree(tmp_path), "--profile", "structure",
                         "--check-network", "--hccn-tool", tool_path, "--health-timeout", "1",
                         "--output-dir", tmp_path / "runs", cwd=tmp_path, timeout=90,
                         env={"HCCN_FAKE_STATE": "", "HCCN_FAKE_HOST": ""})
    assert result.returncode == 1, result.stderr
    last = result.stderr.splitlines()[-1]
    assert f"--check-network: host {HOSTS[1]} device 0: the device's address is {device_ip(1, 0)}" in last, last
    assert last.endswith("no rank was started")
    assert not (tmp_path / "runs").exists()
    # the report above it shows every host's devices
    assert sum(line.split()[:1] == [HOSTS[0]] for line in result.stderr.splitlines()) == 2


def test_a_failing_tool_call_is_that_device_s_failure_and_a_driver_without_tls_is_left_out(tmp_path):
    tool_path = install_tool(tmp_path / "driver", healthy_hosts(changes={(0, 0): {"fail": ["ip"]},
                                                                         (0, 1): {"fail": ["tls"]}}))
    result = check_local(tmp_path, tool_path, "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    rows = result_rows(result.stdout)
    failures = rows[(HOSTS[0], 0)]["failures"]
    assert [(f["check"], "-ip -g: exit 1 (ip failed: ret[-1])" in f["detail"]) for f in failures] == [("tool", True)]
    assert rows[(HOSTS[0], 0)]["health"] == "Success"   # the other checks still ran
    assert rows[(HOSTS[0], 1)]["failures"] == [] and rows[(HOSTS[0], 1)]["tls"] is None


def test_over_ssh_hosts_without_the_tool_say_so_each(ssh_cluster, tmp_path):
    table = write_table(tmp_path / "rt.json")
    result = run_dlaunch("check-network", table, "--ssh", "--ssh-config", ssh_cluster.ssh_config,
                         "--remote-python", python_with_this_tree(tmp_path), cwd=tmp_path, timeout=90)
    assert result.returncode == 1, result.stdout + result.stderr
    said = [line for line in result.stdout.splitlines() if line.startswith("host 127.")]
    assert said == [f"host {host}: the check there failed (exit 2): dlaunch: error: {tool.MISSING}" for host in HOSTS]
    assert result.stdout.splitlines()[-1] == "network check FAILED: 0 of 0 device(s), 2 host(s) not checked"


def test_over_ssh_an_unknown_host_key_is_refused_as_cluster_refuses_it(ssh_cluster, tmp_path):
    tool_path = install_tool(tmp_path / "driver", healthy_hosts())
    config = tmp_path / "ssh_config"
    config.write_text(ssh_cluster.ssh_config.read_text().replace(str(ssh_cluster.known_hosts),
                                                                 str(ssh_cluster.known_hosts_without(1))))
    result = run_dlaunch("check-network", write_table(tmp_path / "rt.json"), "--ssh", "--ssh-config", config,
                         "--hccn-tool", tool_path, "--remote-python", python_with_this_tree(tmp_path),
                         "--health-timeout", "1", "--json", cwd=tmp_path, timeout=90)
    assert result.returncode == 1, result.stdout + result.stderr
    answer = json.loads(result.stdout)
    assert answer["failed_hosts"] == [HOSTS[1]]
    problem = answer["hosts"][1]["problem"]
    assert problem.startswith(f"unknown host key for [{HOSTS[1]}]:") and "--trust-new-hosts" in problem, problem
    assert [row["failures"] for row in answer["hosts"][0]["devices"]] == [[], []]
    assert HOSTS[1] not in {c["host"] for c in calls(tool_path)}   # nothing ran there


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    from launcher.cli import main

    table = write_table(tmp_path / "rt.json")
    for argv, said in ((["check-network", str(tmp_path / "absent.json")], "cannot read rank table"),
                       (["check-network", str(table), "--ssh", "--server-id", HOSTS[0]], "--server-id chooses one"),
                       (["check-network", str(table), "--server-id", "10.9.9.9"], "is not in the rank table")):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err, (argv, err)
    with pytest.raises(SystemExit) as stopped:   # argparse's own errors: usage, one line, exit 2
        main(["check-network", str(table), "--health-timeout", "0"])
    assert stopped.value.code == 2 and "--health-timeout: 0 seconds is out of range" in capsys.readouterr().err


def test_rank_start_that_the_hint_suggests_is_taken(tmp_path):
    """'pass --rank-start or --server-id', the hint says when no address matches: both are taken."""
    tool_path = install_tool(tmp_path / "driver", healthy_hosts())
    table = write_table(tmp_path / "rt.json")
    result = run_dlaunch("check-network", table, "--rank-start", "2", "--hccn-tool", tool_path, "--health-timeout",
                         "5", "--json", cwd=tmp_path, env={"HCCN_FAKE_HOST": HOSTS[1], "HCCN_FAKE_STATE": ""})
    assert result.returncode == 0, result.stdout + result.stderr
    assert [host["host"] for host in json.loads(result.stdout)["hosts"]] == [HOSTS[1]]


def test_a_table_whose_devices_would_detect_themselves_is_refused_first(tmp_path):
    """A server block pasted twice: each device's peer would be itself. Refused before any tool call."""
    tool_path = install_tool(tmp_path / "driver", healthy_hosts())
    table = json.loads(write_table(tmp_path / "rt.json").read_text())
    twice = dict(table["server_list"][0], device=[dict(d, rank_id=str(int(d["rank_id"]) + 2))
                                                  for d in table["server_list"][0]["device"]])
    table["server_list"][1] = twice
    (tmp_path / "twice.json").write_text(json.dumps(table))
    result = check_local(tmp_path, tool_path, table=tmp_path / "twice.json")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "cannot be checked: rule R4 server-id: server_list[1].server_id: repeats server_list[0]" in result.stderr
    assert not (tool_path.parent / "hccn_state.json.run" / "calls.log").exists()


def test_json_is_printed_on_errors_too(tmp_path):
    result = run_dlaunch("check-network", tmp_path / "absent.json", "--json", cwd=tmp_path)
    assert result.returncode == 2
    answer = json.loads(result.stdout)
    assert answer["passed"] is False and answer["exit_code"] == 2 and "cannot read" in answer["error"]
    assert "cannot read" in result.stderr


def test_the_fix_for_a_failing_call_names_that_call(tmp_path):
    tool_path = install_tool(tmp_path / "driver", healthy_hosts(changes={(0, 1): {"fail": ["link"]}}))
    result = check_local(tmp_path, tool_path)
    assert result.returncode == 1, result.stdout + result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith(f"host {HOSTS[0]} device 1:"))
    assert "fix: run" in line and " -i 1 -link -g by hand" in line and "-ip -g" not in line


def test_a_valid_2_0_table_passes(tmp_path):
    """ascend-operator's 2.0 tables name no device address (its rank_addr_list is empty): the addresses are
    shown, and neither the address nor the peer's health fails a device."""
    tool_path = install_tool(tmp_path / "driver", healthy_hosts())
    ranks = [{"rank_id": p * 2 + d, "local_id": d, "device_id": d,
              "level_list": [{"net_layer": 0, "net_instance_id": "sp0", "net_type": "TOPO_FILE_DESC",
                              "net_attr": "", "rank_addr_list": []}]} for p in range(2) for d in range(2)]
    table = tmp_path / "hccl.json"
    table.write_text(json.dumps({"status": "completed", "server_list": [], "server_count": "", "version": "2.0",
                                 "rank_list": ranks, "rank_count": 4}))
    result = run_dlaunch("check-network", table, "--server-id", "pod0", "--hccn-tool", tool_path, "--json",
                         cwd=tmp_path, env={"HCCN_FAKE_HOST": HOSTS[0], "HCCN_FAKE_STATE": ""})
    assert result.returncode == 0, result.stdout + result.stderr
    rows = result_rows(result.stdout)
    assert [(row["actual_ip"], row["failures"], row["health"]) for row in rows.values()] == [
        (device_ip(0, 0), [], "n/a"), (device_ip(0, 1), [], "n/a")]
