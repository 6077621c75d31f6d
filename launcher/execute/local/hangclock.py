"""Hang timeouts learned from the job (``--hang-learn``), with ``--hang-timeout`` as their upper bound.

A fixed timeout is either too long (a 30-minute collective timeout wasted) or too short (a long save
trips it).  NVIDIA's resiliency extension learns them (``fault_tolerance/timeouts_calc.py``: a safety factor
times the longest interval seen, sections apart, a warm-up excluded), with a client in the training loop.
Here they come from what the hang watch already looks at, signs of life, with no client:

- the **step budget**: ``FACTOR`` x the longest silence of any rank of this host between two signs of
  life, counted once the job reported ``WARMUP_STEPS`` steps (imports, loading, compiling and the first
  steps are not counted) and applied once ``LEARN_STEPS`` more steps were seen; never under ``FLOOR``;
- a **phase budget** per phase (``heartbeat.phase("checkpoint")``, or a checkpoint being written in a rank's
  checkpoint directory: ``checkpoint``): ``FACTOR`` x the longest such phase that ended.  While any rank of
  the host is in a phase, every rank of the host has that budget (the others wait for it in a collective).

Until a budget is learned it is ``--hang-timeout``, and no budget exceeds it.  Steps are what the ranks
report: ``beat(step=N)`` or the step lines a launch recognises (``base.steps``, ``--step-pattern``); a job that
reports none keeps ``--hang-timeout``.  What is learned is kept in the run directory after every change
(``hang_timeouts[.HOST].json``), so a restart, or a requeued job resuming from the same directory, applies
it from its first step on (its start up to that step keeps ``--hang-timeout``: loading is no step).
Pure: numbers in, numbers out; reading and writing the file are the two functions at the end.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from launcher.base.atomic import write_atomically
from launcher.base.border import Refused, expect, parse_json, read_text, whole_number

FACTOR = 5.0          # the budget is this many times the longest silence (or phase) seen
WARMUP_STEPS = 5      # steps of an attempt before its silences are counted
LEARN_STEPS = 10      # steps counted after the warm-up before the step budget applies
FLOOR = 1.0           # no budget below this many seconds
CHECK_SECONDS = 0.1   # a learning watch looks this often: a rank stepping every 0.2 s is seen step by step
CHECKPOINT = "checkpoint"
FILE = "hang_timeouts"
CLOCK_LIMIT = 1 << 20   # bytes of a hang clock file read back
NEWS = 0.05             # a learned budget that moved by this share of the one last said is said again


@dataclass
class HangClock:
    """What the job taught about its silences: the longest between signs of life, and each phase's longest."""

    bound: float                 # --hang-timeout: the budget until one is learned, and the most any may be
    silence: float = 0.0         # the longest silence seen between two signs of life of a rank, outside phases
    counted_steps: int = 0       # steps seen after the warm-ups, every attempt's together
    phases: dict[str, float] = field(default_factory=dict)   # phase -> its longest duration seen
    changed: bool = False        # learned something since it was last written
    said: dict[str, float] | None = None   # the budgets last said (``news``): "" the step budget, then phases

    @property
    def learned(self) -> bool:
        return self.counted_steps >= LEARN_STEPS and self.silence > 0

    def step_budget(self) -> float:
        return self._budget(self.silence) if self.learned else self.bound

    def phase_budget(self, name: str) -> float:
        return self._budget(self.phases[name]) if name in self.phases else self.bound

    def _budget(self, longest: float) -> float:
        return min(self.bound, max(FLOOR, FACTOR * longest))

    def saw_silence(self, seconds: float) -> None:
        if seconds > self.silence:
            self.silence, self.changed = seconds, True

    def saw_steps(self, count: int) -> None:
        if count > 0:
            self.counted_steps += count
            self.changed = True

    def saw_phase(self, name: str, seconds: float) -> None:
        if seconds > self.phases.get(name, 0.0):
            self.phases[name], self.changed = seconds, True

    def describe(self) -> str:
        """``hang timeout 1.2 s (5 x the longest silence, 0.24 s, over 10 steps); checkpoint 15 s``"""
        if self.learned:
            text = (f"hang timeout learned: {self.step_budget():.3g} s ({FACTOR:g} x the longest silence between "
                    f"signs of life, {self.silence:.3g} s, over {self.counted_steps} steps; at most --hang-timeout "
                    f"{self.bound:g} s)")
        else:
            text = f"hang timeout {self.bound:g} s (--hang-timeout; nothing learned yet)"
        return text + "".join(f"; {name}: {self.phase_budget(name):.3g} s" for name in sorted(self.phases))

    def budgets(self) -> dict[str, float]:
        """The learned budgets: "" the step budget, then each phase's."""
        learned = {"": self.step_budget()} if self.learned else {}
        return {**learned, **{name: self.phase_budget(name) for name in self.phases}}

    def news(self) -> str | None:
        """The line to say when a learned budget is new or moved by ``NEWS`` (5%) or more since it was last said
        (the budget in force changes the verdicts: ``1.18 s`` then ``1.27 s`` is worth a line), else None."""
        now = self.budgets()
        said = self.said or {}
        moved = [name for name, value in now.items()
                 if name not in said or abs(value - said[name]) >= NEWS * said[name]]
        if not self.learned or not moved:
            return None
        before = [f"{name or 'step'} {said[name]:.3g} s" for name in moved if name in said]
        self.said = now
        return self.describe() + (f" (was: {', '.join(before)})" if before else "")

    def to_dict(self) -> dict:
        return {"factor": FACTOR, "bound_s": self.bound, "silence_s": round(self.silence, 4),
                "counted_steps": self.counted_steps, "step_budget_s": round(self.step_budget(), 4),
                "phases_s": {name: round(value, 4) for name, value in self.phases.items()},
                "phase_budgets_s": {name: round(self.phase_budget(name), 4) for name in self.phases}}


def clock_path(run_dir: str, host_files_suffix: str) -> str:
    return os.path.join(run_dir, f"{FILE}{host_files_suffix}.json")


def load_clock(path: str, bound: float) -> HangClock:
    """What an earlier attempt (or run, on a requeue) learned, under today's bound; a fresh clock when there is
    no such file or it is unreadable (learning starts again: the bound applies meanwhile, so nothing is lost)."""
    try:
        text = read_text(path, "hang clock", CLOCK_LIMIT)
        return parse_clock(text, bound) if text is not None else HangClock(bound)
    except Refused:
        return HangClock(bound)


def parse_clock(text: str, bound: float = 60.0) -> HangClock:
    """A hang clock file's text (``to_dict``'s keys); Refused for anything else."""
    data = expect(parse_json(text, "hang clock"), dict, "hang clock")
    phases = {}
    for name, value in expect(data.get("phases_s") or {}, dict, "hang clock phases_s").items():
        seconds = _seconds(value, f"hang clock phase {name[:40]!r}")
        if seconds > 0:
            phases[name[:200]] = seconds
    return HangClock(bound, silence=_seconds(data.get("silence_s", 0.0), "hang clock silence_s"),
                     counted_steps=whole_number(data.get("counted_steps", 0), "hang clock counted_steps", low=0),
                     phases=phases)


def _seconds(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e9:
        raise Refused(f"{what}: {value!r} is not a number of seconds"[:200])
    return float(value)


def save_clock(path: str, clock: HangClock) -> None:
    """Keep what was learned (atomically: a reader never sees half); a write that fails is retried on the next
    change rather than stopping the job."""
    try:
        write_atomically(path, lambda fh: json.dump(clock.to_dict(), fh, indent=1))
    except OSError:
        return
    clock.changed = False
