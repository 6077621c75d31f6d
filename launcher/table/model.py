"""HCCL rank tables: typed model, tolerant parsing, faithful writing.

A rank table is the JSON file HCCL reads to learn which devices take part in a
job (``server_list[].device[]`` with ``device_id``, ``device_ip``, ``rank_id``).
Real tables are written by hand, by ``hccl_tools.py`` and by merge scripts, so
numbers arrive as JSON strings ("3") or integers (3) and keys come in any order.

Parsing here never rejects a table for its *content*: it keeps every value as
found (so the validator can quote the offending value with its JSON path) and
records only shape problems it cannot represent (``server_list`` not a list, a
device that is not an object).  Unknown keys are kept in ``extra`` and written
back unchanged.  Only unreadable input (bad JSON, top level not an object)
raises ``RankTableError``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from launcher.base.border import Refused, parse_json
from launcher.base.jsontext import readable

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from typing import Any

KNOWN_VERSIONS = ("1.0", "1.2", "2.0")
RANK_LIST = "rank_list"   # the layout of version 2.0 tables (ascend-operator): ranks, no servers
MAX_NUMBER = 10**9 - 1   # larger device or rank ids are not numbers HCCL could mean
SHOWN_VALUE_CHARS = 80   # a value quoted in a message is cut here


class RankTableError(Exception):
    """The file cannot be read as a rank table at all (I/O error, malformed JSON)."""


@dataclass(frozen=True)
class Problem:
    """One finding about a rank table: where, what value, what is wrong, how to fix it."""

    path: str
    value: Any
    message: str
    fix: str
    rule: str
    severity: str = "error"  # "error" or "warning"

    def as_dict(self) -> dict:
        return {"severity": self.severity, "rule": self.rule, "path": self.path,
                "value": None if self.value is MISSING else self.value, "message": self.message, "fix": self.fix}

    def __str__(self) -> str:
        from launcher.base.console import printable

        shown = "<missing>" if self.value is MISSING else json.dumps(self.value, ensure_ascii=False)
        if len(shown) > SHOWN_VALUE_CHARS:
            shown = f"{shown[:SHOWN_VALUE_CHARS]}... ({len(shown)} characters)"
        return printable(f"{self.severity}: [{self.rule}] {self.path} = {shown}: {self.message} Fix: {self.fix}")


class _Missing:
    """Marks a key absent from the JSON, which differs from an explicit null or ""."""

    def __repr__(self) -> str:
        return "<missing>"

    def __bool__(self) -> bool:
        return False


MISSING: Any = _Missing()


def as_int(value: Any) -> int | None:
    """The integer a rank-table number means, or None when it is not one.

    HCCL accepts "3" and 3 alike; booleans, floats, blanks, signs and numbers of ten or more digits are
    not numbers here.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= MAX_NUMBER else None
    if isinstance(value, str) and value.strip().isdigit() and value.strip().isascii() \
            and len(value.strip()) <= len(str(MAX_NUMBER)):
        number = int(value.strip())
        return number if number <= MAX_NUMBER else None
    return None


@dataclass
class Device:
    device_id: Any = MISSING
    device_ip: Any = MISSING
    rank_id: Any = MISSING
    extra: dict = field(default_factory=dict)

    @property
    def rank(self) -> int | None:
        return as_int(self.rank_id)

    @property
    def device(self) -> int | None:
        return as_int(self.device_id)


@dataclass(frozen=True)
class Placed:
    """A device of a validated table as the launch uses it: its rank and its device id, both numbers."""

    rank: int
    device: int
    entry: Device


@dataclass
class Server:
    server_id: Any = MISSING
    devices: list[Device] = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    device_list_raw: Any = MISSING  # the "device" value when it was not a list

    def placed(self) -> list[Placed]:
        """This server's devices in rank order, ranks and device ids as numbers: what a table that passed its
        rules (``rules.require_valid``: S structure checks both) holds.  A device without them means the table
        was never validated, a programming error: RankTableError."""
        found = []
        for index, dev in enumerate(self.devices):
            rank, device = dev.rank, dev.device
            if rank is None or device is None:
                raise RankTableError(f"device[{index}] of server {self.server_id!r} has no numeric rank_id and "
                                     f"device_id: the table was used before it was validated")
            found.append(Placed(rank, device, dev))
        return sorted(found, key=lambda p: p.rank)


