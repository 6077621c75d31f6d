"""The launcher's own process tree, read from /proc: what the end-of-attempt sweep kills and the watchdog notes.

Only the launcher's tree is read (each task's ``children`` list), however many other processes the machine
runs; the launcher is their subreaper (reaper.py), so an orphan inside it stays inside it.
"""

from __future__ import annotations

import os

TREE_WALKS = 100   # a tree read while processes exit is walked again, this many times at most


def descendants(pid: int) -> set[int]:
    """Every live (not zombie) descendant of ``pid``, following each task's ``children`` list: only this
    launcher's own tree is read, however many other processes the machine runs (other hosts' launchers and
    ranks on one machine, a node's own services)."""
    return set(tree(pid))


def own_groups() -> set[int]:
    """The process groups this launcher's live descendants are in (``/proc/PID/stat``'s pgrp)."""
    groups = set()
    for pid in descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                groups.add(int(fh.read().rsplit(b")", 1)[1].split()[2]))
        except (OSError, ValueError, IndexError):
            continue   # gone meanwhile: not a group to kill
    return groups


def tree(pid: int) -> dict[int, bytes]:
    """``descendants`` with each one's start time (read once: the watchdog notes the tree every second).

    Walked again from ``pid`` until a walk finds no process it had not seen, alive or dead: a process that
    exits while the tree is read hands its children to the subreaper (``pid``), after its parent's list was
    read and before its own was, so one walk can miss them.  A daemon that forks and exits in a loop is always
    there (issue 38, item 27); the next walk reads only the lists of the subreaper and of what is new."""
    found: dict[int, bytes] = {}
    dead: set[int] = set()   # listed, but gone or a zombie when looked at
    for _ in range(TREE_WALKS):
        seen = len(found) + len(dead)
        todo = [pid]
        while todo:
            parent = todo.pop()
            try:
                tasks = os.listdir(f"/proc/{parent}/task")
            except OSError:
                dead.add(parent)
                continue
            for task in tasks:
                for child in task_children(parent, task):
                    if child not in found and child not in dead:
                        born = started(child)
                        if born is None:
                            dead.add(child)
                        else:
                            found[child] = born
                            todo.append(child)
        if len(found) + len(dead) == seen:
            break
    return found


def task_children(pid: int, task: str) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{task}/children", "rb") as fh:
            return [int(p) for p in fh.read().split()]
    except (OSError, ValueError):
        return []


def started(pid: int) -> bytes | None:
    """When a live (not zombie) process started (clock ticks since boot, /proc's field 22), else None:
    with its pid, what tells a process from a later one given the same pid."""
    fields = _stat_fields(pid)
    return fields[19] if fields is not None and len(fields) > 19 and fields[0] != b"Z" else None


def _stat_fields(pid: int) -> list[bytes] | None:
    """``/proc/PID/stat``'s fields after the command's ``)`` (field 3, the state, first), or None once gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2:].split()


def last_pid() -> bytes | None:
    """The last pid the kernel gave out in this pid namespace (``/proc/loadavg``'s fifth field), or None.

    Every new process and thread takes a pid, and a process joins the launcher's tree only by being created
    in it (an orphan inside it is reparented to the launcher, the subreaper): while this number stands still,
    the tree has gained nothing, and the watchdog's last note of it is still whole."""
    try:
        with open("/proc/loadavg", "rb") as fh:
            fields = fh.read().split()
    except OSError:
        return None
    return fields[4] if len(fields) > 4 else None


def children(pid: int) -> set[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", "rb") as fh:   # bytes: no codec to import at the end
            return {int(p) for p in fh.read().split()}
    except OSError:
        return set()


def cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system) the process ``pid`` and its live descendants used, with its reaped children's
    (``/proc/PID/stat`` fields 14-17); None when ``pid`` is gone.  A rank waiting in a gloo collective blocks in
    a socket read and uses none; one computing, loading data or compiling uses its share of a core."""
    own = _cpu_ticks(pid, children_too=True)
    if own is None:
        return None
    ticks = own + sum(_cpu_ticks(child) or 0 for child in tree(pid))
    return ticks / CLOCK_TICKS


def _cpu_ticks(pid: int, children_too: bool = False) -> int | None:
    fields = _stat_fields(pid)
    if fields is None:
        return None
    try:   # utime, stime, cutime, cstime: fields 14-17 of stat(5), 11-14 after the command's ")"
        return sum(int(fields[index]) for index in ((11, 12, 13, 14) if children_too else (11, 12)))
    except (ValueError, IndexError):
        return None


CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
