"""HCCL topology rules and the profiles that select them.

Each rule is a function ``table -> iterable of Problem``, named after the rule it
checks, so that the README, the tests and the messages all speak of the same
"R1".."R8".  A profile is an ordered set of rules: ``validate(table, profile)``
runs them all and returns every problem at once, because a user fixing a
64-NPU table wants the whole list, not one error per attempt.

The default profile, ``atlas910``, encodes the rules of the MindSpore/HCCL
tutorial for Atlas 910 (the seeds).  ``a2`` relaxes the device-count rules for
Atlas A2 servers; ``structure`` checks only that the file can be interpreted and that its ranks
are 0..N-1, each once (R5's first half: a repeated rank is no job on any hardware).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from launcher.errors import UsageError
from launcher.table.copies import said_once
from launcher.table.model import KNOWN_VERSIONS, MISSING, RANK_LIST, Problem, RankTable, as_int

Rule = Callable[[RankTable], Iterable[Problem]]


def _dev_path(s: int, d: int, key: str) -> str:
    return f"server_list[{s}].device[{d}].{key}"


def _is_text(value) -> bool:
    return isinstance(value, str) and value.strip() != ""


def _numbers(values: list[int | None]) -> list[int] | None:
    """``values`` when every one is a number, else None (a rule skips what another rule reports)."""
    numbers = [value for value in values if value is not None]
    return numbers if len(numbers) == len(values) else None


def rule_structure(table: RankTable) -> Iterable[Problem]:
    """S: the table can be interpreted: known version, numbers where numbers belong."""
    yield from table.shape_problems
    if table.version is MISSING:
        yield Problem("version", MISSING, "is missing.", 'add "version": "1.0".', "S structure")
    elif str(table.version) not in KNOWN_VERSIONS:
        yield Problem("version", table.version,
                      f"is not a rank-table version dlaunch knows ({', '.join(KNOWN_VERSIONS)}).",
                      'use "1.0" (or "1.2" with super_pod_list, "2.0" with rank_list).', "S structure")
    if table.server_count is not MISSING and as_int(table.server_count) is None:
        yield Problem("server_count", table.server_count,
                      "must be a non-negative integer below 10^9 (a string or a number).",
                      f'write "server_count": "{len(table.servers)}".', "S structure")
    for s, d, dev in table.devices:
        for key in ("device_id", "rank_id"):
            value = getattr(dev, key)
            if value is MISSING:
                yield Problem(_dev_path(s, d, key), MISSING, "is missing.",
                              f'give every device a {key}, e.g. "{key}": "{d}".', "S structure")
            elif as_int(value) is None:
                yield Problem(_dev_path(s, d, key), value,
                              "must be a non-negative integer below 10^9 (a string or a number).",
                              f'write it as digits, e.g. "{key}": "{d}".', "S structure")
    count = table.extra.get("rank_count", MISSING) if table.layout == RANK_LIST else MISSING
    if count is not MISSING and as_int(count) != table.device_count:
        yield Problem("rank_count", count, f"says {count} but rank_list holds {table.device_count} ranks.",
                      f'write "rank_count": {table.device_count}.', "S structure")
    if not table.servers and not table.shape_problems:
        yield Problem("server_list", [], "is empty: a job needs at least one server.",
                      "add the servers that take part.", "S structure")


def rule_device_count_910(table: RankTable) -> Iterable[Problem]:
    """R1: one server holds 1, 2, 4 or 8 devices; several servers hold 8 each (8xN)."""
    if len(table.servers) == 1:
        n = len(table.servers[0].devices)
        if n not in (1, 2, 4, 8):
            yield Problem("server_list[0].device", n, f"a single server must use 1, 2, 4 or 8 devices, not {n}.",
                          "use 1, 2, 4 or 8 devices (or --profile a2 on Atlas A2).", "R1 device-count")
        return
    for s, server in enumerate(table.servers):
        n = len(server.devices)
        if n != 8:
            yield Problem(f"server_list[{s}].device", n,
                          f"in a multi-server table every server must use all 8 devices, this one uses {n}.",
                          "list all 8 devices on every server (8xN devices in total).", "R1 device-count")


def rule_device_count_a2(table: RankTable) -> Iterable[Problem]:
    """R1 (Atlas A2): any 1 to 8 devices per server, the same count on every server."""
    counts = [len(server.devices) for server in table.servers]
    for s, n in enumerate(counts):
        if not 1 <= n <= 8:
            yield Problem(f"server_list[{s}].device", n, f"a server must use 1 to 8 devices, not {n}.",
                          "list between 1 and 8 devices.", "R1 device-count")
    if counts and len(set(counts)) > 1:
        usual = Counter(counts).most_common(1)[0][0]
        for s, n in enumerate(counts):
            if n != usual and 1 <= n <= 8:
                yield Problem(f"server_list[{s}].device", n,
                              f"every server must use the same number of devices; most use {usual}, this one {n}.",
                              f"use {usual} devices on every server.", "R1 device-count")


def rule_device_half(table: RankTable) -> Iterable[Problem]:
    """R2: a server of 2 or 4 devices keeps them all in 0-3 or all in 4-7 (one HCCS ring)."""
    for s, server in enumerate(table.servers):
        if len(server.devices) not in (2, 4):
            continue
        ids = _numbers([dev.device for dev in server.devices])
        if ids is None or any(i > 7 for i in ids):
            continue  # reported by S / R3
        halves = {i // 4 for i in ids}
        if len(halves) > 1:
            first_half = ids[0] // 4
            for d, i in enumerate(ids):
                if i // 4 != first_half:
                    yield Problem(_dev_path(s, d, "device_id"), server.devices[d].device_id,
                                  f"a {len(ids)}-device server must keep all devices in 0-3 or all in 4-7; "
                                  f"this one mixes both ({sorted(ids)}).",
                                  f"pick devices only from {'0-3' if first_half == 0 else '4-7'}.",
                                  "R2 device-half")


def rule_device_ids(table: RankTable) -> Iterable[Problem]:
    """R3: device_id unique on its server and within 0-7; device_ip valid, unique, required on several servers."""
    multi = len(table.servers) > 1
    ip_seen: dict[str, str] = {}
    for s, server in enumerate(table.servers):
        seen: dict[int, int] = {}
        for d, dev in enumerate(server.devices):
            i = dev.device
            if i is not None:
                if i > 7:
                    yield Problem(_dev_path(s, d, "device_id"), dev.device_id, "must be within 0-7.",
                                  "use the physical device number (0-7) shown by npu-smi.", "R3 device-id")
                if i in seen:
                    yield Problem(_dev_path(s, d, "device_id"), dev.device_id,
                                  f"repeats device[{seen[i]}] on the same server.",
                                  "list each physical device once per server.", "R3 device-id")
                else:
                    seen[i] = d
            if table.layout == RANK_LIST:
                continue   # a 2.0 table's addresses are in each rank's level_list, not a device_ip
            ip = dev.device_ip
            path = _dev_path(s, d, "device_ip")
            if ip is MISSING or ip is None or (isinstance(ip, str) and not ip.strip()):
                if multi:
                    yield Problem(path, ip, "is required when the table has more than one server.",
                                  "copy address_N of /etc/hccn.conf on that server.", "R3 device-ip")
                else:
                    yield Problem(path, ip, "is empty; HCCL on real NPUs needs the device NIC address.",
                                  "fill it from /etc/hccn.conf (fine to leave empty on CPU/GPU hosts).",
                                  "R3 device-ip", "warning")
                continue
            addr = canonical_ip(ip)
            if addr is None:
                yield Problem(path, ip, "is not a valid IPv4 or IPv6 address.",
                              "copy address_N of /etc/hccn.conf on that server.", "R3 device-ip")
                continue
            if addr in ip_seen:
                yield Problem(path, ip, f"is already used by {ip_seen[addr]}; device IPs must be unique.",
                              "give each device its own NIC address.", "R3 device-ip")
            else:
                ip_seen[addr] = path


def canonical_ip(value) -> str | None:
    """The address in canonical form, or None when it is not an IPv4/IPv6 address.

    Dotted IPv4 is checked by hand first: ipaddress is slow per call, and a large
    table has a device_ip per device to check.
    """
    if not isinstance(value, str):
        return None
    text = value.strip()
    parts = text.split(".")
    if len(parts) == 4 and all(p.isdigit() and p.isascii() and (p == "0" or p[0] != "0") and int(p) < 256
                               for p in parts):
        return text
    import ipaddress  # here, not at the top: 2 ms of every launch whose table holds only dotted IPv4

    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def rule_servers(table: RankTable) -> Iterable[Problem]:
    """R4: server_id present and unique; server_count equals the number of servers."""
    seen: dict[str, int] = {}
    for s, server in enumerate(table.servers):
        sid = server.server_id
        if not _is_text(sid):
            yield Problem(f"server_list[{s}].server_id", sid,
                          "is missing." if sid is MISSING else "must be a non-empty string (the host's address).",
                          "set it to the host's IP address.", "R4 server-id")
            continue
        if sid in seen:
            yield Problem(f"server_list[{s}].server_id", sid, f"repeats server_list[{seen[sid]}].",
                          "list each host once; merge its devices into one entry.", "R4 server-id")
        else:
            seen[sid] = s
    if table.layout == RANK_LIST:
        return   # servers are the pods dlaunch made of the ranks: ids and count are its own
    if table.server_count is MISSING:
        yield Problem("server_count", MISSING, "is missing.", f'add "server_count": "{len(table.servers)}".',
                      "R4 server-count")
    else:
        count = as_int(table.server_count)
        if count is not None and count != len(table.servers):
            yield Problem("server_count", table.server_count,
                          f"says {count} but server_list holds {len(table.servers)} servers.",
                          f'write "server_count": "{len(table.servers)}".', "R4 server-count")


def rule_rank_ids(table: RankTable) -> Iterable[Problem]:
    """R5, in every profile (``structure`` too): rank_id unique and in 0..N-1. A repeated or missing rank is
    no job on any hardware: two processes would get the same RANK."""
    total = table.device_count
    where: dict[int, str] = {}
    raw: dict[int, object] = {}
    for s, d, dev in table.devices:
        r = dev.rank
        if r is None:
            continue
        path = _dev_path(s, d, "rank_id")
        if r in where:
            yield Problem(path, dev.rank_id, f"repeats {where[r]}; every rank must be unique.",
                          "renumber ranks 0..N-1 in server order (dlaunch merge-ranktable does this).",
                          "R5 rank-unique")
        else:
            where[r], raw[r] = path, dev.rank_id
    missing = sorted(set(range(total)) - set(where))
    if missing:
        shown = ", ".join(map(str, missing[:8])) + (" ..." if len(missing) > 8 else "")
        for r in sorted(x for x in where if x >= total):
            yield Problem(where[r], raw[r],
                          f"is out of range: {total} devices need ranks 0..{total - 1} (missing {shown}).",
                          "number ranks contiguously from 0.", "R5 rank-contiguous")


def rule_ranks(table: RankTable) -> Iterable[Problem]:
    """R5 (HCCL's): one contiguous block of ranks per server; blocks ascend in list order."""
    previous_max: int | None = None
    previous_server: int | None = None
    for s, server in enumerate(table.servers):
        ranks = _numbers([dev.rank for dev in server.devices])
        if not ranks:
            continue
        lo, hi = min(ranks), max(ranks)
        if len(set(ranks)) == len(ranks) and hi - lo + 1 != len(ranks):
            yield Problem(f"server_list[{s}].device", sorted(ranks),
                          f"ranks on one server must form one contiguous block; {lo}..{hi} has gaps.",
                          "give each server consecutive ranks.", "R5 rank-block")
        if previous_max is not None and lo <= previous_max:
            d = ranks.index(lo)
            yield Problem(_dev_path(s, d, "rank_id"), server.devices[d].rank_id,
                          f"rank blocks must ascend in server_list order; server_list[{previous_server}] "
                          f"already reaches rank {previous_max}.",
                          "order servers by their ranks, or renumber ranks in server order.", "R5 rank-order")
        if previous_max is None or hi > previous_max:
            previous_max, previous_server = hi, s


def _address_order_disagrees(first: str, second: str) -> bool:
    """True when two ids are addresses whose numeric order differs from their text order (10.0.0.9 vs 10.0.0.10)."""
    import ipaddress

    try:
        a, b = ipaddress.ip_address(first), ipaddress.ip_address(second)
        return a.version == b.version and (a < b) != (first < second)  # type: ignore[operator]
    except (ValueError, TypeError):
        return False


def rule_server_order(table: RankTable) -> Iterable[Problem]:
    """R6: rank order follows the lexicographic (string) order of server_id, as HCCL requires."""
    if table.layout == RANK_LIST:
        return   # a 2.0 table names no servers
    blocks = []
    for s, server in enumerate(table.servers):
        ranks = _numbers([dev.rank for dev in server.devices])
        if not _is_text(server.server_id) or not ranks:
            return  # reported elsewhere; order is meaningless without ids and ranks
        blocks.append((min(ranks), s, server.server_id))
    blocks.sort()
    for (_, s_prev, id_prev), (lo, s, sid) in zip(blocks, blocks[1:]):
        if sid < id_prev:
            why = ""
            if _address_order_disagrees(sid, id_prev):
                why = (f" (server_ids compare as text, character by character, so '{sid}' sorts before "
                       f"'{id_prev}' although it is the larger address)")
            yield Problem(f"server_list[{s}].server_id", sid,
                          f"holds ranks from {lo} but sorts before server_list[{s_prev}].server_id '{id_prev}'"
                          f"{why}; HCCL requires rank order to follow server_id string order.",
                          "give lower ranks to the server whose id sorts first (dlaunch merge-ranktable does).",
                          "R6 server-order")


def rule_status(table: RankTable) -> Iterable[Problem]:
    """R7: status is "completed"; "initializing" means the operator is still writing the file."""
    if table.status is MISSING:
        yield Problem("status", MISSING, 'is missing; dlaunch assumes "completed".', 'add "status": "completed".',
                      "R7 status", "warning")
    elif table.status != "completed":
        yield Problem("status", table.status, 'must be "completed" before a job may use the table.',
                      "wait for the writer to finish (validate-ranktable --wait SECONDS polls), "
                      'then it says "completed".', "R7 status")


def rule_super_pods(table: RankTable) -> Iterable[Problem]:
    """R8 (version 1.2): super_pod_list names existing servers, and each pod's servers are listed together."""
    if str(table.version) != "1.2":
        return
    pods = table.super_pods
    if pods is MISSING:
        yield Problem("super_pod_list", MISSING, "is missing; version 1.2 tables group servers into super pods.",
                      'add "super_pod_list" or use version "1.0".', "R8 super-pod")
        return
    if not isinstance(pods, list):
        yield Problem("super_pod_list", pods, "must be an array of pods.", "see the 1.2 format.", "R8 super-pod")
        return
    index = {server.server_id: s for s, server in enumerate(table.servers) if _is_text(server.server_id)}
    pod_of: dict[str, str] = {}
    for p, pod in enumerate(pods):
        members = pod.get("server_list") if isinstance(pod, dict) else None
        if not isinstance(members, list):
            yield Problem(f"super_pod_list[{p}].server_list", members, "must be an array of {\"server_id\": ...}.",
                          "list the pod's servers.", "R8 super-pod")
            continue
        positions = []
        for m, member in enumerate(members):
            sid = member.get("server_id") if isinstance(member, dict) else None
            path = f"super_pod_list[{p}].server_list[{m}].server_id"
            if not isinstance(sid, str) or sid not in index:
                yield Problem(path, sid, "names no server of server_list.",
                              "list only servers that appear in server_list.", "R8 super-pod")
                continue
            if sid in pod_of:
                yield Problem(path, sid, f"is already in super pod {pod_of[sid]}.",
                              "put each server in one pod.", "R8 super-pod")
                continue
            pod_of[sid] = str(pod.get("super_pod_id", p))
            positions.append(index[sid])
        if positions and max(positions) - min(positions) + 1 != len(positions):
            yield Problem(f"super_pod_list[{p}]", sorted(positions),
                          f"the servers of one super pod must be listed together in server_list; these sit at "
                          f"positions {sorted(positions)}.", "reorder server_list so each pod's servers are adjacent.",
                          "R8 super-pod")


PROFILES: dict[str, tuple[Rule, ...]] = {
    "atlas910": (rule_structure, rule_device_count_910, rule_device_half, rule_device_ids, rule_servers,
                 rule_rank_ids, rule_ranks, rule_server_order, rule_status, rule_super_pods),
    "a2": (rule_structure, rule_device_count_a2, rule_device_ids, rule_servers, rule_rank_ids, rule_ranks,
           rule_server_order, rule_status, rule_super_pods),
    "structure": (rule_structure, rule_rank_ids),
}
DEFAULT_PROFILE = "atlas910"
PROFILE_HELP = {
    "atlas910": "the seeds' HCCL rules for Atlas 910 (default): 1/2/4/8 devices on one server, 8xN on several",
    "a2": "Atlas A2: any 1-8 devices per server, the same count on every server",
    "structure": "only that the table can be interpreted and its ranks are 0..N-1, each once (any device count, "
                 "no HCCL rules)",
}


# what a network check needs of any table, whatever its profile: each server once, each device its own address
NETWORK_RULES: tuple[Rule, ...] = (rule_servers, rule_device_ids)


def validate(table: RankTable, profile: str = DEFAULT_PROFILE, rules: tuple[Rule, ...] = ()) -> list[Problem]:
    """Every problem the profile's rules (and ``rules``) find, errors and warnings, in rule order; in a 2.0
    table's terms (``rank_list[i]``) when its servers were made from its ranks."""
    found = [problem for rule in dict.fromkeys((*PROFILES[profile], *rules)) for problem in rule(table)]
    return [_in_table_terms(table, problem) for problem in found] if table.paths else said_once(table, found)


def _in_table_terms(table: RankTable, problem: Problem) -> Problem:
    """``problem`` with every ``server_list[s].device[d]`` said as the ``rank_list[i]`` it came from."""
    import dataclasses
    import re

    def place(match: re.Match) -> str:
        server, device = match.group(1), match.group(2)
        if device is not None:
            return table.paths.get(f"server_list[{server}].device[{device}]", match.group(0))
        return table.paths.get(f"server_list[{server}]", match.group(0))

    pattern = re.compile(r"server_list\[(\d+)\](?:\.device(?:\[(\d+)\])?)?")
    path = table.paths.get(problem.path, pattern.sub(place, problem.path))
    return dataclasses.replace(problem, path=path, message=pattern.sub(place, problem.message),
                               fix=pattern.sub(place, problem.fix))


def errors(problems: list[Problem]) -> list[Problem]:
    return [p for p in problems if p.severity == "error"]


def grouped(problems: list[Problem]) -> list[tuple[Problem, int]]:
    """Problems that share severity, rule, value, message and fix, as one problem whose path names every
    place compactly, with how many it stands for: one mistake made on 16 devices reads as one line, not 16.
    Works on any path text (``server_list[s].device[d]...``, a 2.0 table's ``rank_list[i]...``)."""
    import dataclasses
    import json

    groups: dict[tuple, list[Problem]] = {}
    for problem in problems:
        value = "<missing>" if problem.value is MISSING else json.dumps(problem.value, default=str, sort_keys=True)
        groups.setdefault((problem.severity, problem.rule, value, problem.message, problem.fix), []).append(problem)
    return [(members[0] if len(members) == 1 else
             dataclasses.replace(members[0], path=compact_paths([p.path for p in members])), len(members))
            for members in groups.values()]


MAX_PATH_PIECES = 4   # a grouped path shows at most this many pieces, then "and N more"


def compact_paths(paths: list[str]) -> str:
    """Paths that differ only in their [N] indices as one: ``server_list[0..1].device[0..7].device_ip``;
    indices that do not fill a product are split into pieces (``a[0].b[0..7], a[1].b[0..3]``)."""
    import re

    shapes: dict[tuple[str, ...], list[tuple[int, ...]]] = {}
    for path in dict.fromkeys(paths):
        parts = re.split(r"\[(\d+)\]", path)
        rows = shapes.setdefault(tuple(parts[0::2]), [])
        rows.append(tuple(int(n) for n in parts[1::2]))
    pieces = [piece for texts, rows in shapes.items() for piece in _pieces(rows, list(texts))]
    if len(pieces) > MAX_PATH_PIECES:
        return ", ".join(pieces[:MAX_PATH_PIECES - 1]) + f" and {len(pieces) - MAX_PATH_PIECES + 1} more"
    return ", ".join(pieces)


def _pieces(rows: list[tuple[int, ...]], texts: list[str]) -> list[str]:
    """``texts`` joined by the indices of ``rows``, as few pieces as grouping the first index by what
    follows it allows."""
    if not rows[0]:
        return [texts[0]]
    tails: dict[tuple[str, ...], list[int]] = {}
    for first in dict.fromkeys(row[0] for row in rows):
        rest = _pieces([row[1:] for row in rows if row[0] == first], texts[1:])
        tails.setdefault(tuple(rest), []).append(first)
    return [f"{texts[0]}[{_index_ranges(firsts)}]{tail}" for rest, firsts in tails.items() for tail in rest]


def _index_ranges(numbers: list[int]) -> str:
    """[0, 1, 2, 5] -> "0..2,5" (``..``, since a path's reader might take 0-2 for subtraction)."""
    from launcher.base.numlists import format_ranges

    return ",".join(part.replace("-", "..") for part in format_ranges(numbers).split(","))


def require_valid(table: RankTable, profile: str, what: str) -> None:
    """Refuse a table that breaks the profile's rules (UsageError, exit 2), quoting the first rule broken."""
    bad = errors(validate(table, profile))
    if bad:
        more = f" (and {len(bad) - 1} more error(s))" if len(bad) > 1 else ""
        accepting = [other for other in PROFILES if other != profile and not errors(validate(table, other))]
        hint = (f"; --profile {' or '.join(accepting)} would accept it" if accepting
                else "; no profile accepts it")
        raise UsageError(f"{what} breaks rule {bad[0].rule} of profile {profile}: {bad[0].path}: "
                         f"{bad[0].message.rstrip('.')}{more}{hint}")


def summary(table: RankTable) -> dict:
    """A short description of a table for people and scripts."""
    servers = []
    for server in table.servers:
        ranks = sorted(r for r in (dev.rank for dev in server.devices) if r is not None)
        servers.append({"server_id": server.server_id if server.server_id is not MISSING else None,
                        "devices": [dev.device for dev in server.devices],
                        "ranks": [ranks[0], ranks[-1]] if ranks else []})
    return {"version": None if table.version is MISSING else table.version,
            "servers": len(table.servers), "devices": table.device_count, "server_list": servers}