@dataclass
class RankTable:
    version: Any = MISSING
    server_count: Any = MISSING
    servers: list[Server] = field(default_factory=list)
    status: Any = MISSING
    super_pods: Any = MISSING
    extra: dict = field(default_factory=dict)
    shape_problems: list[Problem] = field(default_factory=list)
    layout: str = "server_list"   # or RANK_LIST: servers were made from a 2.0 table's ranks, one per pod
    paths: dict = field(default_factory=dict)   # RANK_LIST: "server_list[s].device[d]" -> "rank_list[i]"

    @property
    def devices(self) -> list[tuple[int, int, Device]]:
        """(server index, device index, device) for every device, in file order."""
        return [(s, d, dev) for s, srv in enumerate(self.servers) for d, dev in enumerate(srv.devices)]

    @property
    def device_count(self) -> int:
        return sum(len(s.devices) for s in self.servers)


def _shape(path: str, value: Any, expected: str) -> Problem:
    return Problem(path, value, f"must be {expected}.", f"make {path} {expected}.", "S structure")


def _pop(obj: dict, key: str) -> Any:
    return obj.pop(key) if key in obj else MISSING


def from_obj(obj: Any) -> RankTable:
    """Build a RankTable from parsed JSON, keeping every value and unknown key."""
    if not isinstance(obj, dict):
        raise RankTableError(f"top level must be a JSON object, found {type(obj).__name__}")
    obj = dict(obj)
    table = RankTable(version=_pop(obj, "version"), server_count=_pop(obj, "server_count"),
                      status=_pop(obj, "status"), super_pods=_pop(obj, "super_pod_list"))
    if RANK_LIST in obj:
        return _from_rank_list(table, obj)
    server_list = _pop(obj, "server_list")
    table.extra = obj
    if server_list is MISSING:
        table.shape_problems.append(Problem("server_list", MISSING, "is missing.",
                                            "add a server_list array with one object per server.",
                                            "S structure"))
        return table
    if not isinstance(server_list, list):
        table.shape_problems.append(_shape("server_list", server_list, "an array of server objects"))
        return table
    for s, raw_server in enumerate(server_list):
        if not isinstance(raw_server, dict):
            table.shape_problems.append(_shape(f"server_list[{s}]", raw_server, "an object"))
            table.servers.append(Server())
            continue
        raw_server = dict(raw_server)
        server = Server(server_id=_pop(raw_server, "server_id"))
        devices = _pop(raw_server, "device")
        server.extra = raw_server
        if not isinstance(devices, list):
            server.device_list_raw = devices
            table.shape_problems.append(
                Problem(f"server_list[{s}].device", devices,
                        "is missing." if devices is MISSING else "must be an array of device objects.",
                        "give each server a device array.", "S structure"))
        else:
            for d, raw_dev in enumerate(devices):
                if not isinstance(raw_dev, dict):
                    table.shape_problems.append(_shape(f"server_list[{s}].device[{d}]", raw_dev, "an object"))
                    server.devices.append(Device())
                    continue
                raw_dev = dict(raw_dev)
                server.devices.append(Device(device_id=_pop(raw_dev, "device_id"),
                                             device_ip=_pop(raw_dev, "device_ip"),
                                             rank_id=_pop(raw_dev, "rank_id"), extra=raw_dev))
        table.servers.append(server)
    return table


def _from_rank_list(table: RankTable, obj: dict) -> RankTable:
    """A version 2.0 table (ascend-operator's ``rank_list``: rank_id, device_id, local_id, level_list per rank,
    no server per rank) as servers: one per pod, a pod's ranks being a run whose local_id ascends (each pod
    numbers its devices from its first).  Problems name the ``rank_list`` entries (``paths``)."""
    table.layout = RANK_LIST
    if table.server_count is not MISSING:   # "" in the operator's 2.0 files: kept as written, not a count
        obj["server_count"] = table.server_count
        table.server_count = MISSING
    ranks = obj.pop(RANK_LIST)
    table.extra = obj
    table.paths["server_list"] = RANK_LIST
    if not isinstance(ranks, list):
        table.shape_problems.append(_shape(RANK_LIST, ranks, "an array of rank objects"))
        return table
    previous = None
    for i, raw in enumerate(ranks):
        if not isinstance(raw, dict):
            table.shape_problems.append(_shape(f"{RANK_LIST}[{i}]", raw, "an object"))
            raw = {}
        raw = dict(raw)
        local = as_int(raw.get("local_id"))
        if not table.servers or local is not None and previous is not None and local <= previous:
            table.servers.append(Server(server_id=f"pod{len(table.servers)}"))
        previous = local if local is not None else previous
        server = table.servers[-1]
        s, d = len(table.servers) - 1, len(server.devices)
        table.paths[f"server_list[{s}].device[{d}]"] = f"{RANK_LIST}[{i}]"
        server.devices.append(Device(device_id=_pop(raw, "device_id"), rank_id=_pop(raw, "rank_id"), extra=raw))
    start = 0
    for s, server in enumerate(table.servers):
        end = start + len(server.devices) - 1
        table.paths[f"server_list[{s}]"] = f"{RANK_LIST}[{start}..{end}] (pod {s})"
        start = end + 1
    return table


