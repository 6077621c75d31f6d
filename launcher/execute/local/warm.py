"""Warm restarts (``--warm-restarts torch``): a standby interpreter per local rank, its imports done, that the
next attempt's rank becomes instead of a new process.

A restart's seconds are almost all new interpreters starting and importing torch again before the first
collective (benchmarks/bench_restart.py: 0.13 s of dlaunch's, then about 5 s of the job's on 2 cores). While
an attempt runs, dlaunch starts one ``standby.py`` per local rank (spawned like a rank: its own session, the
parent-death signal, the watchdog told, the launch's marker), which imports modules ahead and waits. When the
next attempt starts a rank, the standby gets the rank's environment, argv, working directory and output
descriptor over a Unix socket, and runs the script as ``__main__``; a standby that died, or none, means a cold
start as always. Standbys that no restart needed are killed when the launch ends.

What a standby imports: the user's list (``--warm-restarts torch``), then what the running attempt's rank
imported: the rank hook (rankhook/sitecustomize.py) writes the names to ``modules.<attempt>.txt`` in the rank's
directory (``DLAUNCH_MODULES_FILE``) once its imports settle, and again when they grow; dlaunch reads the file
(``read_module_list``, bounded), sends the names, and sends the new ones when it changes. Where this attempt's
rank wrote none yet, the list an earlier attempt's rank wrote is used.

When: not at the attempt's start, where the imports would compete with the ranks' own start-up on the same
cores, but once every local rank's imports settled (its module list written: its set-up is done and it
trains), after ``START_AFTER`` seconds at the latest, or at once when the attempt fails before that. The
imports run at the lowest CPU priority (standby.py).

With what: the next attempt's environment as far as it is known ahead (``standby_environment``), so Python's
start (``sitecustomize``, ``.pth`` files, ``PYTHONSTARTUP`` is not read: no interactive prompt) sees it. What
still differs from a cold start is in docs/restarts.md.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

from launcher.base.border import Refused, read_text
from launcher.contract import MODULES_ENV, MODULES_FILE, RESUME_FROM_ENV, RESUME_STEP_ENV
from launcher.execute.local.processes import AttemptProcesses, RankProcess, killpg_quietly
from launcher.rundir.paths import attempt_file

STANDBY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "standby.py")
START_AFTER = 30.0       # seconds after the attempt's start: the standbys start then if no list said "settled"
LOOK = 0.5               # seconds between looks at the ranks' module lists
LOOK_FOR = 600.0         # seconds of an attempt during which its lists are followed (the hook's own limit)
LIST_LIMIT = 256 << 10   # bytes of a module list read
MAX_NAMES = 4096         # names of a list taken
MESSAGE_LIMIT = 60_000   # bytes of names in one message (a SEQPACKET message fits the socket's buffer)


def parse_module_list(text: str) -> list[str]:
    """The module names of a rank's list (one a line), in its order: dotted Python identifiers, ASCII, at most
    ``MAX_NAMES``; other lines are skipped (a rank writes this file: outside text)."""
    names: list[str] = []
    for line in text.splitlines():
        name = line.strip()
        if 0 < len(name) <= 200 and name.isascii() and all(part.isidentifier() for part in name.split(".")):
            names.append(name)
            if len(names) >= MAX_NAMES:
                break
    return names


def read_module_list(path: str) -> list[str] | None:
    """A rank's module list, or None when it wrote none (or one that cannot be taken: then none, as if unwritten)."""
    try:
        text = read_text(path, "module list", LIST_LIMIT)
    except Refused:
        return None
    return None if text is None else parse_module_list(text)


def standby_environment(spec, attempt: int) -> dict[str, str]:
    """The environment of ``spec``'s rank in attempt ``attempt + 1`` as far as it is known during ``attempt``:
    its restart count, error file and module list named for that attempt; the resume point (found at the
    restart) left out. MASTER_PORT stays the running attempt's (a restart picks a fresh one unless fixed)."""
    env = dict(spec.env)
    env["TORCHELASTIC_RESTART_COUNT"] = str(attempt + 1)
    if "TORCHELASTIC_ERROR_FILE" in env and spec.error_file:
        env["TORCHELASTIC_ERROR_FILE"] = attempt_file(spec.rank_dir, "error", "json", attempt + 1)
    if MODULES_ENV in env:
        env[MODULES_ENV] = attempt_file(spec.rank_dir, *MODULES_FILE, attempt + 1)
    env.pop(RESUME_FROM_ENV, None)
    env.pop(RESUME_STEP_ENV, None)
    return env


class _Standby:
    """One standby: its process, dlaunch's end of its socket, the names it was sent."""

    def __init__(self, child, channel: socket.socket):
        self.child, self.channel = child, channel
        self.sent: set[str] = set()

    def send(self, names: list[str]) -> None:
        """The names it was not sent yet, in as many messages as they need; dropped when its socket is full."""
        batch: list[str] = []
        size = 0
        for name in names:
            if name in self.sent:
                continue
            if size + len(name) > MESSAGE_LIMIT:
                self._message(batch)
                batch, size = [], 0
            batch.append(name)
            size += len(name) + 3
        if batch:
            self._message(batch)

    def _message(self, batch: list[str]) -> None:
        try:
            self.channel.send(json.dumps({"modules": batch}).encode())
            self.sent.update(batch)
        except OSError:
            pass   # full (it imports slowly) or gone: it imports what it has; take() finds out


