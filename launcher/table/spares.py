"""Spare hosts: a rank table with more servers than the job runs, and the job's table made from it.

The table a user gives (``--rank-table`` with ``--spares K``) is the *pool*: every server that may run the job,
the last K standing by. The job's own table, the one HCCL and the ranks read, holds only the *active* servers,
in slot order, with rank ids numbered again 0, 1, ... in that order: a spare that takes a lost host's place
takes its slot, so every other host keeps its ranks. Each server keeps its own block (server_id, device ids,
device_ip as the pool lists it: a spare's device addresses are its own NICs', as in its hccn.conf), and the
table keeps the version, ``status: completed`` and any other field of the pool, as Ascend's operator writes a
table for the pods it runs.

Pure: no file, no process, no socket (tests/unit/table/test_spares.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.errors import UsageError
from launcher.table.model import MISSING, Device, RankTable, Server, numbered_like


@dataclass(frozen=True)
class Roster:
    """Which servers of the pool run the job (``active``, in slot order) and which one is this host's."""

    pool: RankTable
    active: tuple[int, ...]
    own: int       # this host's server index in the pool
    profile: str   # the rules every job table made from the pool must keep (table/rules.py)
    min_nodes: int | None = None   # --nnodes MIN:MAX: elastic; the job forms with MIN or more servers

    @classmethod
    def first(cls, pool: RankTable, spares: int, own: int, profile: str) -> Roster:
        """The roster a job starts with: every server but the last ``spares``."""
        if not 0 < spares < len(pool.servers):
            raise UsageError(f"--spares {spares}: the rank table has {len(pool.servers)} server(s); at least one "
                             f"must run the job and at least one stand by")
        return cls(pool, tuple(range(len(pool.servers) - spares)), own, profile)

    @classmethod
    def elastic(cls, pool: RankTable, min_nodes: int, own: int, profile: str) -> Roster:
        """--nnodes MIN:MAX: every server of the pool may run the job; none does until the job forms."""
        return cls(pool, (), own, profile, min_nodes)

    def moved(self, active) -> Roster:
        return Roster(self.pool, tuple(int(i) for i in active), self.own, self.profile, self.min_nodes)

    @property
    def slot(self) -> int | None:
        """This host's server index in the job's table; None while it stands by."""
        return self.active.index(self.own) if self.own in self.active else None

    def table(self) -> RankTable:
        return job_table(self.pool, self.active)

    def name(self, index: int) -> str:
        return str(self.pool.servers[index].server_id)

    def standing_by(self) -> list[int]:
        return [index for index in range(len(self.pool.servers)) if index not in self.active]


def job_table(pool: RankTable, active) -> RankTable:
    """The job's table: the ``active`` servers of ``pool`` in that order, ranks numbered again in server
    order (each server's devices in their own rank order), every other field as the pool has it."""
    servers = []
    rank = 0
    for index in active:
        server = pool.servers[index]
        devices = []
        for placed in server.placed():
            dev = placed.entry
            devices.append(Device(dev.device_id, dev.device_ip, numbered_like(dev.rank_id, rank), dict(dev.extra)))
            rank += 1
        servers.append(Server(server.server_id, devices, dict(server.extra)))
    names = {str(server.server_id) for server in servers}
    pods = pool.super_pods
    if isinstance(pods, list):   # version 1.2: each super pod lists only the servers the job runs
        pods = [{**pod, "server_list": [s for s in pod.get("server_list") or []
                                        if isinstance(s, dict) and str(s.get("server_id")) in names]}
                if isinstance(pod, dict) else pod for pod in pods]
    return RankTable(version=pool.version, server_count=numbered_like(pool.server_count, len(servers)),
                     servers=servers, status="completed" if pool.status is not MISSING else MISSING,
                     super_pods=pods, extra=dict(pool.extra), layout=pool.layout)


def replace_hosts(active: list[int], replaced: list[int], candidates: list[int]) -> list[int] | None:
    """``active`` with each of ``replaced`` swapped, in its slot, for the next of ``candidates``; None when
    there are fewer candidates than hosts to replace."""
    if len(candidates) < len(replaced):
        return None
    taking = iter(candidates)
    return [next(taking) if index in replaced else index for index in active]
