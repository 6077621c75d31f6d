"""TorchFT replica groups: a job of N torchrun-style groups, each with its own store, reaching one lighthouse.

TorchFT (pytorch/torchft) heals a job without stopping it: each replica group is an ordinary group (its ranks
numbered 0..S-1, its own ``MASTER_ADDR:MASTER_PORT`` store), every group's rank 0 heartbeats to one lighthouse
(``TORCHFT_LIGHTHOUSE``), which forms a quorum of the groups alive; a group that fails is started again alone
and recovers its weights from a live peer while the others step on with fewer replicas.  torchft's own launch
shapes (``torchft/torchx.py``, its Slurm runner) start one torchrun per group with ``REPLICA_GROUP_ID`` and
``NUM_REPLICA_GROUPS``; ``--replica-groups N`` gives the same environment from one dlaunch:

- global ranks are split into N groups of S = world / N consecutive ranks, each inside one host;
- each group's store is a small process of its own (torchrun's agent store: torchft's ``Manager`` connects to
  it as a client, ``TORCHELASTIC_USE_AGENT_STORE`` is "True"), started again with the group, so a restarted
  group never reads its previous life's keys;
- the lighthouse is the one given in ``TORCHFT_LIGHTHOUSE``, or one dlaunch starts on the master host
  (torchft's ``torchft_lighthouse`` binary, beside the ranks' Python, ``--min_replicas 1``), bound to the
  address the ranks are told and no other.

Everything here is decided before anything starts, like the rest of ``plan/``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

LIGHTHOUSE_ENV = "TORCHFT_LIGHTHOUSE"
LIGHTHOUSE_BINARY = "torchft_lighthouse"
SERVICES_DIR = "torchft"   # in the run directory: each group's store and the lighthouse, their logs
# A group's store: torch's TCPStore as torchrun's agent hosts it, in the ranks' own interpreter (the launcher
# never imports torch). It lives until it is stopped (its group restarts, or the job ends). TCPStore listens
# on every address by itself; with "only" it is handed a socket listening on its address alone.
STORE_PROGRAM = ("import signal, socket, sys; from torch.distributed import TCPStore; "
                 "addr, port, only = sys.argv[1], int(sys.argv[2]), sys.argv[3] == 'only'; "
                 "family = socket.AF_INET6 if ':' in addr else socket.AF_INET; "
                 "bound = socket.create_server((addr, port), family=family) if only else None; "
                 "store = TCPStore(addr, port, is_master=True, wait_for_workers=False, "
                 "**({'master_listen_fd': bound.fileno()} if bound else {})); "
                 "print('store of replica group', sys.argv[4], 'on', addr, port, flush=True); "
                 "signal.pause()")


@dataclass(frozen=True)
class ReplicaGroups:
    """The job's replica groups as this host sees them (``Options.replicas``)."""

    count: int
    size: int                          # ranks in each group
    store_addr: str                    # where this host's groups' stores listen (reachable by the other hosts)
    store_ports: dict[int, int]        # group id -> its store's port, for this host's groups
    lighthouse: str                    # TORCHFT_LIGHTHOUSE as every rank gets it
    lighthouse_port: int | None = None   # dlaunch starts the lighthouse on this port (master host only)
    lighthouse_binary: str = LIGHTHOUSE_BINARY
    stores_on_their_address: bool = False   # one host: every group's store listens on store_addr alone

    def group_of(self, rank: int) -> int:
        return rank // self.size

    def rank_environment(self, rank: int) -> dict[str, str]:
        """What replaces torchrun's group variables for ``rank``: its group's numbering, store and lighthouse."""
        group = self.group_of(rank)
        within = rank - group * self.size
        return {"RANK": str(within), "LOCAL_RANK": str(within), "WORLD_SIZE": str(self.size),
                "LOCAL_WORLD_SIZE": str(self.size), "ROLE_RANK": str(within), "ROLE_WORLD_SIZE": str(self.size),
                "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1",
                "MASTER_ADDR": self.store_addr, "MASTER_PORT": str(self.store_ports[group]),
                "TORCHELASTIC_USE_AGENT_STORE": "True",
                "REPLICA_GROUP_ID": str(group), "NUM_REPLICA_GROUPS": str(self.count),
                LIGHTHOUSE_ENV: self.lighthouse}

    def store_argv(self, python: str, group: int) -> list[str]:
        """A group's store. On one host it listens on the ranks' MASTER_ADDR alone (loopback by default);
        across hosts on every address, as torchrun's store does: torchft's groups reach one another's
        stores at the host's name in the rank table, which on the host itself may name loopback (127.0.1.1)."""
        where = "only" if self.stores_on_their_address else "every"
        return [python, "-c", STORE_PROGRAM, self.store_addr, str(self.store_ports[group]), where, str(group)]

    def lighthouse_argv(self) -> list[str]:
        """torchft's lighthouse: a quorum from one live group on (the others heal into it), stragglers awaited
        a few seconds at most, not torchft's minute, so a restarted group is back in the next quorum. It listens
        on the one address the ranks are told (loopback on one host, the master address across hosts), never
        on every address: torchft's lighthouse asks no one who they are, and anyone who reaches it can read
        the quorum and join it."""
        return [self.lighthouse_binary, "--min_replicas", "1", "--bind", self.lighthouse_address(),
                "--join_timeout_ms", "5000"]

    def lighthouse_address(self) -> str:
        """``host:port`` of ``TORCHFT_LIGHTHOUSE`` (``[addr]:port`` for IPv6), what the lighthouse binds."""
        return self.lighthouse.split("://", 1)[-1].rstrip("/")


def group_problem(count: int, world_size: int, server_sizes: list[int]) -> str | None:
    """Why ``--replica-groups count`` cannot split this job, or None: groups of equal size, each on one host."""
    if world_size % count:
        return f"--replica-groups {count} does not divide the job's {world_size} ranks into equal groups"
    size = world_size // count
    uneven = next((n for n in server_sizes if n % size), None)
    if uneven is not None:
        return (f"--replica-groups {count}: a group of {size} ranks would span hosts (a host runs {uneven}); "
                f"each replica group must sit on one host")
    return None


def find_lighthouse(python: str, path: str) -> str:
    """torchft's lighthouse binary: beside the ranks' Python (pip puts it there), else on PATH; the bare name
    when neither has it (its spawn then fails with a clear message)."""
    import shutil

    beside = os.path.join(os.path.dirname(python), LIGHTHOUSE_BINARY)
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which(LIGHTHOUSE_BINARY, path=path) or LIGHTHOUSE_BINARY
