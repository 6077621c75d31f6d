"""A rank's side of the memory tier: ``save(..., memory=True)`` into the slots dlaunch owns, ``load`` back from them.

The layout, the commit record and the slot protocol are ``tier``'s.  A memory save:

1. takes the slot ``newest.json`` does not name (``LOCK_EX | LOCK_NB`` on it: if dlaunch holds it, persisting
   the step it held, this save is skipped, returns None and says so on stderr once per process);
2. copies the state into it with ``stage.capture``, whose pool here hands out 64-byte aligned pieces of the
   slot's mapping (``archive.Archive.reserve``): every storage lands where the archive holds it, in one copy;
3. pickles the captured structure and writes the archive's headers, pickle and trailer around the storages,
   the zip comment naming the new generation, and ``ftruncate``s the slot to the archive's length;
4. replaces ``newest.json`` (one rename) with the record of generation + 1.

The slot stays mapped between saves and its pages stay allocated (``posix_fallocate``, so a full file system
is ``ENOSPC`` rather than a SIGBUS), so from the second save on a save costs one memory copy, as the kept
buffers of ``async_save`` do.  A process killed at any point leaves ``newest.json`` naming the previous,
whole slot.

A state that does not fit ``DLAUNCH_MEMORY_BUDGET`` (bytes per rank, both slots: a slot holds half), or a
memory file system out of room, is saved to disk instead, with ``save``'s usual guarantees, after one line on
stderr naming the budget and the disk path.  So is every ``memory=True`` save where ``DLAUNCH_MEMORY_SLOTS`` is
not set (not under dlaunch, or without ``--memory-ckpt``), every one whose slots cannot be used (an
``OSError``: the directory gone, say), and every one from a child process of the rank (a DataLoader worker,
forked or spawned): the rank names itself the slots' owner in its environment (``DLAUNCH_MEMORY_OWNER``) when
this module is imported (its first use of ``checkpoint``) or at its first memory save, a forked child names
its parent there if the rank had not yet, and only the owner writes the slots.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import pickle
import sys
import threading

from launcher.base import border
from launcher.base.atomic import commit, temp_beside
from launcher.checkpoint import archive as ckptarchive
from launcher.checkpoint import names as ckptnames
from launcher.checkpoint import stage as ckptstage
from launcher.checkpoint import tier
from launcher.contract import CKPT_DIR_ENV, MEMORY_BUDGET_ENV, MEMORY_PERSIST_ENV, MEMORY_SLOTS_ENV

OWNER_ENV = "DLAUNCH_MEMORY_OWNER"    # the pid of the process that writes this rank's slots (inherited by children)
PERSIST_EVERY = 10                    # default of DLAUNCH_MEMORY_PERSIST_EVERY
OLD_ENDING = 64                       # bytes at a slot's end cleared before it is written again (the comment fits)
ALLOCATE_AHEAD = 64 << 20             # bytes of a slot allocated at a time beyond what a save used before

_said: set[str] = set()
_retired: set[tuple[str, int]] = set()    # (slots, slot) a load mapped: the next save there makes a new file


def _say_once(key: str, line: str) -> None:
    if key not in _said:
        _said.add(key)
        print(f"dlaunch checkpoint: {line}", file=sys.stderr, flush=True)


def _env_int(name: str, default: int | None, low: int = 0) -> int | None:
    text = os.environ.get(name)
    if not text:
        return default
    value = border.ascii_int(text.strip())
    if value is None or value < low:
        _say_once(f"env {name}", f"{name}={text[:40]!r} is not a whole number >= {low}; using "
                                 f"{'none' if default is None else default}")
        return default
    return value


def budget() -> int | None:
    """``DLAUNCH_MEMORY_BUDGET``: bytes this rank may hold in memory (both slots), or None (no bound)."""
    return _env_int(MEMORY_BUDGET_ENV, None, 1)


def _claim_ownership() -> None:
    """Name this process the slots' writer, for children (fork or spawn) that inherit the environment."""
    if os.environ.get(MEMORY_SLOTS_ENV) and not os.environ.get(OWNER_ENV):
        os.environ[OWNER_ENV] = str(os.getpid())


def _is_owner() -> bool:
    owner = border.ascii_int(os.environ.get(OWNER_ENV))
    return owner is None or owner == os.getpid()


