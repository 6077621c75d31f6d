"""Straggler scores from the ranks' step times (Megatron's ``StragglerDetector`` and NVIDIA's resiliency
extension define them the same way; here they come from the logs, with no code in the training loop):

- **relative**: the fastest rank's median step time / this rank's median (1.0 for the fastest; a rank
  taking 40% longer per step scores 1/1.4 = 0.71);
- **individual**: this rank's own best (the lowest median of ``WINDOW`` consecutive steps) / its current
  (the median of its last ``WINDOW`` steps): a rank that got slower than it was scores under 1.

A rank is flagged when either score is under ``THRESHOLD`` (0.75). Hosts get a relative score the same way,
from their ranks' step times pooled. Everything here is pure: step times in, scores out.

In a synchronous job (data, tensor, pipeline parallel) every rank waits for the slowest inside the collective,
so every rank's step takes the same time and step times cannot tell the straggler.  What differs is each
rank's own work: a launch measures it as the CPU time of the rank's process tree per step of the job
(``RankSteps.work``, ``stepreader``: a gloo rank waiting in a collective blocks in a socket read and uses
none).  Where the ranks work a share of their steps on the CPU (the busiest at least ``CPU_SHARE`` of its
wall step time), the relative score is the lower of the two: the least-working rank's CPU per step over this
rank's, and the step-time one; and the individual score is the rank's own least work per step (the lowest
median of ``WINDOW`` consecutive samples) over its current: a machine or a job that slows as a whole slows
every rank's step, not its work.  CPU time misses work on a device (a GPU kernel: the host thread may spin or
sleep meanwhile); ``docs/observe.md`` says what each measure sees.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field

from launcher.base.border import OverBudget, Refused, read_json
from launcher.base.lines import tail_lines
from launcher.base.steps import StepReading, UserPattern, pattern_budget

THRESHOLD = 0.75     # a score under this flags the rank (or host)
WINDOW = 10          # steps in the "current" median, and in each window of the "best" one
MAX_TIMES = 4096     # step times kept per rank (the newest)
TAIL_BYTES = 1 << 20  # status reads the last MiB of each rank's log (logs can be gigabytes)
SHOWN = 3            # slowest ranks and hosts named on the status line
CPU_SHARE = 0.1      # the CPU measure counts where the busiest rank works this share of its step on the CPU
CPU_SAMPLES = 3      # CPU samples a rank needs before its work per step is scored
WORK_FILE = "step_work.json"   # a launch's CPU ms per step of a rank, in its rank directory, for status
WORK_KEPT = 256      # samples kept in that file (the newest)
WORK_LIMIT = 64 << 10  # bytes of it read back


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
    count: int = 0                # step times added, all told
    work: deque = field(default_factory=lambda: deque(maxlen=MAX_TIMES))   # CPU ms per step of the job

    def add(self, ms: float, step: int | None = None) -> None:
        self.times.append(ms)
        self.count += 1
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


def work_record(steps: RankSteps) -> dict:
    """What a launch keeps of a rank's CPU work per step (``WORK_FILE``)."""
    return {"cpu_ms_per_step": [round(ms, 3) for ms in list(steps.work)[-WORK_KEPT:]]}


def parse_work(data) -> list[float]:
    """``work_record``'s samples from what ``border.read_json`` returned; [] for anything else."""
    samples = data.get("cpu_ms_per_step") if isinstance(data, dict) else None
    if not isinstance(samples, list):
        return []
    return [float(ms) for ms in samples[-WORK_KEPT:]
            if isinstance(ms, (int, float)) and not isinstance(ms, bool) and 0 <= ms < 1e9]


