"""Build rank tables the way ``hccl_tools.py`` does, and merge per-host tables.

``gen-ranktable`` describes one server from a device list and ``/etc/hccn.conf``
(whose ``address_N=IP`` lines give each NPU's NIC address), or without that file
the driver's ``hccn_tool -i N -ip -g``.  On CPU and GPU
hosts there is no hccn.conf and ``device_ip`` stays empty, which the validator
accepts with a warning for a single server.

``merge-ranktable`` joins per-host tables in ``server_id`` string order, the
order HCCL requires (rule R6), never in the order a shell glob happened to list
the files, and renumbers ranks so every server holds one ascending block.
"""

from __future__ import annotations

import os
import socket

from launcher.base import numlists
from launcher.base.border import is_number
from launcher.errors import UsageError
from launcher.table.model import MISSING, Device, RankTable, Server, as_int, numbered_like

HCCN_CONF = "/etc/hccn.conf"


def parse_devices(text: str) -> list[int]:
    """Devices from "0-7", "0,1,2,3" or "0-1,4"; order kept, duplicates refused."""
    return numlists.parse(text, "device list", unique=True)


MAX_HCCN_BYTES = 1 << 20


def read_hccn_conf(path: str = HCCN_CONF) -> dict[int, str]:
    """``address_N=IP`` lines of hccn.conf as {device: ip}; an absent file means no NPU NICs."""
    from launcher.base.userfiles import read_text

    addresses: dict[int, str] = {}
    if not os.path.lexists(path):
        return addresses
    lines = read_text(path, "hccn.conf", MAX_HCCN_BYTES).splitlines()
    for line in lines:
        key, sep, value = line.strip().partition("=")
        if sep and key.startswith("address_") and is_number(key[len("address_"):]):
            addresses[int(key[len("address_"):])] = value.strip()
    return addresses


def read_hccn_tool(devices: list[int], hccn_conf: str = HCCN_CONF, given: str | None = None,
                   timeout: float = 10.0) -> dict[int, str]:
    """Without hccn.conf (containers often have none), each device's address from ``hccn_tool -i N -ip -g``.

    Only where the driver's tool is present (``--hccn-tool``, PATH or its usual directory): a CPU or GPU
    host without it gets no addresses, as before. A tool that is there but cannot answer is an error.
    """
    from launcher.host import hccn as tool

    if os.path.lexists(hccn_conf):
        return {}
    try:
        path = tool.find_tool(given)
    except UsageError:
        if given:
            raise
        return {}
    addresses = {}
    for device in devices:
        try:
            addresses[device] = tool.parse_ip(tool.run([path, "-i", str(device), "-ip", "-g"], timeout))
        except tool.ToolError as exc:
            raise UsageError(f"no {hccn_conf}, and reading device {device}'s address failed: {exc}") from None
    return addresses


def primary_address() -> str:
    """This host's first non-loopback IPv4 address (what HCCL calls server_id), else 127.0.0.1."""
    import psutil

    stats = psutil.net_if_stats()
    for name, addrs in sorted(psutil.net_if_addrs().items()):
        if name in stats and not stats[name].isup:
            continue
        for addr in addrs:
            if addr.family == socket.AF_INET and not addr.address.startswith("127."):
                return addr.address
    return "127.0.0.1"


def single_server_table(devices: list[int], server_id: str, device_ips: dict[int, str] | None = None,
                        rank_start: int = 0) -> RankTable:
    """A one-server, version 1.0 table in the seeds' style (every number a string)."""
    device_ips = device_ips or {}
    server = Server(server_id=server_id, extra={"host_nic_ip": "reserve"},
                    devices=[Device(device_id=str(d), device_ip=device_ips.get(d, ""), rank_id=str(rank_start + i))
                             for i, d in enumerate(devices)])
    return RankTable(version="1.0", server_count="1", servers=[server], status="completed")


def merge_tables(tables: list[tuple[str, RankTable]]) -> RankTable:
    """Join per-host tables (``(file name, table)`` pairs) into one, ordered by server_id, ranks renumbered."""
    servers: list[tuple[str, Server]] = []
    seen: dict[str, str] = {}
    versions = set()
    for name, table in tables:
        if table.shape_problems:
            raise UsageError(f"{name}: {table.shape_problems[0]}")
        versions.add(str(table.version))
        for server in table.servers:
            sid = server.server_id
            if not isinstance(sid, str) or not sid:
                raise UsageError(f"{name}: a server has no server_id; cannot merge it")
            if sid in seen:
                raise UsageError(f"server_id {sid!r} appears in both {seen[sid]} and {name}")
            seen[sid] = name
            servers.append((sid, server))
    if len(versions) > 1:
        raise UsageError(f"cannot merge tables of different versions: {', '.join(sorted(versions))}")
    servers.sort(key=lambda pair: pair[0])
    rank = 0
    merged: list[Server] = []
    for _, server in servers:
        devices = []
        for dev in sorted(server.devices, key=lambda d: (as_int(d.rank_id) is None, as_int(d.rank_id) or 0)):
            devices.append(Device(dev.device_id, dev.device_ip, numbered_like(dev.rank_id, rank), dict(dev.extra)))
            rank += 1
        merged.append(Server(server.server_id, devices, dict(server.extra)))
    first = tables[0][1]
    pods = _merge_super_pods([t for _, t in tables])
    return RankTable(version=first.version, server_count=numbered_like(first.server_count, len(merged)),
                     servers=merged, status="completed", super_pods=pods, extra=dict(first.extra))


def _merge_super_pods(tables: list[RankTable]):
    """Concatenate the inputs' super pods (version 1.2), members of one pod id joined."""
    pods: dict[str, dict] = {}
    for table in tables:
        if not isinstance(table.super_pods, list):
            continue
        for pod in table.super_pods:
            if isinstance(pod, dict):
                key = str(pod.get("super_pod_id"))
                target = pods.setdefault(key, {**pod, "server_list": []})
                target["server_list"].extend(pod.get("server_list") or [])
    return list(pods.values()) if pods else MISSING


def job_table(nodes: int, devices: list[int]) -> RankTable:
    """The job's rank table: ``nodes`` servers named node0, node1, ... each with ``devices``, ranks in node order."""
    servers = [single_server_table(devices, f"node{k}", rank_start=k * len(devices)).servers[0]
               for k in range(nodes)]
    return RankTable(version="1.0", server_count=str(nodes), servers=servers, status="completed")
