"""One checkpoint file onto the disk, whole or not at all: temporaries, superseding, strategy files, rotation.

The one way a checkpoint reaches the disk, in the foreground or from ``writer``'s thread: written
into a hidden temporary beside its final name (``file.write_torch``, flushed early; the name says
host and pid so a later save can clean up after a killed one), an existing file of that name given a
second name in ``superseded/``, the strategy file (sliced saves) written, then one rename makes the new
file visible, and rotation keeps the newest ``keep_max``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sys
import time

from launcher.base.atomic import commit, fsync_path, temp_beside
from launcher.checkpoint import names as ckptnames
from launcher.checkpoint.file import EarlyWriteback, write_torch

STRATEGY_SUFFIX = ".strategy.json"
SUPERSEDED_DIR = "superseded"

_HOST = socket.gethostname().replace("~", "-")
_FOREIGN_TEMP_AGE = 3600.0   # seconds: a temporary from another host is stale when untouched this long




def _write_temp(path: str, write) -> str:
    """``write(tmp)`` into a hidden, fsynced temporary beside ``path``; the temporary's name says host and pid."""
    fd, tmp = temp_beside(path, f"~{_HOST}~{os.getpid()}~")
    try:
        with EarlyWriteback(fd):
            write(tmp)
        os.fsync(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        os.close(fd)
    return tmp


def write_atomically(path: str, write) -> None:
    """Readers see no file or a whole one at ``path``, never a torn one, even if this process is killed."""
    commit(_write_temp(path, write), path)


def torch_writer(state, locations: dict | None = None):
    return lambda tmp: write_torch(state, tmp, locations)


def text_writer(text: str):
    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
    return write


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _clean_stale_temps(directory: str) -> None:
    """Remove temporaries that killed saves left here: from a dead pid of this host, or untouched for an hour.

    A live process's temporary is kept whatever its age: a save of a huge state may take minutes.
    """
    try:
        names = os.listdir(directory)
    except OSError:
        return
    now = time.time()
    for name in names:
        temporary = ckptnames.parse_dlaunch_temporary(name)
        if temporary is None:
            continue
        path = os.path.join(directory, name)
        _, host, pid = temporary
        try:
            if host == _HOST:
                stale = pid != os.getpid() and not _pid_alive(pid)
            else:
                stale = now - os.stat(path).st_mtime > _FOREIGN_TEMP_AGE
            if stale:
                os.unlink(path)
        except OSError:
            continue


def companion(path: str) -> str:
    """The strategy file that belongs to a checkpoint file."""
    return path[:-len(".pt")] + STRATEGY_SUFFIX


def _link_or_copy(source: str, target: str) -> None:
    """``target`` becomes another name of ``source`` (a hard link), or a whole copy where links are not allowed."""
    try:
        os.link(source, target)
    except OSError:
        write_atomically(target, lambda tmp: shutil.copyfile(source, tmp))


def _keep_aside(path: str) -> str:
    """Give the existing ``path`` (and its strategy file) a second name in ``superseded/``; returns it.

    ``path`` itself stays listed until the new file replaces it in one rename, so a process killed
    at any point of a re-save leaves a whole checkpoint of that step listed, and the earlier one
    kept.  A name left there by an attempt killed before its rename is used again, not doubled.
    """
    directory, name = os.path.split(path)
    aside = os.path.join(directory, SUPERSEDED_DIR)
    os.makedirs(aside, exist_ok=True)
    label = name[:-len(".pt")]
    target, n = os.path.join(aside, name), 0
    while os.path.lexists(target) or os.path.lexists(companion(target)):
        with contextlib.suppress(OSError):
            if os.path.samefile(target, path):
                return target
        n += 1
        target = os.path.join(aside, f"{label}.{n}.pt")
    if os.path.lexists(companion(path)):
        _link_or_copy(companion(path), companion(target))
    _link_or_copy(path, target)
    fsync_path(aside)
    return target


def _rotate(directory: str, prefix: str, keep_max: int, just_saved: str) -> None:
    """Delete all but the newest ``keep_max`` checkpoints of ``prefix`` (by epoch, step), never the one just saved."""
    found = []
    for name in os.listdir(directory):
        parsed = ckptnames.parse_dlaunch(name)
        if parsed and parsed[0] == prefix:
            found.append((parsed[1], parsed[2], name))
    found.sort()
    for _, _, name in found[:max(len(found) - keep_max, 0)]:
        if name == just_saved:
            continue
        path = os.path.join(directory, name)
        for victim in (path, companion(path), path + ckptnames.REPLICA_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(victim)


def check_keep_max(keep_max) -> None:
    if keep_max is not None and (not isinstance(keep_max, int) or keep_max < 1):
        raise ValueError(f"keep_max must be a positive integer, not {keep_max!r}")


def store(state, directory: str, name: str, prefix: str, keep_max: int | None = None,
          strategy_text: str | None = None, locations: dict | None = None) -> str:
    """A torch ``state`` onto the disk as ``directory/name`` (``store_file``'s guarantees)."""
    return store_file(torch_writer(state, locations), directory, name, prefix, keep_max, strategy_text)


def range_writer(fd: int, length: int, chunk: int = 1 << 26):
    """Write the bytes ``[0, length)`` of the open file ``fd`` (a memory slot's archive): ``store_file``'s ``write``.
    In the kernel (``copy_file_range``, then ``sendfile``) where it can, else through a buffer."""
    def write(tmp):
        with open(tmp, "wb", buffering=0) as out:   # every way below writes at the file's own offset
            done = 0
            while done < length:
                count = min(chunk, length - done)
                try:
                    moved = os.copy_file_range(fd, out.fileno(), count, done)
                except OSError:   # across file systems on older kernels, or not supported: sendfile, then read
                    try:
                        moved = os.sendfile(out.fileno(), fd, done, count)
                    except OSError:
                        moved = os.write(out.fileno(), os.pread(fd, count, done))
                if not moved:
                    raise OSError(f"the source ended at byte {done} of {length}")
                done += moved
    return write


def mark_replica(directory: str, name: str) -> None:
    """The ``.replica`` mark beside ``name``: written before the checkpoint, so a file listed is never without it."""
    with open(os.path.join(directory, name + ckptnames.REPLICA_SUFFIX), "w", encoding="utf-8") as fh:
        fh.write("every rank's state\n")


def store_file(write, directory: str, name: str, prefix: str, keep_max: int | None = None,
               strategy_text: str | None = None, replicated: bool = False) -> str:
    """The one way a checkpoint reaches the disk, whoever wrote its bytes (``torch_writer`` for a state in this
    process, ``range_writer`` for a memory slot dlaunch persists): the ``.replica`` mark where replicated,
    temporary first (the slow part), then the old file kept aside, the strategy file, the rename that makes the
    new one visible, rotation."""
    os.makedirs(directory, exist_ok=True)
    _clean_stale_temps(directory)
    if replicated:
        mark_replica(directory, name)
    path = os.path.join(directory, name)
    tmp = _write_temp(path, write)
    kept = None
    try:
        if os.path.lexists(path):
            kept = _keep_aside(path)
        if strategy_text is not None:
            # Before the checkpoint itself: once the .pt is visible, its strategy file is there too.
            write_atomically(companion(path), text_writer(strategy_text))
        elif os.path.lexists(companion(path)):
            os.unlink(companion(path))   # left by a sliced save killed before its .pt appeared
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    commit(tmp, path)
    if kept is not None:   # only now: a stderr that blocks must not hold a step unlisted
        print(f"dlaunch checkpoint: {path} already existed; kept the earlier file as {kept}",
              file=sys.stderr, flush=True)
    if keep_max is not None:
        _rotate(directory, prefix, keep_max, name)
    return path