class _SlotPool(ckptstage.BufferPool):
    """``stage.capture``'s pool over an archive laid out in a slot: each buffer is the archive's next storage."""

    def __init__(self, mapping, layout: ckptarchive.Archive):
        super().__init__(0)
        self.mapping, self.layout = mapping, layout
        self.pieces: dict[int, int] = {}    # data_ptr of a piece -> its index in reserve order

    def take(self, nbytes: int, pinned: bool):
        import torch

        if nbytes == 0:   # no bytes to place: an ordinary empty buffer, written as an empty record
            return torch.empty(0, dtype=torch.uint8), False
        offset = self.layout.reserve(nbytes)
        piece = torch.frombuffer(self.mapping, dtype=torch.uint8, count=nbytes, offset=offset)
        self.pieces[piece.data_ptr()] = len(self.layout.reserved) - 1
        return piece, False

    def give_back(self, buffers) -> None:
        pass


def lay_out(state, mapping, layout: ckptarchive.Archive, comment: bytes) -> int:
    """Copy ``state`` into ``layout`` (over ``mapping``) and finish it as a torch.save archive; returns its length."""
    import torch
    from torch.serialization import DEFAULT_PROTOCOL

    from launcher.checkpoint import file as ckptfile

    pool = _SlotPool(mapping, layout)
    snapshot = ckptstage.capture(state, pool)
    persistent_id, storages = ckptfile._persistent_ids(snapshot.locations)

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            return persistent_id(obj)

    with contextlib.closing(_Sink()) as sink:
        Pickler(sink, protocol=DEFAULT_PROTOCOL).dump(snapshot.state)
        pickled = sink.getvalue()
    for key, storage in storages.items():
        index = pool.pieces.get(storage.data_ptr()) if storage.data_ptr() else None
        if index is not None and layout.reserved[index][2] == storage.nbytes():
            layout.name_reserved(index, key)
            continue
        offset = layout.add(f"data/{key}", storage.nbytes())   # a storage capture did not place (an empty one)
        if storage.nbytes():
            target = torch.frombuffer(mapping, dtype=torch.uint8, count=storage.nbytes(), offset=offset)
            target.untyped_storage().copy_(storage)
            del target
    del snapshot, storages, pool
    return layout.finish(pickled, comment)


class _Sink:
    """A bytes buffer for the pickle (io.BytesIO, imported lazily, with ``close``)."""

    def __init__(self):
        import io

        self.buffer = io.BytesIO()
        self.write = self.buffer.write

    def getvalue(self) -> bytes:
        return self.buffer.getvalue()

    def close(self) -> None:
        self.buffer.close()


class NoRoom(Exception):
    """The state does not fit in memory: ``why`` says which bound (the budget, the file system)."""


