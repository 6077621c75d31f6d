"""Hang detection: a rank that shows no sign of life for too long is a failure, with its stack on record.

A rank is alive while it writes output (its log file grows), touches its
heartbeat file (``launcher.heartbeat.beat()``, e.g. once a step), or saves a
checkpoint (its checkpoint directory changes, or a save's temporary file in it
grows: dlaunch's own saves also beat the heartbeat while they write, MindSpore's
``{prefix}-{epoch}_{step}.tmp`` only grow).  All three are file times, so
watching costs the launcher a few ``stat`` calls and one directory listing per
rank per check, whatever the rank prints.  Before the job is stopped, the
Python stack of every rank on this host goes into its rank directory
(``py-spy dump``), so the blocking call (an all_reduce one rank never joined, a
dead data loader) is on record.
"""

from __future__ import annotations

import os
import time

from launcher.base.lines import tail_lines
from launcher.checkpoint import names as ckptnames
from launcher.contract import HEARTBEAT_FILE
from launcher.plan.make import RankSpec
from launcher.rundir.paths import attempt_file

STACK_DUMP_SECONDS = 20.0
LAUNCHER_GAP_SECONDS = 1.0   # the launcher slept this much longer than it asked: it was stopped (SIGSTOP, Ctrl-Z)


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def _saves_in_progress(directory: str) -> float:
    """When a checkpoint being written into ``directory`` last grew (0: none is)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return 0.0
    return max((_mtime(os.path.join(directory, name)) for name in names
                if (parsed := ckptnames.parse(name)) is not None and parsed.kind == ckptnames.TEMPORARY), default=0.0)


def last_sign_of_life(spec: RankSpec, started: float) -> float:
    """When the rank last wrote output, beat its heartbeat, touched its checkpoint directory or wrote a
    checkpoint into it (epoch seconds)."""
    signs = [started, _mtime(spec.log_file), _mtime(os.path.join(spec.rank_dir, HEARTBEAT_FILE))]
    if spec.ckpt_dir is not None:   # MindSpore's scheduler has no checkpoint directory
        signs += [_mtime(spec.ckpt_dir), _saves_in_progress(spec.ckpt_dir)]
    return max(signs)


class HangWatch:
    """Which rank, if any, has been silent for longer than ``timeout`` seconds."""

    def __init__(self, timeout: float, started: float):
        self.timeout = timeout
        self.started = started
        self.interval = min(0.5, timeout / 4)
        self._next_check = 0.0
        self._last_wake = 0.0

    def due(self) -> bool:
        """True at most once an interval: the launcher wakes for every chunk of console output, and
        checking on each wake-up would cost more than the output itself.

        Time the launcher did not run (stopped, or starved) is not the ranks' silence: their output waited
        in the pipes.  After such a gap the check is skipped (the waiting output is read first) and every
        rank's silence counts from the launcher's return."""
        now = time.monotonic()
        gap = now - self._last_wake if self._last_wake else 0.0
        self._last_wake = now
        if gap > self.interval + LAUNCHER_GAP_SECONDS:
            self.started = max(self.started, time.time())
            self._next_check = now + self.interval
            return False
        if now < self._next_check:
            return False
        self._next_check = now + self.interval
        return True

    def last_sign_of_life(self, spec: RankSpec) -> float:
        return last_sign_of_life(spec, self.started)

    def find_hung(self, live: list[RankSpec], now: float | None = None) -> tuple[RankSpec, float] | None:
        """The live rank silent the longest, if it has been silent past the timeout."""
        now = time.time() if now is None else now
        silences = [(now - self.last_sign_of_life(spec), spec) for spec in live]
        if not silences:
            return None
        silent_for, spec = max(silences, key=lambda pair: pair[0])
        return (spec, silent_for) if silent_for >= self.timeout else None


def describe_hang(spec: RankSpec, silent_for: float) -> str:
    last = tail_lines(spec.log_file, 1)
    said = f"its last line, {silent_for:.1f} s ago: {last[0]!r}" if last else "it printed nothing"
    return (f"rank {spec.rank} hung: no output, heartbeat or checkpoint for {silent_for:.1f} s "
            f"(--hang-timeout); {said}")


def dump_stacks(specs_and_pids: list[tuple[RankSpec, int]],
                attempt: int) -> tuple[dict[int | None, str], str | None]:
    """Write every rank's Python stack to ``rank_dir/stack.txt`` in parallel; (files by rank, None for MindSpore's
    scheduler; why none) ."""
    import subprocess

    py_spy = _find_py_spy()
    files: dict[int | None, str] = {}
    if py_spy is None:
        why = "no stack could be taken: py-spy is not installed (pip install py-spy, or dlaunch[torch])"
        for spec, _ in specs_and_pids:
            path = attempt_file(spec.rank_dir, "stack", "txt", attempt)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(why + "\n")
            files[spec.rank] = path
        return files, why
    running = []
    for spec, pid in specs_and_pids:
        path = attempt_file(spec.rank_dir, "stack", "txt", attempt)
        out = open(path, "wb")
        running.append((spec, path, out, subprocess.Popen([py_spy, "dump", "--pid", str(pid)], stdout=out,
                                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)))
    deadline = time.monotonic() + STACK_DUMP_SECONDS
    for spec, path, out, proc in running:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            out.write(b"\ndlaunch: py-spy did not finish in time\n")
        out.close()
        files[spec.rank] = path
    return files, None


def _find_py_spy() -> str | None:
    """py-spy on PATH, else beside the launcher's Python."""
    import shutil

    return shutil.which("py-spy") or _beside_python("py-spy")


def _beside_python(name: str) -> str | None:
    """Tools installed in the launcher's virtualenv are not always on PATH."""
    import sys

    candidate = os.path.join(os.path.dirname(sys.executable), name)
    return candidate if os.access(candidate, os.X_OK) else None


def check_hangs(hangs: HangWatch, live: list, attempt: int):
    """If a rank (of ``live``, RankProcess objects) has hung: every live rank's stack recorded, and the hung
    rank's result returned; else None."""
    found = hangs.find_hung([p.spec for p in live])
    if not found:
        return None
    spec, silent_for = found
    hung = next(p.result for p in live if p.spec is spec)
    hung.hang = describe_hang(spec, silent_for)
    dump_rank_stacks(live, attempt)
    return hung


def dump_rank_stacks(live: list, attempt: int) -> None:
    """Every live rank's stack into its rank directory (py-spy), recorded in its result."""
    from launcher.base.console import say
    from launcher.rundir.create import describe_os_error

    try:
        files, why = dump_stacks([(p.spec, p.popen.pid) for p in live], attempt)
    except OSError as exc:   # a full disk must not turn a hang into a traceback
        files, why = {}, f"no stack could be written: {describe_os_error(exc)}"
    for process in live:
        process.result.stack_file = files.get(process.spec.rank)
    if why:
        say(why)
