"""The memory tier's layout and records: what a rank writes into memory its launcher owns, and how both read it.

A host's dlaunch owns one *area* in shared memory (``--memory-root``, default ``/dev/shm``) for the whole run::

    dlaunch-<run id>-<launcher pid>/     mode 0700, one per host's dlaunch
        owner                             "<pid> <start ticks>": whose area it is (``dlaunch prune``, the next
                                          dlaunch of the same run free an area whose owner is gone)
        rank_<NNN>/files/                 ``DLAUNCH_MEMORY_DIR``: the rank's own files at memory speed (a script's
                                          ``torch.save``, HF Trainer's ``checkpoint-N/``), mirrored to disk by dlaunch
        rank_<NNN>/slots/slot-0, slot-1   ``DLAUNCH_MEMORY_SLOTS``: ``checkpoint.save(..., memory=True)``'s two slots
        rank_<NNN>/slots/newest.json      the commit record: which slot holds the newest complete step

The area lives in a file system in memory, not in any process: a rank's death (SIGKILL included) leaves it
whole, and dlaunch's process outlives every rank, so dlaunch persists it at a failure and frees it at its exit.

**Slots.** Each slot is a ``torch.load``-able archive written in place (the same bytes ``torch.save`` would
write, storages 64-byte aligned, so ``torch.load(path, mmap=True)`` reads it without a copy), ending with the zip
comment ``dlaunch generation=<G>``. A rank writes the slot ``newest.json`` does *not* name, holding an exclusive
``flock`` on it, then replaces ``newest.json`` (one rename) to name it. A reader (dlaunch persisting, a restarted
rank loading) takes a shared ``flock`` on the slot ``newest.json`` names without waiting, reads the record again
(it must still name that slot and generation), and checks the generation in the archive's comment: a step being
written is never read as complete. A rank that finds its next slot locked (dlaunch is still persisting it) skips
that memory save rather than stall training.

**Persisting.** A step the rank asks dlaunch to persist (a multiple of ``--memory-persist-every``) is also recorded in
``persist.json``, and the rank does not write over its slot until dlaunch has put it in the rank's checkpoint
directory (the file is there): a save that would skips instead. So dlaunch, looking every half second, persists
every such step, however short the steps, at the cost of memory saves skipped while a large state is copied.
A rank clears the ending of the archive a slot held before writing it again, so a slot it was writing when killed
never passes for the step it held. Before replacing ``newest.json`` it writes the record it replaces to
``previous.json``: at a failure
dlaunch persists that step too where its slot is still whole, so ranks stopped one save apart (one had saved
step S, the other not yet) share step S - 1 on disk.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from launcher.base import border

AREA_PREFIX = "dlaunch-"
OWNER_FILE = "owner"
FILES_DIR = "files"
SLOTS_DIR = "slots"
SLOT_COUNT = 2
NEWEST_FILE = "newest.json"
PENDING_FILE = "persist.json"   # the newest step the rank asked dlaunch to persist (its slot is kept until it is)
PREVIOUS_FILE = "previous.json"   # the step before the newest, in the other slot until the next save writes it
RECORD_FORMAT = 1
RECORD_LIMIT = 4096                        # bytes of newest.json dlaunch reads
GENERATION_COMMENT = b"dlaunch generation="
DEFAULT_ROOT = "/dev/shm"


def area_name(run_id: str, pid: int) -> str:
    return f"{AREA_PREFIX}{run_id}-{pid}"


def area_owner_pid(name: str, run_id: str | None = None) -> int | None:
    """The launcher pid in an area's directory name (of ``run_id``'s run where given), or None for another name."""
    if not name.startswith(AREA_PREFIX):
        return None
    rest, _, pid = name[len(AREA_PREFIX):].rpartition("-")
    if not rest or (run_id is not None and rest != run_id):
        return None
    return border.ascii_int(pid)


def rank_dir(area: str, rank: int) -> str:
    return os.path.join(area, f"rank_{rank:03d}")


def files_dir(area: str, rank: int) -> str:
    """The rank's ``DLAUNCH_MEMORY_DIR``."""
    return os.path.join(rank_dir(area, rank), FILES_DIR)


