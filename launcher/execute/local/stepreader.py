"""The ranks' step times while they train: read from their logs as they grow, and from ``beat(step=N)``.

Most ranks write straight into their log file (``tee.py``: the launcher never touches those bytes), so the
launcher reads what each log gained since its last look, every ``INTERVAL`` seconds, and keeps the lines
``base.steps`` recognises (Megatron, MindFormers, MindSpore's TimeMonitor, ``--step-pattern``).  The cost is
bounded whatever a rank prints: at most ``READ_LIMIT`` bytes of a log per look (a rank that printed more
has its newest bytes read, the older skipped: step times are a sample, not a ledger).  A rank that calls
``beat(step=N)`` gives exact step times: the time between two heartbeats over the steps between them.

What is read feeds the straggler scores (``base.stragglers``: the console line, ``straggler.py``) and the
hang watch's warm-up (``HangWatch.stepped``: a learned timeout waits for the job's first steps).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

from launcher.base.border import OverBudget, open_fd
from launcher.base.console import say
from launcher.base.pace import Pace
from launcher.base.steps import StepReading, UserPattern, pattern_budget
from launcher.base.stragglers import WORK_FILE, RankSteps, work_record
from launcher.contract import HEARTBEAT_FILE
from launcher.execute.local.hangs import read_heartbeat
from launcher.execute.local.tee import last_segment

INTERVAL = 0.5            # seconds between looks at the logs
READ_LIMIT = 64 << 10     # bytes of one log read per look, at most
PENDING_LIMIT = 64 << 10  # an unfinished line longer than this is dropped (a progress bar without newlines)
WORK_STEPS = 10           # a CPU sample spans at least this many steps of the job
WORK_SECONDS = 2.0        # and this many seconds: /proc counts CPU in 10 ms ticks, a sample spans hundreds


@dataclass
class _Log:
    """Where the reader is in one rank's log, and its heartbeat's last step."""

    offset: int = 0
    pending: bytes = b""
    beat_mtime: float = 0.0      # the heartbeat's time when last read
    beat_time: float = 0.0       # when it first said beat_step
    beat_step: int | None = None
    reading: StepReading | None = None   # the log's step lines in order (a progress bar's own count)


class StepReader:
    """Step times of every rank of this host, as their logs grow."""

    def __init__(self, user: UserPattern | None = None, host: str = ""):
        self.user = user
        self.host = host
        self.steps: dict[int, RankSteps] = {}
        self._logs: dict[str, _Log] = {}
        self._work: dict[int, tuple[float, int, float]] = {}   # rank -> (CPU seconds, the job's steps, when)
        self.due = Pace(INTERVAL).due   # nothing to read in a launch's first half second

    def read(self, spec) -> tuple[int, int | None]:
        """(how many step lines, the newest step they name) of one rank (a ``RankSpec``) since the last look; a
        heartbeat that moved on adds a step time too."""
        steps = self.steps.setdefault(spec.rank, RankSteps(spec.rank, self.host))
        log = self._logs.setdefault(spec.rank_dir, _Log())
        if log.reading is None:
            log.reading = StepReading(self.user)
        count, newest = 0, None
        try:
            with pattern_budget(self.user):
                for line in self._new_lines(spec.log_file, log):
                    found = log.reading.read(line)
                    if found is not None:
                        steps.add(found.ms, found.step)
                        count, newest = count + 1, found.step if found.step is not None else newest
        except OverBudget as exc:   # read on without it: the frameworks' lines still count
            say(f"{exc}; not using it for the rest of this run")
            self.user = None
            for each in self._logs.values():
                if each.reading is not None:
                    each.reading.user = None
        beat = self._beat(os.path.join(spec.rank_dir, HEARTBEAT_FILE), log)
        if beat is not None:   # a step time only: the hang watch counts heartbeat steps itself
            steps.add(*beat)
        return count, newest

    def measure_work(self, live: list) -> None:
        """Each live rank's (``RankProcess``) CPU time per step of the job (``RankSteps.work``), one sample per
        ``WORK_STEPS`` steps and ``WORK_SECONDS`` at least: the step count is the most step lines any rank of this
        host printed, so a rank that prints none is measured too."""
        from launcher.execute.local.proctree import cpu_seconds

        progress = max((steps.count for steps in self.steps.values()), default=0)
        now = time.monotonic()
        for process in live:
            rank = process.spec.rank
            before = self._work.get(rank)
            if before is not None and (progress - before[1] < WORK_STEPS or now - before[2] < WORK_SECONDS):
                continue
            used = cpu_seconds(process.popen.pid)
            if used is None:
                continue
            if before is not None:
                self.steps.setdefault(rank, RankSteps(rank, self.host)).work.append(
                    (used - before[0]) * 1000.0 / (progress - before[1]))
            self._work[rank] = (used, progress, now)

    def save_work(self, specs: list) -> None:
        """Each rank's CPU work per step into its rank directory (``stragglers.WORK_FILE``), for ``dlaunch
        status``; a write that fails is tried again next time."""
        from launcher.base.atomic import write_atomically

        for spec in specs:
            steps = self.steps.get(spec.rank)
            if steps is not None and steps.work:
                record = work_record(steps)
                try:
                    write_atomically(os.path.join(spec.rank_dir, WORK_FILE),
                                     lambda fh, record=record: json.dump(record, fh))
                except OSError:
                    continue

    def _new_lines(self, path: str, log: _Log) -> list[str]:
        fd = open_fd(path)   # the rank's: a FIFO or a link put in its place is not read
        if fd is None:
            return []
        try:
            size = os.fstat(fd).st_size
            if size < log.offset:   # truncated: read it again from its start
                log.offset, log.pending = 0, b""
            start = max(log.offset, size - READ_LIMIT)
            if start > log.offset:  # too much to read: the newest bytes only, from a whole line
                log.pending = b""
            data = os.pread(fd, size - start, start) if size > start else b""
        finally:
            os.close(fd)
        skip_partial = start > log.offset
        log.offset = start + len(data)
        data = log.pending + data
        lines = data.split(b"\n")
        log.pending = lines.pop()
        if len(log.pending) > PENDING_LIMIT:
            log.pending = b""
        if skip_partial and lines:
            lines.pop(0)
        drawn = _finished_redraw(log, partial=skip_partial and not lines)
        return [last_segment(line).decode("utf-8", "replace") for line in lines + drawn]   # a progress bar: as drawn

    def _beat(self, path: str, log: _Log) -> tuple[float, int] | None:
        """(ms per step, step) between this heartbeat and the one before, when ``beat(step=N)`` moved on."""
        try:
            beat_time = os.stat(path).st_mtime
        except OSError:
            return None
        if beat_time == log.beat_mtime:
            return None
        log.beat_mtime = beat_time
        step = read_heartbeat(path)[0]
        if step is None or step == log.beat_step:
            return None
        before_time, before_step = log.beat_time, log.beat_step
        log.beat_time, log.beat_step = beat_time, step   # when the rank was first seen at this step
        if before_step is None or step < before_step:
            return None
        return (beat_time - before_time) * 1000.0 / (step - before_step), step


def _finished_redraw(log: _Log, partial: bool) -> list[bytes]:
    """A progress bar being drawn (tqdm: HF Trainer's, Lightning's) redraws one line after carriage returns and
    ends it only when it closes: its newest finished redraw (one a later ``\\r`` follows), taken out of the
    unfinished line so it is read once; none where there is none (``partial``: the line's start was not read)."""
    cut = log.pending.rfind(b"\r")
    if cut <= 0:
        return []
    finished, log.pending = log.pending[:cut], log.pending[cut:]
    if partial:
        finished = finished.partition(b"\r")[2]
    segment = last_segment(finished)
    return [segment] if segment.strip() else []
