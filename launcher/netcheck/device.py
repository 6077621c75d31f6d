"""One device's checks, in the seeds' order: its address, its link, its TLS switch, its net health to a peer.

Each check that fails adds ``{"check", "detail"}`` to the row; ``report`` gives each kind its fix. The net
health check points the device's detection at its peer (``-netdetect -s address PEER``), polls
``-net_health -g`` until ``Success`` or ``health_timeout`` seconds, and puts the previous detection address
back; a device that had none keeps the peer (hccn_tool has no documented way to clear it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from launcher.host import hccn as tool
from launcher.host.hccn import ToolError

SUCCESS = "Success"


@dataclass(frozen=True)
class Target:
    """A device of the table as this host checks it: its expected address and the peer it must reach."""

    server_id: str
    device_id: int
    expected_ip: str          # the table's device_ip ("" when it gives none)
    peer_ip: str | None       # the same device on the next server; None on a one-server table
    peer_server: str | None
    ip_required: bool = True  # a 2.0 table need not name addresses: then the device's own is only shown


@dataclass(frozen=True)
class Settings:
    """How to run the tool: its path, the time one call may take, how long net health may take to succeed."""

    hccn_tool: str
    timeout: float = 10.0
    health_timeout: float = 30.0
    poll: float = 0.5


def new_row(target: Target) -> dict:
    return {"host": target.server_id, "device": target.device_id, "expected_ip": target.expected_ip,
            "actual_ip": None, "link": None, "health": None, "peer": target.peer_ip,
            "peer_server": target.peer_server, "tls": None, "npu_health": None, "restored": None, "failures": []}


def check_device(target: Target, settings: Settings, run: Callable[[list[str], float], str] = tool.run) -> dict:
    """Every check of one device; never raises for the device's or the tool's faults (they are failures)."""
    row = new_row(target)

    def fail(check: str, detail: str, command: str = "") -> None:
        row["failures"].append({"check": check, "detail": detail, **({"command": command} if command else {})})

    def call(*words: str) -> str:
        return run([settings.hccn_tool, "-i", str(target.device_id), *words], settings.timeout)

    try:
        row["actual_ip"] = tool.parse_ip(call("-ip", "-g"))
        if not target.expected_ip and target.ip_required:
            fail("ip", f"the rank table gives no device_ip; the device's address is {row['actual_ip']}")
        elif target.expected_ip and row["actual_ip"] != target.expected_ip:
            fail("ip", f"the device's address is {row['actual_ip']}, the rank table says {target.expected_ip}")
    except ToolError as exc:
        fail("tool", str(exc), "-ip -g")
    try:
        row["link"] = tool.parse_link(call("-link", "-g"))
        if row["link"] != "UP":
            fail("link", f"link status {row['link']}")
    except ToolError as exc:
        fail("tool", str(exc), "-link -g")
    try:
        row["tls"] = tool.parse_tls(call("-tls", "-g"))
    except ToolError:
        pass   # older drivers have no -tls: the TLS comparison leaves this device out
    if target.peer_ip is None:
        row["health"] = "n/a"          # one server: no peer to detect
    elif not target.peer_ip:
        # the peer's own row says its device_ip is missing; a 2.0 table names none (the check is left out)
        row["health"] = "no peer address" if target.ip_required else "n/a"
    elif row["link"] not in (None, "UP"):
        row["health"] = "skipped"      # a link that is down reaches nothing: no need to wait for the timeout
    else:
        _net_health(row, target.peer_ip, call, settings, fail)
    return row


def _net_health(row: dict, peer: str, call, settings: Settings, fail) -> None:
    """Detect ``peer`` from the device until Success or the time is up; put back the previous address."""
    try:
        previous = tool.parse_netdetect(call("-netdetect", "-g"))
    except ToolError:
        previous = None   # unknown: nothing to put back
    try:
        call("-netdetect", "-s", "address", peer)
    except ToolError as exc:
        fail("tool", str(exc), f"-netdetect -s address {peer}")
        return
    deadline = time.monotonic() + settings.health_timeout
    status, error = None, None
    try:
        while True:
            try:
                status, error = tool.parse_health(call("-net_health", "-g")), None
            except ToolError as exc:
                error = str(exc)
            if status == SUCCESS or time.monotonic() >= deadline:
                break
            time.sleep(max(0.0, min(settings.poll, deadline - time.monotonic())))
    finally:
        if previous and previous != peer:
            try:
                call("-netdetect", "-s", "address", previous)
                row["restored"] = previous
            except ToolError as exc:
                fail("restore", f"could not put back detection address {previous}: {exc}")
    row["health"] = status or "unknown"
    if status != SUCCESS:
        if error and status is None:
            fail("tool", error, "-net_health -g")
        else:
            fail("health", f"net health towards {peer} is {status} after {settings.health_timeout:g} s")
