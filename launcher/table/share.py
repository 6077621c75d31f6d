"""Which server of a rank table is this host: the share of the job dlaunch runs here.

In order: ``--server-id``; ``--rank-start K`` (the server whose first rank is K,
as the seeds' run_cluster.sh says it); a one-server table; the one server whose
``container_ip`` (a pod's address in ascend-operator's tables), else
``server_id``, else ``host_ip`` is one of this host's names or addresses (a
pod's ``POD_IP``/``XDL_IP`` included); the node index a scheduler sets (Slurm's
``SLURM_NODEID``; Open MPI's ``OMPI_COMM_WORLD_RANK`` when mpirun started one
dlaunch per node; an operator's pod index, ``launcher.host.pods``); else one error
that lists the table's servers.
"""

from __future__ import annotations

from collections.abc import Mapping

from launcher.base.border import is_number
from launcher.errors import UsageError
from launcher.table.model import RankTable


def _node_index(environ) -> tuple[str, str] | None:
    """(variable, value) of a scheduler's node index, if one is set: Slurm's, Open MPI's, or the pod's index an
    operator gave (``launcher.host.pods``)."""
    from launcher.host.pods import detect

    if is_number(environ.get("SLURM_NODEID")):
        return "SLURM_NODEID", environ["SLURM_NODEID"]
    if environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") == "1" and is_number(environ.get("OMPI_COMM_WORLD_RANK")):
        return "OMPI_COMM_WORLD_RANK", environ["OMPI_COMM_WORLD_RANK"]
    pod = detect(environ)
    if pod is not None and pod.node_rank is not None:
        return f"the pod's index from {pod.operator} ({pod.said})", str(pod.node_rank)
    return None


def _matching(table: RankTable, names: set[str], field: str) -> list[int]:
    return [i for i, server in enumerate(table.servers)
            if str(server.server_id if field == "server_id" else server.extra.get(field)) in names]


def _servers_listed(table: RankTable) -> str:
    parts = []
    for server in table.servers:
        ranks = [dev.rank for dev in server.placed()]   # select_server's tables are validated
        parts.append(f"{server.server_id} (ranks {ranks[0]}-{ranks[-1]})" if ranks else str(server.server_id))
    return ", ".join(parts)


def this_host_names() -> set[str]:
    """Every name and address this host answers to, its FQDN included (``host.devices.host_names``)."""
    from launcher.host.devices import host_names

    return host_names(resolve=True)


def select_server(table: RankTable, server_id: str | None = None, rank_start: int | None = None, *,
                  environ: Mapping[str, str], host_names=this_host_names) -> int:
    """Index of this host's server in ``table.servers`` (a table that passed ``rules.require_valid``);
    ``environ`` is the process's environment (a scheduler's node index, a pod's address)."""
    if server_id is not None:
        for index, server in enumerate(table.servers):
            if server.server_id == server_id:
                return index
        raise UsageError(f"--server-id {server_id} is not in the rank table; its servers: {_servers_listed(table)}")
    if rank_start is not None:
        for index, server in enumerate(table.servers):
            if server.devices and server.placed()[0].rank == rank_start:
                return index
        raise UsageError(f"no server's ranks start at --rank-start {rank_start}; "
                         f"the table's servers: {_servers_listed(table)}")
    if len(table.servers) == 1:
        return 0
    from launcher.host.pods import own_addresses

    names = host_names() | own_addresses(environ)
    # a pod's own address first (ascend-operator's container_ip): several pods may share a node's server_id
    for field in ("container_ip", "server_id", "host_ip"):
        matches = _matching(table, names, field)
        if len(matches) == 1:
            return matches[0]
    scheduled = _node_index(environ)
    if scheduled:
        var, value = scheduled
        if int(value) < len(table.servers):
            return int(value)
        raise UsageError(f"{var}={value} but the rank table has only {len(table.servers)} servers")
    raise UsageError(f"cannot tell which server of the rank table this host is; pass --rank-start or --server-id. "
                     f"The table's servers: {_servers_listed(table)}")


def master_address(table: RankTable) -> str:
    """MASTER_ADDR by default: rank 0's server (its container_ip in an operator's table, a pod's address;
    else its server_id, the host's address); 127.0.0.1 on one host."""
    if len(table.servers) == 1:
        return "127.0.0.1"
    return rank_zero_address(table) or "127.0.0.1"


def rank_zero_address(table: RankTable) -> str | None:
    """The address of rank 0's server: a pod's container_ip in an operator's table, else its server_id; None
    when the table names none (a version 2.0 table's pods have only the names dlaunch gives them, ``pod0``)."""
    from launcher.table.model import RANK_LIST

    for server in table.servers:
        if any(dev.rank == 0 for dev in server.devices):
            found = server.extra.get("container_ip") or (server.server_id if table.layout != RANK_LIST else None)
            return str(found) if found else None
    return None


def read_table(path: str) -> tuple[str, RankTable]:
    """A rank-table file's text (hosts over SSH get it as is, unknown fields and all) and its parsed form.

    The one "load, name the file in the error" of every command that takes a table to launch or merge.
    """
    from launcher.base.userfiles import read_text
    from launcher.table.model import MAX_TABLE_BYTES, RankTableError, loads

    text = read_text(path, "rank table", MAX_TABLE_BYTES)
    try:
        return text, loads(text)
    except RankTableError as exc:
        raise UsageError(f"rank table {path}: {exc}") from None


SETTLED = 2.0   # seconds a file that cannot be read as a table stands unchanged before its writer counts as done


def load_completed(path: str, wait: float, notice=None):
    """Load a table; poll while its status is not "completed" (an operator still writing it: ascend-operator
    says "initializing" until every pod of the job is placed) for up to ``wait`` seconds, then return what
    the file holds.  ``notice(status)`` is called once, when the first read is not complete yet.

    A file not there yet, or empty, is waited for as well (the operator writes it later); anything but a regular
    file (a directory) is refused at once, and content that is no table once it has stood unchanged for
    ``SETTLED`` seconds: a writer that stopped will not mend it.  Refusals are ``RankTableError``."""
    import os
    import stat
    import time

    from launcher.table.model import RankTableError, load

    deadline = time.monotonic() + wait
    told = False
    seen, since = None, 0.0   # the unreadable file's (size, mtime), and since when it stood so
    while True:
        try:
            table = load(path)
            if table.status == "completed" or time.monotonic() >= deadline:
                return table
            status = table.status
        except RankTableError:
            now = time.monotonic()
            if now >= deadline:
                raise
            try:
                info: os.stat_result | None = os.stat(path)
            except OSError:
                info = None
            if info is not None and not stat.S_ISREG(info.st_mode):
                raise   # a directory, a FIFO: never the table
            stamp = (info.st_size, info.st_mtime_ns) if info is not None and info.st_size else None
            if stamp is not None and stamp == seen and now - since >= SETTLED:
                raise
            if stamp != seen:
                seen, since = stamp, now
            status = "not there yet" if info is None else "empty" if stamp is None else "unreadable"
        if notice is not None and not told:
            notice(status)
            told = True
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
