"""A server block pasted twice into a rank table, said once as the copy it is (issue 38, item 14).

Copies are found by one key per server, a hashable value of all its fields: a dict look-up per server, so a
table of 32,768 one-device servers (``msrun --local_worker_num 1``) is checked in linear time (issue 45).
"""

from __future__ import annotations

from launcher.table.model import MISSING, Problem, RankTable, Server, as_int


def said_once(table: RankTable, found: list[Problem]) -> list[Problem]:
    """A server block pasted twice breaks R3, R4 and R5 once per device (17 lines for 8 devices): each copy is
    said once, as the copy it is, first; what only the copy breaks goes (deleting it mends that too)."""
    first_of: dict[tuple, int] = {}   # a server's key -> the first server with it: one look-up per server
    copies = {}
    for s, server in enumerate(table.servers):
        if server.devices:
            first = first_of.setdefault(_server_key(server), s)
            if first != s:
                copies[s] = first
    if not copies:
        return found
    inside = tuple(f"server_list[{s}]" for s in copies)
    count = as_int(table.server_count) if table.server_count is not MISSING else None
    kept = [problem for problem in found if not problem.path.startswith(inside)
            and not (problem.path == "server_count" and count == len(table.servers) - len(copies))]
    said = [Problem(f"server_list[{s}]", table.servers[s].server_id,
                    f"is a copy of server_list[{first}] (the same server_id, devices, IPs and ranks).",
                    "delete the copy: list each host once.", "R4 server-id") for s, first in copies.items()]
    return said + kept


def _server_key(server: Server) -> tuple:
    """Every field of ``server`` and its devices as one hashable value: two servers have the same key exactly
    when they are equal (``==``), so copies are found by a dict, not by comparing each server with each."""
    return (_frozen(server.server_id), _frozen(server.extra), _frozen(server.device_list_raw),
            tuple((_frozen(d.device_id), _frozen(d.device_ip), _frozen(d.rank_id), _frozen(d.extra))
                  for d in server.devices))


def _frozen(value):
    """A JSON value as a hashable one that is equal exactly when the values are (objects' keys in any order)."""
    if isinstance(value, dict):
        return (dict, frozenset((key, _frozen(item)) for key, item in value.items()))
    if isinstance(value, list):
        return (list, tuple(map(_frozen, value)))
    return value
