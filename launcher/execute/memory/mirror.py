"""A rank's ``DLAUNCH_MEMORY_DIR`` mirrored to ``<rank ckpt dir>/memory/``, and restored from it.

A file is copied once it is finished: no process of the launch's tree holds it open for writing (their
``/proc/PID/fd``) and, for a torch zip archive or a safetensors file, it is whole (``torn.py``: its end says so),
for any other file, it is unchanged between two looks; at an attempt's end, once every rank stopped. A checkpoint
a script rewrites every step (nanoGPT's ``ckpt.pt`` every iteration: never unchanged half a second) is thus
mirrored at every look, not only at the attempt's end. A torn archive is never copied. Each copy is atomic (a
temporary beside it, fsynced, renamed; the source checked unchanged first), relative paths kept (HF Trainer's
``checkpoint-N/``). A file the rank deleted (a rotation) is deleted from the mirror only in a look where every
file present is mirrored: the newer ones are on disk first. Before an attempt, a file that is torn or missing
in memory but whole in the mirror is copied back (nanoGPT ``torch.save``s ``ckpt.pt`` in place: a rank killed
mid-save leaves it torn).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat as stats

from launcher.base import border
from launcher.base.atomic import commit, fsync_path, temp_beside
from launcher.execute.local.proctree import descendants
from launcher.execute.memory.torn import is_torn, wholeness

MIRROR_DIR = "memory"
WRITING_DIGITS = (b"1", b"2", b"5", b"6")   # O_WRONLY or O_RDWR in the flags' last octal digit
FDINFO_LIMIT = 1 << 16   # bytes of /proc/PID/fdinfo/FD read (a regular file's: a few lines)

Sig = tuple   # (size, mtime_ns, inode): what tells a changed file


def _sig(stat: os.stat_result) -> Sig:
    return stat.st_size, stat.st_mtime_ns, stat.st_ino


def _is_temporary(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp")


def listing(root: str, skip_temporaries: bool = False) -> dict[str, Sig]:
    """Every regular file under ``root`` (no link followed): relative path -> its signature."""
    found: dict[str, Sig] = {}
    for directory, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(directory, d))]
        for name in names:
            if skip_temporaries and _is_temporary(name):
                continue
            path = os.path.join(directory, name)
            try:
                stat = os.lstat(path)
            except OSError:
                continue
            if stats.S_ISREG(stat.st_mode):
                found[os.path.relpath(path, root)] = _sig(stat)
    return found


def open_for_writing(under: str) -> set[str]:
    """Paths under ``under`` that a process of this launcher's tree (the ranks and their children) has open
    for writing."""
    prefix = under.rstrip("/") + "/"
    found = set()
    for pid in descendants(os.getpid()):
        fds = f"/proc/{pid}/fd"
        try:
            entries = os.listdir(fds)
        except OSError:
            continue
        for entry in entries:
            try:
                target = os.readlink(f"{fds}/{entry}")
            except OSError:
                continue
            if target.startswith(prefix) and _writing(pid, entry):
                found.add(target)
    return found


def _writing(pid: int, fd: str) -> bool:
    try:
        info = border.read_bytes(f"/proc/{pid}/fdinfo/{fd}", "descriptor's information", FDINFO_LIMIT)
    except border.Refused:
        return True   # unreadable: taken as busy, looked at again next time
    for line in (info or b"").splitlines():   # None: gone meanwhile, taken as busy
        if line.startswith(b"flags:"):   # octal: its last digit holds the access mode (O_ACCMODE)
            return line.rstrip()[-1:] in WRITING_DIGITS
    return True


def copy_file(source: str, target: str, expected: Sig | None = None) -> bool:
    """``source`` to ``target`` atomically and durably; False (nothing changed) when the source went or changed
    while it was copied."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    fd, tmp = temp_beside(target)
    try:
        os.close(fd)
        shutil.copyfile(source, tmp)
        if expected is not None and _sig(os.lstat(source)) != expected:   # before the fsync: a file rewritten
            raise FileNotFoundError(source)   # every step is caught between saves when only the read must fit
        fsync_path(tmp)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False
    commit(tmp, target)
    return True


class Mirror:
    """One rank's files in memory and their mirror on disk."""

    def __init__(self, source: str, target: str):
        self.source, self.target = source, target
        self.looked: dict[str, Sig] = {}    # what the last look saw
        self.copied: dict[str, Sig] = {}    # what is in the mirror, as it was when copied (or restored)
        self.failed: list[str] = []         # whole files the last look could not copy (gone meanwhile, a full disk)

    def sync(self, busy: set[str], settled: bool = False) -> list[str]:
        """One look: finished files copied (``settled``: every rank stopped, so every whole file is finished),
        then, when nothing is left to copy, the files the rank deleted deleted from the mirror. Returns what
        was copied."""
        present = listing(self.source)
        copied, pending = [], False
        self.failed = []
        for rel, sig in sorted(present.items()):
            if self.copied.get(rel) == sig:
                continue
            path = os.path.join(self.source, rel)
            if not settled and path in busy:   # open for writing: not even read
                pending = True
                continue
            whole = wholeness(path)
            if not settled and self.looked.get(rel) != sig and whole is not True:
                pending = True   # a file whose end cannot be told waits one look unchanged
                continue
            if whole is False:   # being written, or (settled) left torn by a killed rank: never copied
                pending = pending or not settled
                continue
            if not copy_file(path, os.path.join(self.target, rel), sig):
                pending = True
                if os.path.lexists(path):
                    self.failed.append(rel)
                continue
            self.copied[rel] = sig
            copied.append(rel)
        self.looked = present
        if not pending:
            for rel in sorted(set(self.copied) - set(present)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.target, rel))
                del self.copied[rel]
                self._prune_dirs(os.path.dirname(rel))
        return copied

    def _prune_dirs(self, rel: str) -> None:
        while rel:
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(self.target, rel))   # only when empty
            rel = os.path.dirname(rel)

    def restore(self, mirror: str | None = None, busy: frozenset[str] | set[str] = frozenset()) -> list[str]:
        """Copy into memory each file of ``mirror`` (default this mirror) that is missing or torn there and whole
        in the mirror, except those in ``busy`` (open for writing: a rank still running writes it); returns what
        was restored."""
        mirror = mirror or self.target
        restored = []
        present = listing(self.source)
        for rel, sig in sorted(listing(mirror, skip_temporaries=True).items()):
            path = os.path.join(self.source, rel)
            if path in busy or (rel in present and not is_torn(path)):
                continue
            saved = os.path.join(mirror, rel)
            if is_torn(saved) or not copy_file(saved, path, sig):
                continue
            restored.append(rel)
            if mirror == self.target:   # in the mirror already: not copied back again
                with contextlib.suppress(OSError):
                    self.copied[rel] = self.looked[rel] = _sig(os.lstat(path))
        return restored