class Slots:
    """This process's two slots, kept open and mapped from save to save."""

    def __init__(self, directory: str):
        self.directory, self.pid = directory, os.getpid()
        self.fds: dict[int, int] = {}
        self.maps: dict[int, mmap.mmap] = {}
        self.record: tier.Record | None = None
        self.pending: tier.Record | None = None   # the newest step asked to be persisted and not yet seen on disk
        self.read_once = False
        self.saves = 0
        self.lock = threading.Lock()      # one memory save at a time in this process
        self.budget = budget()
        stat = os.statvfs(directory)
        self.capacity = self.budget // tier.SLOT_COUNT if self.budget else stat.f_blocks * stat.f_frsize
        self.capacity = max(self.capacity & ~(mmap.PAGESIZE - 1), mmap.PAGESIZE)

    def newest(self) -> tier.Record | None:
        if not self.read_once:   # once: only this process writes the records afterwards
            self.read_once = True
            try:
                self.record = tier.read_record(self.directory)
                self.pending = tier.read_record(self.directory, tier.PENDING_FILE)
            except border.Refused as refused:
                _say_once("record", f"{refused} (starting the memory slots afresh)")
        return self.record

    def _fd(self, slot: int) -> int:
        path = tier.slot_path(self.directory, slot)
        if (self.directory, slot) in _retired:   # mapped by a load(map_memory=True): write a new file, never it
            _retired.discard((self.directory, slot))
            self.maps.pop(slot, None)            # (an export may keep the old mapping; it is never written again)
            if slot in self.fds:
                os.close(self.fds.pop(slot))
            fd, tmp = temp_beside(path)
            os.close(fd)
            commit(tmp, path, durable=False)      # the old file lives on, unnamed, while the loaded tensors map it
        if slot not in self.fds:
            flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
            self.fds[slot] = os.open(path, flags, 0o600)
        return self.fds[slot]

    def save(self, state, epoch: int, step: int, prefix: str, name: str, persist: bool | None,
             keep_max: int | None, replicated: bool) -> str | None:
        with self.lock:
            return self._save(state, epoch, step, prefix, name, persist, keep_max, replicated)

    def _save(self, state, epoch: int, step: int, prefix: str, name: str, persist: bool | None,
              keep_max: int | None, replicated: bool) -> str | None:
        newest = self.newest()
        slot = 0 if newest is None else 1 - newest.slot
        generation = (newest.generation if newest else 0) + 1
        path = tier.slot_path(self.directory, slot)
        if self.pending is not None and self.pending.slot == slot:
            if not _on_disk(self.pending):
                _say_once("pending", f"memory save of epoch {epoch} step {step} skipped: dlaunch has not yet "
                                     f"persisted step {self.pending.epoch}_{self.pending.step}, which it would "
                                     f"overwrite in {path} (said once; such saves return None, training goes on)")
                return None
            self.pending = None
        fd = self._fd(slot)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _say_once("locked", f"memory save of epoch {epoch} step {step} skipped: dlaunch is still persisting "
                                f"{path} (said once; such saves return None, training goes on)")
            return None
        try:
            length = self._write(fd, slot, state, tier.comment(generation))
            if persist is None:
                every = _env_int(MEMORY_PERSIST_ENV, PERSIST_EVERY, 1) or PERSIST_EVERY
                persist = step % every == 0   # by step, not by count: the same steps on every rank, skips or not
            record = tier.Record(slot=slot, generation=generation, epoch=epoch, step=step, prefix=prefix, name=name,
                                 length=length, persist=bool(persist), keep_max=keep_max, replicated=replicated)
            if newest is not None:   # the step it replaces: still whole in the other slot (tier.py)
                tier.write_record(self.directory, newest, tier.PREVIOUS_FILE)
            tier.write_record(self.directory, record)
            self.record = record
            if record.persist:   # kept until dlaunch has it on disk (tier.py, "Persisting")
                tier.write_record(self.directory, record, tier.PENDING_FILE)
                self.pending = record
            self.saves += 1
            return path
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _write(self, fd: int, slot: int, state, comment: bytes) -> int:
        allocated = os.fstat(fd).st_size      # the previous archive: its pages are allocated already
        if allocated >= OLD_ENDING:   # its ending cleared first: a save killed half-way is never taken for it
            os.pwrite(fd, bytes(OLD_ENDING), allocated - OLD_ENDING)
        if slot not in self.maps:              # mapped once at the slot's capacity (the file grows into it below)
            os.ftruncate(fd, self.capacity)
            try:
                self.maps[slot] = mmap.mmap(fd, self.capacity, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.ftruncate(fd, allocated)
        mapping = self.maps[slot]
        watermark = [min(allocated, self.capacity)]

        def ensure(end: int) -> None:
            """Allocate (and so extend the file over) the slot's pages up to ``end`` before they are written."""
            if end <= watermark[0]:
                return
            ahead = min(self.capacity, max(end, watermark[0] + ALLOCATE_AHEAD))
            try:
                os.posix_fallocate(fd, watermark[0], ahead - watermark[0])
            except OSError:
                os.posix_fallocate(fd, watermark[0], end - watermark[0])   # the exact need, where ahead is refused
                ahead = end
            watermark[0] = ahead

        layout = ckptarchive.Archive(mapping, ensure)
        try:
            length = lay_out(state, mapping, layout, comment)
        except (ckptarchive.ArchiveFull, OSError) as error:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)           # give the memory back: this slot is named by nothing
            if isinstance(error, ckptarchive.ArchiveFull) and self.budget:
                raise NoRoom(f"the state needs more than {self.capacity} bytes per slot, over the memory budget "
                             f"{MEMORY_BUDGET_ENV}={self.budget} bytes (two slots)") from error
            if isinstance(error, ckptarchive.ArchiveFull):
                raise NoRoom(f"the state needs more than {self.capacity} bytes, the size of {self.directory}'s "
                             "file system") from error
            if error.errno in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
                raise NoRoom(f"{self.directory} is out of memory ({os.strerror(error.errno)})") from error
            raise
        finally:
            layout.release()
        os.ftruncate(fd, length)
        return length


def _on_disk(record: tier.Record) -> bool:
    """Whether dlaunch has persisted ``record``: its file is in the rank's checkpoint directory (where dlaunch puts
    it); True outside dlaunch's checkpoint directory, where no launcher persists anything."""
    directory = os.environ.get(CKPT_DIR_ENV)
    return not directory or os.path.exists(os.path.join(directory, record.name))


_slots: Slots | None = None


def _forget_in_child() -> None:
    """After fork: the child never writes the parent's slots (its copies of the maps and descriptors are left be),
    even when the parent has not saved yet: the parent is named the owner in the child's environment."""
    global _slots
    _slots = None
    if os.environ.get(MEMORY_SLOTS_ENV) and not os.environ.get(OWNER_ENV):
        os.environ[OWNER_ENV] = str(os.getppid())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
_claim_ownership()   # at import (a script's first use of ``checkpoint``): children spawned later inherit the owner


