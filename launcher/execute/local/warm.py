"""Warm restarts (``--warm-restarts torch``): a standby interpreter per local rank, its imports done, that the
next attempt's rank becomes instead of a new process.

A restart's seconds are almost all new interpreters starting and importing torch again before the first
collective (benchmarks/bench_restart.py: 0.13 s of dlaunch's, then about 5 s of the job's on 2 cores). While
an attempt runs, dlaunch starts one ``standby.py`` per local rank (spawned like a rank: its own session, the
parent-death signal, the watchdog told, the launch's marker), which imports the given modules and waits.
When the next attempt starts a rank, the standby gets the rank's environment, argv, working directory and
output descriptor over a Unix socket, and runs the script as ``__main__``; a standby that died, or none,
means a cold start as always. Standbys that no restart needed are killed when the launch ends.

What differs from a cold start: the modules were imported with the previous attempt's environment (a
module that reads a variable at import, such as one that caches ``CUDA_VISIBLE_DEVICES`` or a thread count,
keeps the old value: restarts keep every rank's devices, so that holds for dlaunch's own variables except
TORCHELASTIC_RESTART_COUNT, DLAUNCH_RESUME_* and MASTER_PORT, which torch reads at use), the script runs
through ``runpy`` (``sys.argv`` and ``sys.path[0]`` as Python sets them, ``__main__`` a fresh module), and
the interpreter's own options come from the standby's start.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

from launcher.execute.local.processes import RankProcess, killpg_quietly

STANDBY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "standby.py")


class Standbys:
    """This launch's standby interpreters: local rank -> (its process, dlaunch's end of its socket)."""

    def __init__(self, spawner, reaper, modules: str):
        self.spawner, self.reaper, self.modules = spawner, reaper, modules
        self.python = sys.executable   # the ranks' interpreter (Options.python): only its ranks have standbys
        self.ready: dict[int, tuple] = {}

    def prepare(self, processes: list[RankProcess]) -> None:
        """A standby for each rank of the attempt that has none (the next attempt's ranks become them)."""
        for process in processes:
            spec = process.spec
            if spec.local_rank is None or spec.local_rank in self.ready or spec.argv[0] != self.python:
                continue   # the scheduler, a rank that has one, or a --no-python program
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                child = self.spawner.spawn([spec.argv[0], STANDBY, self.modules],
                                           {**spec.env, "DLAUNCH_STANDBY_FD": str(theirs.fileno())}, spec.cwd, null,
                                           extra_fd=theirs.fileno())
            except OSError:
                ours.close()
                continue   # no standby: that rank starts cold
            finally:
                os.close(null)
                theirs.close()
            self.reaper.watch(child.pid)
            self.ready[spec.local_rank] = (child, ours)

    def take(self, process: RankProcess, out_fd: int):
        """``process``'s standby, told to become it (its output to ``out_fd``); None when there is none alive."""
        spec = process.spec
        found = self.ready.pop(spec.local_rank, None) if spec.local_rank is not None else None
        if found is None:
            return None
        child, ours = found
        try:
            if child.poll() is not None:
                raise OSError("the standby is gone")
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
        return {child.pid for child, _ in self.ready.values()}

    def close(self) -> None:
        """The launch is over: every standby no restart needed is ended."""
        for child, ours in self.ready.values():
            ours.close()   # the standby reads an empty message and exits 0
            killpg_quietly(child.pid, signal.SIGKILL)
            child.wait()
        self.ready = {}
