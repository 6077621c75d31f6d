"""Files closed after writing under a directory tree, told the moment it happens (Linux inotify).

The keeper mirrors a rank's memory directory every ``LOOK`` (half a second: finding the files a rank still writes
reads every process's descriptors). A script that rewrites its checkpoint in place every step (nanoGPT's
``ckpt.pt``: truncated, then written) and is killed in the middle of a save has only the mirror's copy left, as
old as the last look: up to half a second of steps. With this, the keeper looks the moment a writer closes a file
there (``IN_CLOSE_WRITE``, or one renamed in: ``IN_MOVED_TO``), so the mirror holds every finished save it can
copy before the next one begins, and the periodic look stays as the fallback.

inotify is reached through ``ctypes`` (no module of the standard library wraps it); where it cannot be had (not
Linux, the watch limit reached) ``watch`` returns None and the keeper looks every ``LOOK`` as before.
"""

from __future__ import annotations

import contextlib
import os

IN_CLOSE_WRITE = 0x00000008
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
EVENTS = IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE   # a created directory is watched at the next drain
READ_SIZE = 1 << 16


class ClosedFiles:
    """inotify watches on every directory under some roots; ``fd`` becomes readable when a file there was closed
    after writing, renamed in, or created; ``drain()`` reads what came and watches new directories."""

    def __init__(self, libc, fd: int, roots: list[str]):
        self._libc, self.fd, self.roots = libc, fd, roots
        self._watched: set[str] = set()
        self._watch_trees()

    def drain(self) -> bool:
        """Whether anything came since the last drain (every pending event read)."""
        came = False
        while True:
            try:
                data = os.read(self.fd, READ_SIZE)
            except BlockingIOError:
                break
            if not data:
                break
            came = True
        if came:
            self._watch_trees()   # a directory made meanwhile (HF's checkpoint-N/): its files are told too
        return came

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def _watch_trees(self) -> None:
        for root in self.roots:
            for directory, dirs, _ in os.walk(root):
                dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(directory, d))]
                if directory not in self._watched and self._libc.inotify_add_watch(
                        self.fd, os.fsencode(directory), EVENTS | IN_ONLYDIR | IN_DONT_FOLLOW) >= 0:
                    self._watched.add(directory)


def watch(roots: list[str]) -> ClosedFiles | None:
    """A watch on ``roots`` (each an existing directory), or None where inotify cannot be had."""
    if not roots:
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    return ClosedFiles(libc, fd, roots)
