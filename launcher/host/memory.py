"""How much memory this host can give the memory tier: the root's free space and the kernel's MemAvailable."""

from __future__ import annotations

import os

from launcher.base import border

MEMINFO = "/proc/meminfo"
MEMINFO_LIMIT = 1 << 16


def mem_available(path: str = MEMINFO) -> int | None:
    """``MemAvailable`` in bytes (what the kernel can give without swapping), or None where it says none."""
    text = border.read_text(path, "meminfo", MEMINFO_LIMIT, follow=True)
    for line in (text or "").splitlines():
        name, _, rest = line.partition(":")
        words = rest.split()
        if name == "MemAvailable" and words:
            kib = border.ascii_int(words[0], max_digits=15)
            return None if kib is None else kib * 1024
    return None


def free_space(root: str) -> int | None:
    """Bytes a non-root user may still write under ``root``, or None where it cannot be asked."""
    try:
        stat = os.statvfs(root)
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize


def auto_budget(root: str, local_ranks: int) -> int:
    """``--memory-budget auto``: the smaller of the root's free space and MemAvailable, shared by ``local_ranks``."""
    known = [value for value in (free_space(root), mem_available()) if value is not None]
    return max(min(known, default=0) // max(local_ranks, 1), 0)
