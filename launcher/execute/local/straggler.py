"""One console line when a rank of this host falls behind: the straggler scores (``base.stragglers``) of the
step times the ranks printed, judged every ``--straggler-report`` seconds.

A rank is named when its relative score (the fastest rank's median step time over its own) or its individual
score (its own best over its current) is under ``stragglers.THRESHOLD`` (0.75), once it printed ``WINDOW``
step times (the first steps, compiling and warming caches, are no straggling).  Rate-limited: a rank is named
again only after ``REPEAT`` report intervals, so a slow rank costs a line now and then, not a line a step.
``dlaunch status`` scores every rank of every host at any time.  In a synchronous job, where every rank's step
takes as long as the slowest's, the rank named is the one that works the most CPU per step (``stragglers``).
"""

from __future__ import annotations

import time

from launcher.base.pace import Pace
from launcher.base.stragglers import CPU_SAMPLES, THRESHOLD, WINDOW, RankSteps, scores

REPEAT = 10   # report intervals before a rank still flagged is named again


class StragglerNotice:
    """Every ``every`` seconds: a line naming the ranks newly under the threshold, or None."""

    def __init__(self, every: float, threshold: float = THRESHOLD):
        self.every = every
        self.threshold = threshold
        self.due = Pace(every).due
        self._said: dict[int, float] = {}   # rank -> when it was last named

    def check(self, ranks: list[RankSteps]) -> str | None:
        ready = any(len(r.times) >= WINDOW for r in ranks)   # the job made the steps a score needs
        report = scores([r for r in ranks if len(r.times) >= WINDOW or (ready and len(r.work) >= CPU_SAMPLES)],
                        self.threshold)
        if not report or len(report["ranks"]) < 2:
            return None
        now = time.monotonic()
        named = [row for row in report["ranks"] if row["flagged"]
                 and now - self._said.get(row["rank"], -1e18) >= REPEAT * self.every]
        if not named:
            return None
        for row in named:
            self._said[row["rank"]] = now
        fastest = min(row["median_ms"] for row in report["ranks"])
        least = min((row["cpu_ms"] for row in report["ranks"] if row.get("cpu_ms")), default=None)
        parts = [f"rank {row['rank']} works {row['cpu_ms']:.1f} ms of CPU per step ({row['cpu_ms'] / least:.2f} x the "
                 f"least-working rank's: the others wait for it; relative {row['relative']:.2f}, individual "
                 f"{row['individual']:.2f})" if row.get("by_cpu") and least else
                 f"rank {row['rank']} takes {row['median_ms']:.1f} ms per step ({row['median_ms'] / fastest:.2f} x "
                 f"the fastest rank's; relative {row['relative']:.2f}, individual {row['individual']:.2f})"
                 for row in named]
        return (f"straggler: {'; '.join(parts)}: under {self.threshold:g} (dlaunch status scores every rank)")