def save(state, epoch: int, step: int, prefix: str, name: str, disk_path: str, disk_save,
         persist: bool | None = None, keep_max: int | None = None, replicated: bool = False):
    """``checkpoint.save(..., memory=True)``: the slot's path, None when skipped (the slot was locked), or, when
    the state goes to disk instead, what ``disk_save()`` returns (after one line saying why, naming ``disk_path``)."""
    global _slots
    directory = os.environ.get(MEMORY_SLOTS_ENV)
    if not directory:
        _say_once("unset", f"memory=True but {MEMORY_SLOTS_ENV} is not set (not under dlaunch, or run without "
                           f"--memory-ckpt): saving to disk, {disk_path} (said once)")
        return disk_save()
    _claim_ownership()
    if not _is_owner() or (_slots is not None and _slots.pid != os.getpid()):
        _say_once("child", f"memory=True in a child process ({os.getpid()}) of the rank that owns {directory}: "
                           f"saving to disk, {disk_path} (said once)")
        return disk_save()
    try:
        if _slots is None or _slots.directory != directory:
            _slots = Slots(directory)
        return _slots.save(state, epoch, step, prefix, name, persist, keep_max, replicated)
    except NoRoom as why:
        _say_once(f"room {why}", f"epoch {epoch} step {step} does not fit in memory: {why}; saved to disk "
                                 f"instead, {disk_path} (said once; later saves that do not fit go to disk too)")
        return disk_save()
    except OSError as error:    # the slots unusable (removed, unwritable): the step must not be lost
        _say_once(f"error {error}", f"could not save epoch {epoch} step {step} into memory ({directory}): {error}; "
                                    f"saved to disk instead, {disk_path} (said once)")
        return disk_save()


# ------------------------------------------------------------------------------------------------ reading back


def memory_step() -> tuple[int, int] | None:
    """(epoch, step) of this rank's newest complete memory save, or None (none, not under the tier, unreadable)."""
    directory = os.environ.get(MEMORY_SLOTS_ENV)
    if not directory:
        return None
    try:
        record = tier.read_record(directory)
    except border.Refused:
        return None
    return None if record is None else (record.epoch, record.step)


def load(resume_from: str, map_location, weights_only: bool, map_memory: bool = False):
    """``(True, state)`` from this rank's newest memory step when it is the checkpoint ``resume_from`` names
    (same file name, so same prefix and step) and its slot verifies; else ``(False, None)``: read the disk.

    The state is a copy (on the CPU: the slot mapped, then deep-copied into new memory), or with ``map_memory``
    the slot mapped copy-on-write (``torch.load(mmap=True)``: no copy, pages read on first use) and retired: this
    process's next save into that slot makes a new file and renames it over the slot, so nothing it writes ever
    reaches the mapped tensors.  The retired file's memory stays in use (outside the budget's two slots) while
    any tensor loaded from it lives."""
    directory = os.environ.get(MEMORY_SLOTS_ENV)
    if not directory:
        return False, None
    try:
        record = tier.read_record(directory)
    except border.Refused:
        return False, None
    name = os.path.basename(resume_from)
    if record is None or record.name != name or ckptnames.parse_dlaunch(name) != (record.prefix, record.epoch,
                                                                                   record.step):
        return False, None
    path = tier.slot_path(directory, record.slot)
    fd = border.open_fd(path)
    if fd is None:
        return False, None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return False, None
        if not _verified(directory, fd, record):
            return False, None
        import torch

        # a copy unless mapped: the rank overwrites the slot two saves later (a mapped slot is retired first)
        on_cpu = str(map_location) == "cpu"   # "cpu" or torch.device("cpu"): load()'s default
        state = torch.load(path, map_location=map_location, weights_only=weights_only,
                           mmap=map_memory or on_cpu)
        if map_memory:
            _retired.add((directory, record.slot))
        elif on_cpu:   # mapped, then one copy into fresh memory (views of one storage stay one): twice as fast
            # as torch.load's reads of the slot (benchmarks/bench_memory.py); the mapping ends with this frame
            import copy

            state = copy.deepcopy(state)
    finally:
        os.close(fd)     # drops the shared lock
    print(f"dlaunch checkpoint: loaded {name} (epoch {record.epoch} step {record.step}) from memory, {path}",
          file=sys.stderr, flush=True)
    return True, state


def _verified(directory: str, fd: int, record: tier.Record) -> bool:
    """The record still names this slot and generation, the slot is the archive's length, and ends as that
    generation's archive (a slot being written, or left half-written by a killed save, never verifies)."""
    try:
        if tier.read_record(directory) != record or os.fstat(fd).st_size != record.length:
            return False
        mark = tier.comment(record.generation)
        return tier.ends_with_generation(os.pread(fd, len(mark), record.length - len(mark)), record.generation)
    except (border.Refused, OSError):
        return False
