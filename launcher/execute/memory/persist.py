"""A rank's newest complete memory step onto the disk, with ``checkpoint/store.py``'s guarantees, never a torn one.

The slot ``newest.json`` names is opened, locked shared without waiting (a rank writing it holds it exclusive:
then it is not the newest any more, and nothing is read), the record read again (it must still name that slot
and generation) and the archive's last bytes checked for the generation's comment; only then are its bytes
``[0, length)`` copied, under the lock, into the rank's checkpoint directory under the step's dlaunch name
(temporary, fsync, ``superseded/``, one rename, rotation by the record's ``keep_max``, the ``.replica`` mark).
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass

from launcher.base import border
from launcher.checkpoint import tier
from launcher.checkpoint.store import range_writer, store_file

TAIL = 64   # bytes read from the archive's end: the comment ``dlaunch generation=<G>`` fits


@dataclass(frozen=True)
class Persisted:
    """A step dlaunch put on the disk from memory."""

    rank: int
    record: tier.Record
    path: str


def newest(slots: str, name: str = tier.NEWEST_FILE) -> tier.Record | None:
    """The rank's commit record (``tier.PENDING_FILE``: the newest step it asked to persist), or None (no such save
    yet, or a record that cannot be read)."""
    try:
        return tier.read_record(slots, name)
    except border.Refused:
        return None


def at_the_end(slots: str) -> list[tier.Record]:
    """What dlaunch persists of a rank once it stopped: the steps it asked for, its newest step, and the one before
    it (still whole in the other slot unless a save was writing it), so ranks stopped one save apart share a step."""
    found = [*to_persist(slots), newest(slots), newest(slots, tier.PREVIOUS_FILE)]
    return [record for record in dict.fromkeys(found) if record is not None]


def to_persist(slots: str) -> list[tier.Record]:
    """The steps of a rank dlaunch persists when it looks: the newest it asked for (kept by the rank until it is on
    disk, however many saves came since) and the newest, if asked for."""
    found = [newest(slots, tier.PENDING_FILE), newest(slots)]
    return [record for record in dict.fromkeys(found) if record is not None and record.persist]


def on_disk(ckpt_dir: str, record: tier.Record) -> bool:
    """Whether the step is already in the rank's checkpoint directory (the rank saved it too, or dlaunch did)."""
    return os.path.isfile(os.path.join(ckpt_dir, record.name))


def whole(fd: int, record: tier.Record) -> bool:
    """Whether the open slot holds ``record``'s archive, finished (its generation's comment at ``length``)."""
    try:
        if os.fstat(fd).st_size < record.length:
            return False
        start = max(record.length - TAIL, 0)
        return tier.ends_with_generation(os.pread(fd, record.length - start, start), record.generation)
    except OSError:
        return False


def persist(rank: int, slots: str, ckpt_dir: str, record: tier.Record | None = None) -> Persisted | None:
    """Copy the rank's newest complete step (``record`` as read before, else read now) to ``ckpt_dir``; None when
    there is none, it is being replaced, or it is not whole. A step already on disk is not copied again."""
    record = record or newest(slots)
    if record is None or on_disk(ckpt_dir, record):
        return None
    try:
        fd = os.open(tier.slot_path(slots, record.slot), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return None   # the rank is writing it: a newer step is on its way
        if not whole(fd, record):   # its generation's comment where it ends: that step, whole, not a later one
            return None
        path = store_file(range_writer(fd, record.length), ckpt_dir, record.name, record.prefix, record.keep_max,
                          replicated=record.replicated)
        return Persisted(rank, record, path)
    finally:
        os.close(fd)
