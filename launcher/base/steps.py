"""Step times read from the lines a training script already prints: no code change in the script.

Recognised (milliseconds per step; each checked by a plain substring before any regex runs, so a line that
is no step line costs a few ``in`` tests):

- Megatron-LM and MindSpeed, ``training_log`` in ``megatron/training/training.py``:
  ``' elapsed time per iteration (ms): {:.1f} |'``, e.g.
  `` [2025-04-13 23:41:12] iteration       10/    1000 | consumed samples: 160 | elapsed time per iteration
  (ms): 1147.6 | learning rate: ...`` (the iteration, where the line names one, is the step);
- MindFormers' ``MFLossMonitor`` (``mindformers/core/callback/callback.py``): ``per_step_time: %dms``, e.g.
  ``{ Epoch:[  1/  2], step:[    2/   19], loss: 10.633, per_step_time: 1752ms, lr: 1e-05, ...`` and the newer
  ``{ step:[    2/   10], loss:  11.755612, per_step_time:    710ms, ...``;
- MindSpore's ``TimeMonitor`` (``mindspore/train/callback/_time_monitor.py``):
  ``"epoch time: {:5.3f} ms, per step time: {:5.3f} ms"`` (one line per epoch: the epoch's mean step);
- nanoGPT's ``train.py``: ``f"iter {iter_num}: loss {lossf:.4f}, time {dt*1000:.2f}ms, mfu {running_mfu*100:.2f}%"``,
  e.g. ``iter 30: loss 2.5375, time 98.12ms, mfu 1.23%`` (printed on rank 0, the master process);
- tqdm progress bars as HF Trainer's ``ProgressCallback`` (no description) and Lightning's
  ``TQDMProgressBar`` (``Epoch N:``) draw them: `` 45%|████▌     | 45/100 [00:12<00:15,  3.61it/s]``,
  ``Epoch 0:  45%|████▌     | 45/100 [00:12<00:15,  3.61it/s, v_num=0, loss=0.5]``. The step is the count
  before ``/`` (``45it [...]`` without a total); the step time 1000 / rate ms for ``it/s``, 1000 x rate for
  ``s/it`` (plain tqdm's form under one step a second: ``1.23s/it``; Lightning prints ``0.50it/s``). The rate
  is tqdm's: a moving average for HF, the epoch's mean so far for Lightning (``smoothing=0``). Not steps:
  bars with another description (``Validation DataLoader 0:``, ``Loading checkpoint shards:``), bars drawn
  under another (an evaluation's while the training bar is open: each redraw ends in the cursor-up escape
  ``ESC[A``), and HF's ``{'loss': ..., 'train_runtime': ...}`` dicts. Only ranks that draw a bar report:
  HF draws it on each host's local rank 0, Lightning on global rank 0.
  After a resume HF's bar starts at the steps already done, so tqdm's rate counts steps this attempt skipped
  (``16/16 ... 75.9it/s`` where a step took 60 ms): ``StepReading`` reads one log (one attempt) and, where the
  first bar line with a rate counts more than ``FAR_STEPS`` steps, takes the step time from the bar's own count
  and elapsed time since that line instead of tqdm's rate;
- a user's pattern: a regular expression with a named group ``ms`` (milliseconds) or ``s`` (seconds), and
  optionally ``step``; it runs on the lines that hold its ``literal`` (every line when none is given).

A bar redraws itself after carriage returns, so one line of the log holds many ``\\r`` segments: such a line
is read by its last segment with text (what a terminal shows last). Readers that split at ``\\r`` too
(``base.lines.tail_lines``, as ``stragglers.log_steps`` reads) hand each redraw over as a line of its own.
Lines are at most ``metrics.MAX_LINE`` long where they are read.
"""

from __future__ import annotations

import re
from contextlib import nullcontext
from dataclasses import dataclass, field

from launcher.base.border import PATTERN_SECONDS, ascii_float, ascii_int, check_pattern, cut_line, time_budget