def with_work(steps: RankSteps, rank_dir: str | None) -> RankSteps:
    """A rank's step times with the CPU work per step its launch measured (``WORK_FILE`` in its directory, read
    through the border); as they were where there is none."""
    if rank_dir:
        try:
            steps.work.extend(parse_work(read_json(os.path.join(rank_dir, WORK_FILE), "step work", WORK_LIMIT)))
        except Refused:
            return steps   # unreadable samples: the step times alone score the rank, as without them
    return steps


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
    worked = {r.rank: median(r.work) for r in ranks if len(r.work) >= CPU_SAMPLES}
    any_times = [r for r in ranks if r.times]
    job_ms = median([t for r in any_times for t in r.times]) if any_times else None
    # a rank that prints no step line (Megatron prints on the last rank only) but whose work was measured steps
    # with the job in a synchronous one: it is scored by its work, at the job's step time
    timed = [r for r in ranks if r.times or (r.rank in worked and job_ms is not None)]
    if not timed:
        return None
    medians = {r.rank: median(r.times) if r.times else float(job_ms or 0.0) for r in timed}
    fastest = min(medians.values())
    cpu = {rank: ms for rank, ms in worked.items() if rank in medians}
    use_cpu = len(cpu) > 1 and max(cpu[rank] / medians[rank] if medians[rank] > 0 else 0.0 for rank in cpu) >= CPU_SHARE
    least = min(cpu.values()) if use_cpu else 0.0
    rows: list[dict] = []
    for r in timed:
        best, current = individual(r.times) if r.times else (medians[r.rank], medians[r.rank])
        by_time, own = _ratio(fastest, medians[r.rank]), _ratio(best, current)
        if use_cpu and r.rank in cpu:   # its own work, not the job's pace: a job-wide slowdown is no rank's
            least_work, work_now = individual(r.work)
            own = _ratio(least_work, work_now)
        by_cpu = _ratio(least, cpu[r.rank]) if use_cpu and r.rank in cpu and least > 0 else 1.0
        relative = min(by_time, by_cpu)
        row = {"rank": r.rank, "host": r.host, "steps": len(r.times), "last_step": r.last_step,
               "median_ms": round(medians[r.rank], 3), "best_ms": round(best, 3),
               "current_ms": round(current, 3), "relative": relative, "individual": own,
               "flagged": relative < threshold or own < threshold}
        if use_cpu:
            row.update({"cpu_ms": round(cpu[r.rank], 3) if r.rank in cpu else None, "relative_time": by_time,
                        "relative_cpu": by_cpu, "by_cpu": by_cpu < by_time})
        rows.append(row)
    # "slowest first": by time, or by work per step where the CPU measure counts (all wait alike in a collective)
    rows.sort(key=lambda row: (-float(row["median_ms"]) if not use_cpu else -float(row.get("cpu_ms") or 0.0),
                               int(row["rank"])))
    pooled: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    host_cpu: dict[str, list[float]] = {}
    for r in timed:
        pooled.setdefault(r.host, []).extend(r.times or [medians[r.rank]])
        counts[r.host] = counts.get(r.host, 0) + 1
    for r in timed:
        host_cpu.setdefault(r.host, []).append(_ratio(least, cpu[r.rank]) if use_cpu and r.rank in cpu else 1.0)
    host_medians = {host: median(times) for host, times in pooled.items()}
    fastest_host = min(host_medians.values())
    hosts: list[dict] = []
    for host, value in host_medians.items():
        relative = _ratio(fastest_host, value)
        if use_cpu:   # a host waits for its slowest rank: its score is that rank's work score
            relative = min([relative, *host_cpu[host]])
        hosts.append({"host": host, "ranks": counts[host], "median_ms": round(value, 3), "relative": relative,
                      "flagged": relative < threshold})
    hosts.sort(key=lambda row: (float(row["relative"]), -float(row["median_ms"]), str(row["host"])) if use_cpu
               else (-float(row["median_ms"]), str(row["host"])))
    return {"threshold": threshold, "ranks": rows, "hosts": hosts}


def straggler_line(report: dict | None) -> str | None:
    """``steps: slowest ranks 3 (relative 0.71, individual 0.98, flagged), 0 (1.00, 1.00); hosts: ...``"""
    if not report:
        return None

    def rank_text(row: dict) -> str:
        flag = ", flagged" if row["flagged"] else ""
        work = f", CPU {row['cpu_ms']:.1f} ms/step" if row.get("cpu_ms") is not None else ""
        return (f"rank {row['rank']} ({row['median_ms']:.1f} ms/step{work}, relative {row['relative']:.2f}, "
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