def _rank_list_obj(table: RankTable) -> dict:
    out: dict = {}
    _put(out, "status", table.status)
    out.update(table.extra)
    _put(out, "version", table.version)
    rank_list = []
    for dev in (dev for server in table.servers for dev in server.devices):
        entry: dict = {}
        _put(entry, "rank_id", dev.rank_id)
        _put(entry, "device_id", dev.device_id)
        entry.update(dev.extra)
        rank_list.append(entry)
    out[RANK_LIST] = rank_list
    return out


MAX_TABLE_BYTES = 64 << 20   # a 4,096-server table is about 4 MiB


def _json_mistake(text: str, exc: json.JSONDecodeError) -> str:
    """What is wrong with the JSON, where: a trailing comma (JSON has none, an editor's habit adds one) said
    plainly at the comma, text cut short said so, anything else in the parser's words."""
    before = text[:exc.pos].rstrip()
    if text[exc.pos:exc.pos + 1] in ("}", "]") and before.endswith(","):
        comma = len(before) - 1
        line, column = text.count("\n", 0, comma) + 1, comma - text.rfind("\n", 0, comma)
        return (f"malformed JSON at line {line}, column {column}: a comma before the closing "
                f"'{text[exc.pos]}' (JSON allows no trailing comma: remove it)")
    if exc.pos >= len(text.rstrip()):
        return f"malformed JSON at line {exc.lineno}, column {exc.colno}: the text ends before the JSON does " \
               f"(a file cut short?)"
    return f"malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"


def loads(text: str) -> RankTable:
    """Parse rank-table JSON text; malformed JSON names its line and column, hostile JSON is refused plainly.

    NaN, Infinity and numbers too large to be finite are refused (they would be written back as bare ``NaN``,
    which is not JSON); so are nesting and integers past the border's bounds (``base.border``), and text holding
    a lone UTF-16 surrogate (``"\\ud800"``), which no output could print.
    """
    if not text.strip():
        raise RankTableError("the file is empty")
    try:
        obj = parse_json(text, "the rank table")
    except Refused as exc:
        if isinstance(exc.__cause__, json.JSONDecodeError):
            raise RankTableError(_json_mistake(text, exc.__cause__)) from None
        raise RankTableError(str(exc).removeprefix("the rank table: ")) from None
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise RankTableError("the JSON holds a lone UTF-16 surrogate (an escape such as \\ud800 without its "
                             "pair), which is not text") from None
    except RecursionError:
        raise RankTableError("the JSON is nested too deeply to be a rank table") from None
    return from_obj(obj)


def load(path: str) -> RankTable:
    """Read and parse a rank table file: a regular file of at most MAX_TABLE_BYTES."""
    from launcher.base.userfiles import read_text
    from launcher.errors import UsageError

    try:
        text = read_text(path, "rank table", MAX_TABLE_BYTES)
    except UsageError as exc:
        raise RankTableError(str(exc)) from None
    return loads(text)


def _put(out: dict, key: str, value: Any) -> None:
    if value is not MISSING:
        out[key] = value


def to_obj(table: RankTable) -> dict:
    """The table as JSON-ready data, in HCCL's customary key order, unknown keys kept."""
    if table.layout == RANK_LIST:
        return _rank_list_obj(table)
    out: dict = {}
    _put(out, "version", table.version)
    _put(out, "server_count", table.server_count)
    servers = []
    for server in table.servers:
        s: dict = {}
        _put(s, "server_id", server.server_id)
        if server.device_list_raw is not MISSING:
            s["device"] = server.device_list_raw
        else:
            devices = []
            for dev in server.devices:
                d: dict = {}
                _put(d, "device_id", dev.device_id)
                _put(d, "device_ip", dev.device_ip)
                _put(d, "rank_id", dev.rank_id)
                d.update(dev.extra)
                devices.append(d)
            s["device"] = devices
        s.update(server.extra)
        servers.append(s)
    out["server_list"] = servers
    _put(out, "super_pod_list", table.super_pods)
    _put(out, "status", table.status)
    out.update(table.extra)
    return out


def dumps(table: RankTable) -> str:
    """The table's JSON, indented by 4 as hccl_tools writes it while small (``jsontext``)."""
    return readable(to_obj(table), indent=4) + "\n"


def dump(table: RankTable, path: str) -> None:
    """Write the table atomically, so a reader (HCCL, another host) never sees half a file."""
    from launcher.base.atomic import write_atomically

    text = dumps(table)
    write_atomically(path, lambda fh: fh.write(text), permissions=0o666)


def numbered_like(template: Any, number: int) -> Any:
    """``number`` written in the style of ``template``: a string where the table used strings."""
    return number if isinstance(template, int) and not isinstance(template, bool) else str(number)
