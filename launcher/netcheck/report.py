"""The checks' results for people and machines: one table, one fix per failure, JSON, the exit code.

Everything here is pure: the hosts' results in, text and numbers out. TLS is compared across the whole
job here, since only the gathered results show every device's switch.
"""

from __future__ import annotations

import shlex
from collections import Counter

from launcher.base.console import printable

EXIT_FAILED = 1
COLUMNS = ("host", "device", "expected IP", "actual IP", "link", "health", "peer", "result")


def compare_tls(hosts: list[dict]) -> None:
    """HCCL needs the same TLS switch on every device of a job: devices off the majority's value fail."""
    rows = [row for host in hosts for row in host["devices"] if row.get("tls") is not None]
    counts = Counter(row["tls"] for row in rows)
    if len(counts) < 2:
        return
    usual = counts.most_common(1)[0][0]
    for row in rows:
        if row["tls"] != usual:
            row["failures"].append({"check": "tls", "detail": f"TLS switch {row['tls']}, most devices of the "
                                                              f"job have {usual}"})


def passed(hosts: list[dict]) -> bool:
    return all(not host.get("problem") and not any(row["failures"] for row in host["devices"]) for host in hosts)


def exit_code(hosts: list[dict]) -> int:
    """0 only when every host answered and every check of every device passed."""
    return 0 if passed(hosts) else EXIT_FAILED


def as_json(hosts: list[dict]) -> dict:
    devices = [row for host in hosts for row in host["devices"]]
    return {"passed": passed(hosts), "hosts": hosts,
            "devices": len(devices), "failed_devices": sum(1 for row in devices if row["failures"]),
            "failed_hosts": [host["host"] for host in hosts if host.get("problem")]}


def fix(row: dict, failure: dict, hosts: list[dict], tool_path: str | None, servers: list[str]) -> str:
    """The one command or step that repairs ``failure`` of device ``row``."""
    n, check = row["device"], failure["check"]
    hccn = tool_path or "hccn_tool"
    if check == "ip":
        return regenerate(row["host"], hosts, tool_path, servers)
    if check == "link":
        return (f"check the cable, optical module and switch port of device {n}; if it was set down by hand: "
                f"{hccn} -i {n} -cfg recovery")
    if check == "health":
        return (f"device {n} cannot reach {row['peer']} ({row['peer_server']}): check the switch, the gateway "
                f"({hccn} -i {n} -gateway -g) and try {hccn} -i {n} -ping -g address {row['peer']}")
    if check == "tls":
        return f"give every device the same TLS switch, e.g. {hccn} -i {n} -tls -s enable 0 on every device"
    if check == "restore":
        return f"put it back by hand: {hccn} -i {n} -netdetect -s address <the previous address>"
    if check == "npu":
        return f"look at npu-smi info -t health -i {n}; the device needs attention before a job uses it"
    return (f"run {hccn} -i {n} {failure.get('command') or '-ip -g'} by hand on {row['host']}; the driver or the "
            f"device is not answering")


def regenerate(host: str, hosts: list[dict], tool_path: str | None, servers: list[str]) -> str:
    """The commands that rebuild the table from the devices' real addresses (gen-ranktable reads hccn_tool);
    ``servers`` are the table's server ids, whose per-host tables merge-ranktable joins."""
    for entry in hosts:
        if entry["host"] == host:
            devices = ",".join(str(row["device"]) for row in entry["devices"])
            break
    else:
        devices = "0-7"
    gen = ["dlaunch", "gen-ranktable", "--devices", devices, "--server-id", host,
           *(["--hccn-tool", tool_path] if tool_path else []), "-o", f"{host}.json"]
    merge = "dlaunch merge-ranktable " + " ".join(shlex.quote(f"{sid}.json") for sid in servers) + " -o rt.json"
    return (f"the table is stale; on {host}: {shlex.join(gen)} (addresses from hccn_tool -ip -g), "
            f"then {merge}" if len(servers) > 1 else f"the table is stale; regenerate it: {shlex.join(gen)}")


def text(hosts: list[dict], tool_path: str | None = None, servers: list[str] | None = None) -> str:
    """The terminal report: the results table, one line per failure with its fix, one verdict line.

    ``servers``: the table's server ids (default: the hosts checked)."""
    servers = servers or [host["host"] for host in hosts]
    table: list[tuple[str, ...]] = [COLUMNS]
    for host in hosts:
        if host.get("problem"):
            table.append((host["host"], "-", "-", "-", "-", "-", "-", "HOST FAILED"))
        for row in host["devices"]:
            table.append((row["host"], str(row["device"]), row["expected_ip"] or "-", row["actual_ip"] or "?",
                          row["link"] or "?", row["health"] or "?", row["peer"] or "-",
                          "FAIL" if row["failures"] else "ok"))
    table = [tuple(printable(cell) for cell in line) for line in table]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in table]
    for host in hosts:
        if host.get("problem"):
            lines.append(printable(f"host {host['host']}: {host['problem']}"))
        for row in host["devices"]:
            for failure in row["failures"]:
                lines.append(printable(f"host {row['host']} device {row['device']}: {failure['detail']}; "
                                       f"fix: {fix(row, failure, hosts, tool_path, servers)}"))
    devices = [row for host in hosts for row in host["devices"]]
    bad = sum(1 for row in devices if row["failures"])
    lost = sum(1 for host in hosts if host.get("problem"))
    if passed(hosts):
        lines.append(f"network check passed: {len(devices)} device(s) on {len(hosts)} host(s)")
    else:
        lines.append(f"network check FAILED: {bad} of {len(devices)} device(s)"
                     + (f", {lost} host(s) not checked" if lost else ""))
    return "\n".join(lines)


# causes before symptoms: a stale address also fails its peer's net health, a dead link its own
CAUSES = ("ip", "link", "tool", "npu", "tls", "health", "restore")


def first_failures(hosts: list[dict], limit: int = 3) -> str:
    """The failing devices in words, causes first, for ``cluster --check-network``'s refusal."""
    named = [f"host {host['host']}: {host['problem']}" for host in hosts if host.get("problem")]
    failing = [(min(CAUSES.index(f["check"]) if f["check"] in CAUSES else len(CAUSES) for f in row["failures"]),
                row) for host in hosts for row in host["devices"] if row["failures"]]
    failing.sort(key=lambda pair: pair[0])
    named += [f"host {row['host']} device {row['device']}: {row['failures'][0]['detail']}" for _, row in failing]
    more = f" (and {len(named) - limit} more)" if len(named) > limit else ""
    return printable("; ".join(named[:limit]) + more)
