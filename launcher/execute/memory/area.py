"""One host's memory area: made with its owner, found again by run id, freed once what it holds is on disk.

The area (``checkpoint/tier.py``) is named ``dlaunch-<run id>-<launcher pid>``. Beside the tier's ``owner``
file (``"<pid> <start ticks>"``: a later process given the same pid is no owner) it holds ``run_dir``, the run
directory whose rank checkpoint directories its ranks' steps and files belong to, so that ``dlaunch prune`` and
the next dlaunch of the run, finding an area whose owner died (a SIGKILLed dlaunch), persist it before freeing.
"""

from __future__ import annotations

import os
import shutil

from launcher.base import border
from launcher.checkpoint import tier
from launcher.execute.local.proctree import started

RUN_DIR_FILE = "run_dir"
SMALL_FILE = 4096


def create(area: str, ranks, run_dir: str) -> None:
    """The area (0700), its owner and run directory, and each rank's ``files/`` and ``slots/``."""
    os.makedirs(os.path.dirname(area), exist_ok=True)
    os.mkdir(area, 0o700)
    os.chmod(area, 0o700)   # whatever the umask
    ticks = started(os.getpid()) or b"0"
    _write(os.path.join(area, tier.OWNER_FILE), f"{os.getpid()} {ticks.decode()}\n")
    _write(os.path.join(area, RUN_DIR_FILE), run_dir)
    add_ranks(area, ranks)


def add_ranks(area: str, ranks) -> None:
    for rank in ranks:
        for path in (tier.files_dir(area, rank), tier.slots_dir(area, rank)):
            os.makedirs(path, mode=0o700, exist_ok=True)


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def owner_alive(area: str) -> bool:
    """Whether the area's owner still runs: its pid alive with the start time it wrote (unreadable: alive, never
    freed on a guess; no owner file at all: the launcher died making it)."""
    try:
        text = border.read_text(os.path.join(area, tier.OWNER_FILE), "owner", SMALL_FILE)
    except border.Refused:
        return True
    if text is None:
        return False
    pid_text, _, ticks = text.strip().partition(" ")
    pid = border.ascii_int(pid_text)
    if pid is None or pid <= 0:
        return True
    now = started(pid)
    return now is not None and (not ticks or now.decode() == ticks)


def run_dir_of(area: str) -> str | None:
    """The run directory the area's ranks belong to, or None where it does not say."""
    try:
        text = border.read_text(os.path.join(area, RUN_DIR_FILE), "run_dir", SMALL_FILE)
    except border.Refused:
        return None
    return text.strip() or None if text else None


def ranks_of(area: str) -> list[int]:
    """The ranks with a directory in the area."""
    found = []
    try:
        names = os.listdir(area)
    except OSError:
        return []
    for name in names:
        if name.startswith("rank_"):
            rank = border.ascii_int(name[len("rank_"):])
            if rank is not None:
                found.append(rank)
    return sorted(found)


def areas(root: str, run_id: str | None = None) -> list[str]:
    """The areas in ``root`` (of ``run_id``'s run where given), oldest name first."""
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    return [os.path.join(root, name) for name in names
            if tier.area_owner_pid(name, run_id) is not None and os.path.isdir(os.path.join(root, name))
            and not os.path.islink(os.path.join(root, name))]


def orphans(root: str, run_id: str | None = None) -> list[str]:
    """This user's areas whose owner is gone: left by a dlaunch that was SIGKILLed (or lost its host's power)."""
    return [area for area in areas(root, run_id) if _ours(area) and not owner_alive(area)]


def _ours(area: str) -> bool:
    try:
        return os.lstat(area).st_uid == os.getuid()
    except OSError:
        return False


def free(area: str) -> None:
    """Remove the area; what cannot be removed is left (the next prune tries again)."""
    shutil.rmtree(area, ignore_errors=True)