MEGATRON_TEXT = "elapsed time per iteration (ms):"
MEGATRON = re.compile(r"elapsed time per iteration \(ms\):\s*([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)")
MEGATRON_STEP = re.compile(r"\biteration\s+([0-9]+)\s*/")
MINDFORMERS_TEXT = "per_step_time:"
MINDFORMERS = re.compile(r"per_step_time:\s*([0-9]+(?:\.[0-9]*)?)\s*ms")
MINDFORMERS_STEP = re.compile(r"\bstep:\s*\[\s*([0-9]+)\s*/")
TIME_MONITOR_TEXT = "per step time:"
TIME_MONITOR = re.compile(r"per step time:\s*([0-9]+(?:\.[0-9]*)?)\s*ms")
NANOGPT_TEXT = ", time "
NANOGPT = re.compile(r"\biter ([0-9]+): loss [-+0-9.eEnaif]{1,40}, time ([0-9]+(?:\.[0-9]*)?)ms")
# anchored at the segment's start: HF's bar has no description, Lightning's "Epoch N:"; then " 45%|bar| 45/100"
# (Lightning without a total: "|bar| 45/?"; plain tqdm without one: "45it"), then "[00:12<00:15,  3.61it/s"
TQDM = re.compile(r"\s*(?:Epoch \d+[^:|]{0,40}:\s*)?(?:(?:\d+%)?\|[^|]{0,400}\|\s*(\d+)/(?:\d+|\?)|(\d+)it)"
                  r" \[([0-9]{1,6}(?::[0-9]{2}){1,2})(?:<[0-9:?]+)?,\s*([0-9]+(?:\.[0-9]+)?)(it/s|s/it)")
INNER_BAR = "\x1b[A"   # tqdm's cursor up: a bar drawn under another one (an evaluation's, during training)
FAR_STEPS = 3        # a bar whose first rate covers more steps than this counts from its first line (a resume)


@dataclass(frozen=True)
class StepLine:
    """One step line: how long a step took (ms) and, where the line says, which step it was."""

    ms: float
    step: int | None = None
    elapsed: float | None = field(default=None, compare=False)   # a progress bar's elapsed seconds, as drawn


@dataclass(frozen=True)
class UserPattern:
    """A user's step line: ``regex`` with a named group ``ms`` or ``s`` (and optionally ``step``), tried
    only on lines containing ``literal`` (a cheap filter; empty: every line)."""

    regex: re.Pattern
    literal: str = ""

    @classmethod
    def parse(cls, text: str, literal: str = "") -> UserPattern:
        """``text`` compiled; ValueError when it is no regex or names neither ``ms`` nor ``s``."""
        shown = text if len(text) <= 80 else text[:77] + "..."
        try:
            regex = re.compile(text)
        except (re.error, RecursionError, OverflowError) as exc:
            raise ValueError(f"step pattern {shown!r}: {exc}") from None
        if not {"ms", "s"} & set(regex.groupindex):
            raise ValueError(f"step pattern {shown!r}: it needs a named group (?P<ms>...) or (?P<s>...)")
        check_pattern(regex, f"step pattern {shown!r}")   # Refused is a ValueError
        return cls(regex, literal)


def pattern_budget(user: UserPattern | None):
    """The time budget a batch of ``step_line`` calls with ``user`` runs under (``border.OverBudget`` past it):
    a pattern that passed ``check_pattern`` may still be slow (``.*.*.*x`` on a long line)."""
    return nullcontext() if user is None else time_budget(PATTERN_SECONDS, f"--step-pattern {user.regex.pattern!r}")


_number = ascii_float   # a step time: ASCII digits only, finite, not negative


def _step(regex: re.Pattern, line: str) -> int | None:
    match = regex.search(line)
    return ascii_int(match.group(1)) if match else None


def last_segment(line: str) -> str:
    """The last ``\\r`` segment of a line that holds text (the line itself when it has no ``\\r``)."""
    end = len(line)
    while True:
        start = line.rfind("\r", 0, end) + 1
        if start == 0 or line[start:end].strip():
            return line[start:end]
        end = start - 1


def _clock(text: str) -> float | None:
    """tqdm's elapsed time, ``12:34`` or ``1:02:03``, in seconds."""
    seconds = 0
    for part in text.split(":"):
        value = ascii_int(part)
        if value is None:
            return None
        seconds = seconds * 60 + value
    return float(seconds)


def _tqdm(line: str) -> StepLine | None:
    if INNER_BAR in line:
        return None
    match = TQDM.match(line)
    rate = _number(match.group(4)) if match else None
    if match is None or not rate:
        return None
    count = match.group(1) or match.group(2)
    return StepLine(1000.0 / rate if match.group(5) == "it/s" else 1000.0 * rate, ascii_int(count),
                    _clock(match.group(3)))


