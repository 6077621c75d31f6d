"""This host's share of the checks: its devices of the table, each with its peer, all checked at once.

The peer of a device is the same device on the next server of the table, the last server's on the first
(as the seeds' multi-host chapter pairs them: server 1 detects server 2's device N); a peer server without
that device id lends the device at the same position. One thread per device: the net health waits are
what takes time, and they overlap.
"""

from __future__ import annotations

from launcher.host import hccn as tool
from launcher.host.hccn import ToolError
from launcher.netcheck.device import Settings, Target, check_device
from launcher.table.model import RANK_LIST, RankTable

MAX_THREADS = 32


def targets(table: RankTable, server_index: int) -> list[Target]:
    """Every device of server ``server_index`` with its expected address and its peer (pure)."""
    servers = table.servers
    server = servers[server_index]
    peer_server = servers[(server_index + 1) % len(servers)] if len(servers) > 1 else None
    found = []
    named = table.layout != RANK_LIST   # a 2.0 table may name no address: its devices' are in the topology file
    for position, device in enumerate(server.devices):
        if device.device is None:
            continue   # the validator reports it; there is no device to ask
        peer_ip, peer_sid = None, None
        if peer_server is not None:
            same = [d for d in peer_server.devices if d.device == device.device]
            peer = same[0] if same else (peer_server.devices[position] if position < len(peer_server.devices)
                                         else None)
            peer_ip = _address(peer, named) if peer is not None else ""
            peer_sid = str(peer_server.server_id)
        found.append(Target(str(server.server_id), device.device, _address(device, named), peer_ip, peer_sid,
                            ip_required=named))
    return found


def _address(device, named: bool) -> str:
    """A device's address in the table: its device_ip, or in a 2.0 table the first of its level_list's
    rank_addr_list (ascend-operator leaves that list empty: "" then)."""
    if named:
        return _text(device.device_ip)
    levels = device.extra.get("level_list")
    for level in levels if isinstance(levels, list) else []:
        addresses = level.get("rank_addr_list") if isinstance(level, dict) else None
        for entry in addresses if isinstance(addresses, list) else []:
            if isinstance(entry, dict) and _text(entry.get("addr")):
                return _text(entry.get("addr"))
    return ""


def _text(value) -> str:
    return value.strip() if isinstance(value, str) else ""


def check_host(table: RankTable, server_index: int, settings: Settings) -> dict:
    """``{"host", "problem", "devices": [row, ...]}`` for this host's server; the devices checked at once."""
    from concurrent.futures import ThreadPoolExecutor

    wanted = targets(table, server_index)
    with ThreadPoolExecutor(max_workers=max(1, min(MAX_THREADS, len(wanted)))) as pool:
        rows = list(pool.map(lambda target: check_device(target, settings), wanted))
    _npu_health(rows, settings)
    return {"host": str(table.servers[server_index].server_id), "problem": None, "devices": rows}


def _npu_health(rows: list[dict], settings: Settings) -> None:
    """Each device's Health from ``npu-smi info`` where npu-smi is present; anything but OK is a failure."""
    npu_smi = tool.find_npu_smi(settings.hccn_tool)
    if not npu_smi:
        return
    try:
        health = tool.parse_npu_health(tool.run([npu_smi, "info"], settings.timeout))
    except ToolError:
        return   # optional: an npu-smi that cannot answer leaves the column empty
    for row in rows:
        row["npu_health"] = health.get(row["device"])
        if row["npu_health"] not in (None, "OK"):
            row["failures"].append({"check": "npu", "detail": f"npu-smi info says Health {row['npu_health']}"})
