"""Files a user names: read them bounded, write them without surprises.

Reading (rank tables, configs, hccn.conf, env files): only regular files, and
only up to a size limit, so ``/dev/zero`` is an error instead of an unbounded
read and a FIFO is an error instead of a hang.

Writing (every ``-o``: gen-ranktable, merge-ranktable, report, script, ckpt
merge) follows one rule set:

* ``-`` is standard output;
* a new regular file is written atomically (hidden temporary, fsync, rename)
  with the mode the umask gives, as any editor or shell redirection would;
* an existing regular file is replaced the same way, only with ``--force``;
* a symlink is written through: its target is what gets written (the link stays);
* a device node or FIFO (``/dev/null``, ``/dev/stdout``, a named pipe) is written
  through, never replaced: renaming over ``/dev/null`` as root turns it into a
  regular file and breaks the machine;
* nothing inside a run directory is ever a target: a report must not replace
  the ``summary.json`` or ``output.log`` it was made from.
"""

from __future__ import annotations

import glob
import os
import stat
import sys

from launcher.base.atomic import write_atomically
from launcher.errors import UsageError

# A directory holding one of these is a run directory (launcher.rundir.create lays them out): the -o rule keeps out.
RUN_MARKERS = ("plan*.json", "summary*.json", "rank_table*.json")


def is_run_dir(path: str) -> bool:
    return os.path.isdir(path) and any(glob.glob(os.path.join(glob.escape(path), m)) for m in RUN_MARKERS)


def enclosing_run_dir(path: str) -> str | None:
    """The run directory ``path`` lies in (or is), if any: such paths are never an output's target."""
    current = os.path.dirname(os.path.abspath(path))
    while True:
        if is_run_dir(current):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent

MAX_TEXT_BYTES = 16 << 20


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_text(path: str, what: str, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes``; otherwise a UsageError naming ``what``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)   # a FIFO opens without waiting for a writer
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):   # checked before fdopen, which refuses a directory with a traceback
        os.close(fd)
        raise UsageError(f"cannot read {what} {path}: it is {_kind(info.st_mode)}, not a regular file")
    with os.fdopen(fd, "rb") as fh:
        if info.st_size > max_bytes:
            raise UsageError(f"cannot read {what} {path}: {info.st_size} bytes is more than the "
                             f"{max_bytes >> 20} MiB dlaunch reads")
        os.set_blocking(fd, True)
        data = _read_at_most(fh, max_bytes + 1)
    if len(data) > max_bytes:
        raise UsageError(f"cannot read {what} {path}: it grew past the {max_bytes >> 20} MiB dlaunch reads")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read {what} {path}: not UTF-8 text (byte {exc.start})") from None


def _read_at_most(fh, limit: int) -> bytes:
    """Up to ``limit`` bytes, in chunks: ``read(limit)`` would allocate all of ``limit`` for a small file."""
    chunks, total = [], 0
    while total < limit:
        chunk = fh.read(min(1 << 20, limit - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def write_output(path: str, write, *, force: bool, binary: bool = False, executable: bool = False,
                 by_path: bool = False) -> str:
    """Write an output file by ``write(handle)``; returns how to name where it went (for the closing message).

    ``binary`` gives ``write`` a binary handle, else a UTF-8 text one; ``by_path`` gives it a path to write
    instead (torch.save writes fastest to a path); ``executable`` adds the x bits the umask allows.
    """
    if path == "-":
        if by_path:
            write("/dev/stdout")
        else:
            write(sys.stdout.buffer if binary else sys.stdout)
            sys.stdout.flush()
        return "standard output"
    target = os.path.realpath(path)   # through links: the link keeps pointing where it did
    run_dir = enclosing_run_dir(target)
    if run_dir is not None:
        raise UsageError(f"-o {path} is inside the run directory {run_dir}; dlaunch never writes over a run's "
                         f"own files: choose a path outside it")
    try:
        info = os.stat(target)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    try:
        if info is not None and stat.S_ISDIR(info.st_mode):
            raise UsageError(f"-o {path} is a directory")
        if info is not None and not stat.S_ISREG(info.st_mode):
            _write_to(target, write, binary, by_path)   # a device or FIFO: written through, never replaced
            return path
        if info is not None and not force:
            raise UsageError(f"{path} exists; nothing was written (--force replaces it)")
        write_atomically(target, write, binary=binary, durable=True, permissions=0o777 if executable else 0o666,
                         by_path=by_path)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    return path


def _write_to(path: str, write, binary: bool, by_path: bool) -> None:
    if by_path:
        write(path)
        return
    with open(path, "wb" if binary else "w", encoding=None if binary else "utf-8") as fh:
        write(fh)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