def slots_dir(area: str, rank: int) -> str:
    """The rank's ``DLAUNCH_MEMORY_SLOTS``."""
    return os.path.join(rank_dir(area, rank), SLOTS_DIR)


def slot_path(slots: str, slot: int) -> str:
    return os.path.join(slots, f"slot-{slot}")


@dataclass(frozen=True)
class Record:
    """``newest.json``: the newest complete step in a rank's slots."""

    slot: int
    generation: int
    epoch: int
    step: int
    prefix: str
    name: str            # the checkpoint's file name on disk, ``{prefix}-{epoch}_{step}.pt``
    length: int          # bytes of the archive at the start of the slot
    persist: bool        # the rank asked for this step on disk (a step that is a multiple of N, or ``persist=True``)
    keep_max: int | None = None
    replicated: bool = False
    format: int = RECORD_FORMAT

    def to_json(self) -> dict:
        return asdict(self)


def parse_record(text: str) -> Record:
    """``newest.json``'s text as a Record; ``border.Refused`` for anything else (a rank writes it: outside text)."""
    doc = border.expect(border.parse_json(text, NEWEST_FILE), dict, NEWEST_FILE)
    number = lambda key, low=0, high=None: border.whole_number(doc.get(key), f"{NEWEST_FILE} {key}",  # noqa: E731
                                                                  low=low, high=high)
    if number("format", 1, RECORD_FORMAT) != RECORD_FORMAT:
        raise border.Refused(f"{NEWEST_FILE}: format {doc.get('format')} is not {RECORD_FORMAT}")
    prefix = border.expect(doc.get("prefix"), str, f"{NEWEST_FILE} prefix")
    name = border.expect(doc.get("name"), str, f"{NEWEST_FILE} name")
    from launcher.checkpoint import names as ckptnames

    epoch, step = number("epoch"), number("step")
    if ckptnames.parse_dlaunch(name) != (prefix, epoch, step) or os.sep in name:
        raise border.Refused(f"{NEWEST_FILE}: name {name[:80]!r} is not {prefix}-{epoch}_{step}.pt")
    keep_max = doc.get("keep_max")
    for flag in ("persist", "replicated"):
        if not isinstance(doc.get(flag, False), bool):
            found = border.expect_name(doc.get(flag))
            raise border.Refused(f"{NEWEST_FILE} {flag}: {found} where true or false belongs")
    return Record(slot=number("slot", 0, SLOT_COUNT - 1), generation=number("generation"), epoch=epoch, step=step,
                  prefix=prefix, name=name, length=number("length", 22), persist=doc.get("persist", False),
                  keep_max=None if keep_max is None else number("keep_max", 1),
                  replicated=doc.get("replicated", False))


def read_record(slots: str, name: str = NEWEST_FILE) -> Record | None:
    """The rank's newest complete step in memory (``name``: ``PENDING_FILE`` for the newest it asked to persist), or
    None (no such save yet); ``border.Refused`` when unreadable."""
    text = border.read_text(os.path.join(slots, name), name, RECORD_LIMIT)
    return None if text is None else parse_record(text)


def write_record(slots: str, record: Record, name: str = NEWEST_FILE) -> None:
    """Replace ``newest.json`` (or ``name``) in one rename (memory: nothing to fsync)."""
    import json

    from launcher.base.atomic import commit, temp_beside

    fd, tmp = temp_beside(os.path.join(slots, name))
    try:
        os.write(fd, json.dumps(record.to_json()).encode())
    finally:
        os.close(fd)
    commit(tmp, os.path.join(slots, name), durable=False)


def comment(generation: int) -> bytes:
    """The zip comment that ends a slot's archive of ``generation``."""
    return GENERATION_COMMENT + str(generation).encode()


def ends_with_generation(tail: bytes, generation: int) -> bool:
    """Whether an archive whose last bytes are ``tail`` was finished as ``generation`` (its zip comment)."""
    return tail.endswith(comment(generation))
