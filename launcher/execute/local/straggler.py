"""One console line when a rank of this host falls behind: the straggler scores (``base.stragglers``) of the
step times the ranks printed, judged every ``--straggler-report`` seconds.

A rank is named when its relative score (the fastest rank's median step time over its own) or its individual
score (its own best over its current) is under ``stragglers.THRESHOLD`` (0.75), once it printed ``WINDOW``
step times (the first steps, compiling and warming caches, are no straggling).  Rate-limited: a rank is named
again only after ``REPEAT`` report intervals, so a slow rank costs a line now and then, not a line a step.
``dlaunch status`` scores every rank of every host at any time.
"""

from __future__ import annotations

import time

from launcher.base.pace import Pace
from launcher.base.stragglers import THRESHOLD, WINDOW, RankSteps, scores

REPEAT = 10   # report intervals before a rank still flagged is named again


class StragglerNotice:
    """Every ``every`` seconds: a line naming the ranks newly under the threshold, or None."""

    def __init__(self, every: float, threshold: float = THRESHOLD):
        self.every = every
        self.threshold = threshold
        self.due = Pace(every).due
        self._said: dict[int, float] = {}   # rank -> when it was last named

    def check(self, ranks: list[RankSteps]) -> str | None:
        report = scores([r for r in ranks if len(r.times) >= WINDOW], self.threshold)
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
        parts = [f"rank {row['rank']} takes {row['median_ms']:.1f} ms per step ({row['median_ms'] / fastest:.2f} x "
                 f"the fastest rank's; relative {row['relative']:.2f}, individual {row['individual']:.2f})"
                 for row in named]
        return (f"straggler: {'; '.join(parts)}: under {self.threshold:g} (dlaunch status scores every rank)")
