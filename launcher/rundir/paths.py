"""The names of a run directory's files and folders: every path of a run is spelled here once.

The layout, version 2: <output>/<run id>/ holds plan[.<host>].json, rank_table[.<host>].json, pids[.<host>].json,
summary[.<host>].json (and summary.head.json under --ssh), scheduler/ (MindSpore's), and rank_NNN/ per global rank
with output[.K].log, env[.K].log, heartbeat and ckpt/. Version 1 (dlaunch 0.1) had the same files; its plans lack
"layout", "peers" and "scheduler", which readers default.
"""

from __future__ import annotations

import os
import re
import time

from launcher.errors import UsageError

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    pass


_RANK_DIR = re.compile(r"^rank_(\d+)$")   # rank_dir_name's names
RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
LATEST = "latest"   # the link to the newest run: a reserved name, never a run id
LAYOUT_VERSION = 2
HEAD_SUMMARY = "summary.head.json"  # the head's summary of a cluster --ssh job


def attempt_name(stem: str, ext: str, attempt: int) -> str:
    """``output.log`` for the first attempt, ``output.1.log`` after the first restart: nothing overwritten."""
    return f"{stem}.{ext}" if attempt == 0 else f"{stem}.{attempt}.{ext}"


def attempt_file(directory: str, stem: str, ext: str, attempt: int) -> str:
    return os.path.join(directory, attempt_name(stem, ext, attempt))


def host_suffix(server_id: str) -> str:
    """What a host's own files in a shared run directory carry: ``plan.<server_id>.json``."""
    return "." + re.sub(r"[^A-Za-z0-9._-]", "_", str(server_id))


def rank_dir_name(rank: int, world_size: int) -> str:
    width = max(3, len(str(max(world_size - 1, 0))))
    return f"rank_{rank:0{width}d}"


def rank_dirs(run_dir: str) -> dict[int, str]:
    """Global rank -> its rank directory, for every rank directory in the run."""
    found: dict[int, str] = {}
    try:
        entries = os.scandir(run_dir)   # is_dir() from the listing itself: no stat per rank (1,024 at the end)
    except OSError:
        return found
    with entries:
        for entry in entries:
            match = _RANK_DIR.match(entry.name)
            if match and entry.is_dir():
                found[int(match[1])] = entry.path
    return found


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + os.urandom(2).hex()   # secrets.token_hex, without hmac and hashlib


MAX_RUN_ID = 128   # characters of a run id (RUN_ID_PATTERN)


def derived_run_id(run_id: str, suffix: str) -> str:
    """The id of a run made from ``run_id`` (a requeued attempt's ``<run id>.requeue2``), as valid as it: where
    the two would pass the 128 characters of a run id, the id's head and a hash of the whole id come before the
    suffix, so two long ids that share a head still get two names."""
    name = run_id + suffix
    if len(name) <= MAX_RUN_ID:
        return name
    import zlib

    tag = f"-{zlib.crc32(run_id.encode()):08x}"
    return run_id[:MAX_RUN_ID - len(tag) - len(suffix)] + tag + suffix


def fresh_run_id(output_dir: str, run_id: str, host_suffix: str) -> str:
    """``run_id``, or ``run_id.1``, ``.2``, ...: the first whose run directory holds no plan of this host's (its
    ``plan<host suffix>.json``). A torchrun line with a fixed --rdzv-id, launched again, gets a directory of its
    own; every host of one launch, each counting its own plans, gets the same one."""
    for count in range(100000):
        candidate = run_id if count == 0 else derived_run_id(run_id, f".{count}")
        if not os.path.lexists(os.path.join(output_dir, candidate, f"plan{host_suffix}.json")):
            return candidate
    return derived_run_id(run_id, f".{new_run_id()}")


def check_run_id(run_id: str) -> str:
    if not RUN_ID_PATTERN.match(run_id):
        raise UsageError(f"bad --run-id {run_id[:40]!r}: use letters, digits, '.', '_' and '-' "
                         f"(at most {MAX_RUN_ID})")
    if run_id == LATEST:
        raise UsageError(f"--run-id {LATEST} is reserved: {LATEST} is the link to the newest run")
    return run_id


def resolve(path: str) -> str:
    """A run directory from a path that may be an output directory (uses its ``latest`` link, never a
    directory or file that only has the name)."""
    latest = os.path.join(path, LATEST)
    return os.path.realpath(latest) if os.path.islink(latest) and os.path.isdir(latest) else os.path.realpath(path)