def step_line(line: str, user: UserPattern | None = None) -> StepLine | None:
    """The step time a line reports, or None. A user's pattern is tried first. A line of several ``\\r``
    segments (a redrawn progress bar) is read by its last one, at most ``border.LINE_LIMIT`` characters of it.
    A user's pattern may run past its time budget (``border.OverBudget``) where the caller set one."""
    if "\r" in line:
        line = last_segment(line)
    line = cut_line(line)
    if user is not None and (not user.literal or user.literal in line):
        match = user.regex.search(line)
        if match:
            groups = match.groupdict()
            ms = _number(groups["ms"]) if groups.get("ms") else None
            if ms is None and groups.get("s"):
                seconds = _number(groups["s"])
                ms = None if seconds is None else seconds * 1000.0
            if ms is not None:
                step = groups.get("step")
                return StepLine(ms, ascii_int(step))
    if MEGATRON_TEXT in line:
        match = MEGATRON.search(line)
        ms = _number(match.group(1)) if match else None
        return None if ms is None else StepLine(ms, _step(MEGATRON_STEP, line))
    if MINDFORMERS_TEXT in line:
        match = MINDFORMERS.search(line)
        ms = _number(match.group(1)) if match else None
        return None if ms is None else StepLine(ms, _step(MINDFORMERS_STEP, line))
    if TIME_MONITOR_TEXT in line:
        match = TIME_MONITOR.search(line)
        ms = _number(match.group(1)) if match else None
        return None if ms is None else StepLine(ms)
    if NANOGPT_TEXT in line and "iter " in line:
        match = NANOGPT.search(line)
        ms = _number(match.group(2)) if match else None
        return None if match is None or ms is None else StepLine(ms, ascii_int(match.group(1)))
    # tqdm's rates; "/" and "[" first: one-character tests are memchr, "it/s" costs five times as much
    if "/" in line and "[" in line and ("it/s" in line or "s/it" in line):
        return _tqdm(line)
    return None


class StepReading:
    """``step_line`` over the lines of one log (one attempt), in order: a progress bar's step time from this
    attempt's own steps.

    tqdm's rate counts every step the bar counted since it was drawn; after a resume HF Trainer's bar jumps to
    the steps already done at the first step, so its rate is too high for as long as that jump weighs in its
    average.  Where the first bar line with a rate counts more than ``FAR_STEPS`` steps, the step time is taken
    from the bar itself.  tqdm shows whole seconds, so the bar's clock is read where it ticks over (the first
    line showing a new second was drawn just past that second): the step time is the seconds between two such
    ticks over the steps between them, from the first tick (or the newest one ``SPAN`` seconds back) to the
    newest.  The first times come two seconds into the bar; every bar line from then on repeats the newest.
    A bar that starts again (a new epoch's: a smaller count or elapsed time) is a new bar."""

    SPAN = 10.0   # seconds of the bar a step time spans, at most (a rank that slows down shows it)

    def __init__(self, user: UserPattern | None = None):
        self.user = user
        self._origin: tuple[int, float] | None = None   # (count, elapsed) of the bar's first line with a rate
        self._counting = False                          # True: step times from the bar's count, not its rate
        self._ticks: list[tuple[int, float]] = []       # (count, elapsed) where the bar's clock ticked over
        self._ms: float | None = None                   # the newest step time from the ticks

    def read(self, line: str) -> StepLine | None:
        found = step_line(line, self.user)
        if found is None or found.elapsed is None or found.step is None:
            return found
        origin = self._origin
        if origin is None or found.step < origin[0] or found.elapsed < origin[1]:
            self._origin, self._counting = (found.step, found.elapsed), found.step > FAR_STEPS
            self._ticks, self._ms = [], None
            return None if self._counting else found
        if not self._counting:
            return found
        last = self._ticks[-1][1] if self._ticks else origin[1]
        if found.elapsed > last:
            self._ticks.append((found.step, found.elapsed))
            start = next((tick for tick in reversed(self._ticks) if found.elapsed - tick[1] >= self.SPAN),
                         self._ticks[0])
            if found.step > start[0] and found.elapsed > start[1]:
                self._ms = (found.elapsed - start[1]) * 1000.0 / (found.step - start[0])
            del self._ticks[:max(0, self._ticks.index(start) - 1)]
        return None if self._ms is None else StepLine(self._ms, found.step, found.elapsed)


def _fuzz_user_line(text: str) -> StepLine | None:
    """``step_line`` with a user's pattern that reads every field (border.READERS: the fuzz test's entry)."""
    return step_line(text, _FUZZ_PATTERN)


_FUZZ_PATTERN = UserPattern(re.compile(r"step (?P<step>\S+) took (?P<ms>\S+) ms|(?P<s>\S+) s/step"))
