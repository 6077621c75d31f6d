"""Atomic file replacement: a reader sees the old file or the whole new one, never a torn one.

Every file dlaunch writes for others to read (plan, pids and summary JSON, rank tables, ``-o`` outputs,
checkpoints) goes through here: a hidden temporary in the target's directory (so the rename stays on one
filesystem and globs such as ``plan*.json`` never see it), written, optionally fsynced, then renamed over
the target; on any failure the temporary is removed and the target is untouched.
"""

from __future__ import annotations

import contextlib
import os

# what tempfile.mkstemp opens with; tempfile itself (and random) is not imported on the launch path
_CREATE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)


def fsync_path(path: str) -> None:
    """fsync a file or a directory by name (a directory's fsync makes a rename inside it durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_beside(path: str, tag: str = "") -> tuple[int, str]:
    """(fd, name) of a new hidden temporary beside ``path``; ``tag`` goes into its name (e.g. host and pid)."""
    directory, name = os.path.split(os.path.abspath(path))
    for _ in range(100):   # as mkstemp: a random name, created only where none exists (mode 0600, not inherited)
        tmp = os.path.join(directory, f".{name}{tag}.{os.urandom(6).hex()}.tmp")
        try:
            return os.open(tmp, _CREATE_FLAGS, 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")


def commit(tmp: str, path: str, durable: bool = True) -> None:
    """Rename ``tmp`` over ``path``; ``durable`` also fsyncs the directory. On failure ``tmp`` is removed."""
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_path(os.path.dirname(os.path.abspath(path)))


def write_atomically(path: str, write, *, binary: bool = False, durable: bool = False,
                     permissions: int | None = None, by_path: bool = False) -> None:
    """Replace ``path`` with what ``write(handle)`` (``write(temp_path)`` with ``by_path``) produces.

    ``durable`` fsyncs the data and the directory before returning (outputs people keep; checkpoints do
    their own); ``permissions`` (less the umask) is the new file's mode, else mkstemp's 0600.
    """
    fd, tmp = temp_beside(path)
    try:
        if by_path:
            os.close(fd)
            write(tmp)
        else:
            with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8",
                           errors=None if binary else "surrogateescape") as fh:   # bytes read as given stay so
                write(fh)
        if durable:
            fsync_path(tmp)
        if permissions is not None:
            os.chmod(tmp, permissions & ~_umask())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    commit(tmp, path, durable)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
