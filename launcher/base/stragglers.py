"""Straggler scores from the ranks' step times (Megatron's ``StragglerDetector`` and NVIDIA's resiliency
extension define them the same way; here they come from the logs, with no code in the training loop):

- **relative**: the fastest rank's median step time / this rank's median (1.0 for the fastest; a rank
  taking 40% longer per step scores 1/1.4 = 0.71);
- **individual**: this rank's own best (the lowest median of ``WINDOW`` consecutive steps) / its current
  (the median of its last ``WINDOW`` steps): a rank that got slower than it was scores under 1.

A rank is flagged when either score is under ``THRESHOLD`` (0.75). Hosts get a relative score the same way,
from their ranks' step times pooled. Everything here is pure: step times in, scores out.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from launcher.base.border import OverBudget
from launcher.base.lines import tail_lines
from launcher.base.steps import StepReading, UserPattern, pattern_budget

THRESHOLD = 0.75     # a score under this flags the rank (or host)
WINDOW = 10          # steps in the "current" median, and in each window of the "best" one
MAX_TIMES = 4096     # step times kept per rank (the newest)
TAIL_BYTES = 1 << 20  # status reads the last MiB of each rank's log (logs can be gigabytes)
SHOWN = 3            # slowest ranks and hosts named on the status line


def median(values) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


@dataclass
class RankSteps:
    """One rank's step times (ms), in the order its log printed them (the newest ``MAX_TIMES``)."""

    rank: int
    host: str
    times: deque = field(default_factory=lambda: deque(maxlen=MAX_TIMES))
    last_step: int | None = None

    def add(self, ms: float, step: int | None = None) -> None:
        self.times.append(ms)
        if step is not None:
            self.last_step = step


def read_steps(rank: int, host: str, lines, user: UserPattern | None = None) -> RankSteps:
    """A rank's step times from its log's lines."""
    steps = RankSteps(rank, host)
    lines = iter(lines)
    reading = StepReading(user)
    try:
        with pattern_budget(user):
            for line in lines:
                _count(steps, reading.read(line))
    except OverBudget:   # the user's pattern is too slow for this log: the frameworks' lines still count
        reading.user = None
        for line in lines:
            _count(steps, reading.read(line))
    return steps


def _count(steps: RankSteps, found) -> None:
    if found is None:
        return
    if found.step is not None and found.step == steps.last_step and steps.times and steps.times[-1] == found.ms:
        return   # a progress bar drawn again (a line split at its carriage returns): the same step, once
    steps.add(found.ms, found.step)


def log_steps(path: str, rank: int, host: str, user: UserPattern | None = None) -> RankSteps:
    """A rank's step times from the end of its log (its last ``TAIL_BYTES``): bounded cost per refresh."""
    return read_steps(rank, host, tail_lines(path, MAX_TIMES * 8, TAIL_BYTES), user)


def individual(times) -> tuple[float, float]:
    """(best, current) medians of a rank's step times: the lowest median of any ``WINDOW`` consecutive
    steps, and that of the last ``WINDOW``."""
    times = list(times)
    if len(times) <= WINDOW:
        whole = median(times)
        return whole, whole
    best = min(median(times[at:at + WINDOW]) for at in range(0, len(times) - WINDOW + 1))
    return best, median(times[-WINDOW:])


def _ratio(top: float, bottom: float) -> float:
    return round(top / bottom, 3) if bottom > 0 else 1.0


def scores(ranks: list[RankSteps], threshold: float = THRESHOLD) -> dict | None:
    """Every rank's and host's scores, slowest first (the longest median step time first; None when no rank
    printed a step time)::

        {"threshold": 0.75, "ranks": [{"rank", "host", "steps", "last_step", "median_ms", "best_ms",
         "current_ms", "relative", "individual", "flagged"}, ...],
         "hosts": [{"host", "ranks", "median_ms", "relative", "flagged"}, ...]}
    """
    timed = [r for r in ranks if r.times]
    if not timed:
        return None
    medians = {r.rank: median(r.times) for r in timed}
    fastest = min(medians.values())
    rows: list[dict] = []
    for r in timed:
        best, current = individual(r.times)
        relative, own = _ratio(fastest, medians[r.rank]), _ratio(best, current)
        rows.append({"rank": r.rank, "host": r.host, "steps": len(r.times), "last_step": r.last_step,
                     "median_ms": round(medians[r.rank], 3), "best_ms": round(best, 3),
                     "current_ms": round(current, 3), "relative": relative, "individual": own,
                     "flagged": relative < threshold or own < threshold})
    rows.sort(key=lambda row: (-float(row["median_ms"]), int(row["rank"])))   # "slowest first": by time
    pooled: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    for r in timed:
        pooled.setdefault(r.host, []).extend(r.times)
        counts[r.host] = counts.get(r.host, 0) + 1
    host_medians = {host: median(times) for host, times in pooled.items()}
    fastest_host = min(host_medians.values())
    hosts = [{"host": host, "ranks": counts[host], "median_ms": round(value, 3),
              "relative": _ratio(fastest_host, value), "flagged": _ratio(fastest_host, value) < threshold}
             for host, value in host_medians.items()]
    hosts.sort(key=lambda row: (-float(row["median_ms"]), row["host"]))
    return {"threshold": threshold, "ranks": rows, "hosts": hosts}


def straggler_line(report: dict | None) -> str | None:
    """``steps: slowest ranks 3 (relative 0.71, individual 0.98, flagged), 0 (1.00, 1.00); hosts: ...``"""
    if not report:
        return None

    def rank_text(row: dict) -> str:
        flag = ", flagged" if row["flagged"] else ""
        return (f"rank {row['rank']} ({row['median_ms']:.1f} ms/step, relative {row['relative']:.2f}, "
                f"individual {row['individual']:.2f}{flag})")

    shown = report["ranks"][:SHOWN]
    text = "steps: slowest " + ", ".join(rank_text(row) for row in shown)
    also = [row for row in report["ranks"][SHOWN:] if row["flagged"]][:SHOWN]   # slower than they were
    if also:
        text += "; also flagged " + ", ".join(rank_text(row) for row in also)
    if len(report["hosts"]) > 1:
        text += "; hosts " + ", ".join(
            f"{row['host']} (relative {row['relative']:.2f}{', flagged' if row['flagged'] else ''})"
            for row in report["hosts"][:SHOWN])
    flagged = sum(1 for row in report["ranks"] if row["flagged"])
    return text + (f"; {flagged} rank(s) under {report['threshold']:g}" if flagged else "; none flagged "
                   f"(threshold {report['threshold']:g})")