class Standbys:
    """This launch's standby interpreters, one per local rank, for the attempt after the running one."""

    def __init__(self, spawner, reaper, modules: str):
        self.spawner, self.reaper, self.modules = spawner, reaper, modules
        self.python = sys.executable   # the ranks' interpreter (Options.python): only its ranks have standbys
        self.ready: dict[int, _Standby] = {}
        self.lists: dict[int, list[str]] = {}   # local rank -> the newest module list its rank wrote
        self._seen: dict[str, float] = {}       # list file -> its mtime when read
        self.attempt: AttemptProcesses | None = None   # the running attempt whose successor's standbys these are
        self.began = 0.0
        self.started = False
        self._listed: set[int] = set()          # local ranks whose list of the running attempt was read
        self._next_look = 0.0

    def begin(self, attempt: AttemptProcesses) -> None:
        """``attempt`` runs (and a restart may follow): its successor's standbys start when ``tick`` says."""
        self.attempt, self.began, self.started, self._next_look = attempt, time.monotonic(), False, 0.0
        self._listed = set()

    def tick(self, attempt: AttemptProcesses) -> float | None:
        """The event loop's look: the standbys started when it is time, new names sent; the seconds until the
        next look (None: nothing more to do in this attempt)."""
        now = time.monotonic()
        if attempt is not self.attempt or now - self.began > LOOK_FOR:
            return None
        if now < self._next_look and not (attempt.stopping and not self.started):
            return self._next_look - now
        self._next_look = now + LOOK
        served = [p for p in attempt.ranks if self._serves(p)]
        fresh = self._read_lists(served)
        self._listed |= fresh
        if not self.started:
            failed = attempt.stopping and attempt.result.interrupted_by is None
            settled = all(p.spec.local_rank in self._listed for p in served)
            if not (failed or settled or now - self.began >= START_AFTER):
                return LOOK
            self.started = True
            self.prepare(served)
            fresh = set(self.lists)
        for local_rank in fresh:
            if local_rank in self.ready:
                self.ready[local_rank].send(self.lists[local_rank])
        return None if attempt.stopping else LOOK

    def _serves(self, process: RankProcess) -> bool:
        spec = process.spec
        return spec.local_rank is not None and spec.argv[0] == self.python and MODULES_ENV in spec.env

    def _read_lists(self, served: list[RankProcess]) -> set[int]:
        """The local ranks whose module list of this attempt is new or changed since the last look."""
        fresh = set()
        for process in served:
            path = process.spec.env[MODULES_ENV]
            try:
                mtime = os.stat(path).st_mtime
            except OSError:
                continue
            if self._seen.get(path) == mtime:
                continue
            names = read_module_list(path)
            self._seen[path] = mtime
            local_rank = process.spec.local_rank
            if names is not None and local_rank is not None:
                self.lists[local_rank] = names
                fresh.add(local_rank)
        return fresh

    def prepare(self, processes: list[RankProcess]) -> None:
        """A standby for each rank of the attempt that has none (the next attempt's ranks become them), sent the
        module list its rank (or an earlier attempt's) wrote."""
        attempt = self.attempt.plan.attempt if self.attempt is not None else 0
        for process in processes:
            spec = process.spec
            if spec.local_rank is None or spec.local_rank in self.ready or spec.argv[0] != self.python:
                continue   # the scheduler, a rank that has one, or a --no-python program
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                child = self.spawner.spawn([spec.argv[0], STANDBY, self.modules],
                                           {**standby_environment(spec, attempt),
                                            "DLAUNCH_STANDBY_FD": str(theirs.fileno())}, spec.cwd, null,
                                           extra_fd=theirs.fileno())
            except OSError:
                ours.close()
                continue   # no standby: that rank starts cold
            finally:
                os.close(null)
                theirs.close()
            self.reaper.watch(child.pid)
            ours.setblocking(False)   # a standby busy importing never holds the event loop (a full queue at
                                      # take(): a cold start)
            standby = self.ready[spec.local_rank] = _Standby(child, ours)
            standby.send(self.lists.get(spec.local_rank, []))

    def take(self, process: RankProcess, out_fd: int):
        """``process``'s standby, told to become it (its output to ``out_fd``); None when there is none alive."""
        spec = process.spec
        found = self.ready.pop(spec.local_rank, None) if spec.local_rank is not None else None
        if found is None:
            return None
        child, ours = found.child, found.channel
        try:
            if child.poll() is not None:
                raise OSError("the standby is gone")
            try:   # its session back at nice 0 (a new session's): at nice 19 beside a loaded host it could
                with open(f"/proc/{child.pid}/autogroup", "w") as group:   # not wake to read this for seconds
                    group.write("0")
            except OSError:
                pass   # no autogroups here, or not allowed: the standby sets it back itself
            request = json.dumps({"env": self.spawner.full_env(spec.env), "argv": list(spec.argv),
                                  "cwd": spec.cwd}).encode()
            socket.send_fds(ours, [request], [out_fd])
        except OSError:
            killpg_quietly(child.pid, signal.SIGKILL)
            child.wait()
            return None
        finally:
            ours.close()
        return child

    def pids(self) -> set[int]:
        return {standby.child.pid for standby in self.ready.values()}

    def close(self) -> None:
        """The launch is over: every standby no restart needed is ended."""
        for standby in self.ready.values():
            standby.channel.close()   # the standby reads an empty message and exits 0
            killpg_quietly(standby.child.pid, signal.SIGKILL)
            standby.child.wait()
        self.ready = {}
