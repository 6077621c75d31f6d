"""The periodic looks at an attempt's live ranks, each at its own pace: missing peers (``peers``), hangs
(``hangs``, with what it learned, ``hangclock``), the step times the ranks print (``stepreader``, for the
straggler line, ``straggler``, and the learned timeout's warm-up), and ``--metrics-port``'s snapshot
(``metrics``, at most once a second).

The event loop wakes for every chunk of console output; each watch looks at most once its interval, and
the live ranks are listed only when one is due.  What a hang watch learned is written to the run directory
at most once a second, and said when the step budget is first learned and whenever a learned budget moves by 5%
or more (``HangClock.news``).
"""

from __future__ import annotations

import time

from launcher.base.console import say
from launcher.base.steps import UserPattern
from launcher.execute.local.hangclock import HangClock, clock_path, save_clock
from launcher.execute.local.hangs import HangWatch, check_hangs
from launcher.execute.local.peers import PeerWait
from launcher.execute.local.stepreader import INTERVAL, StepReader
from launcher.execute.local.straggler import StragglerNotice
from launcher.plan.make import LaunchPlan

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from launcher.execute.local.metrics import MetricsFeed

SAVE_SECONDS = 1.0   # what a hang watch learned is written at most this often


class Watches:
    """An attempt's watches; ``tick`` returns the hung rank's result when there is one."""

    def __init__(self, plan: LaunchPlan, clock: HangClock | None = None, metrics: MetricsFeed | None = None):
        policy, started = plan.policy, time.time()
        self.plan = plan
        self.clock = clock
        self.hangs = HangWatch(policy.hang_timeout, started, clock, multi_host=bool(plan.peers)) \
            if policy.hang_timeout else None
        self.peers = PeerWait(plan, started) if plan.peers and policy.waiting_notice > 0 else None
        self.notice = StragglerNotice(policy.straggler_report) if policy.straggler_report > 0 else None
        pattern = UserPattern.parse(policy.step_pattern) if policy.step_pattern else None
        self.metrics = metrics
        self.reader = StepReader(pattern, host=plan.server_id) if self.notice or clock or metrics else None
        if clock is not None and clock.learned:   # carried from an earlier attempt: said when it moves on
            clock.said = clock.said or clock.budgets()
        self._saved = 0.0
        intervals = [watch.interval for watch in (self.hangs, self.peers) if watch is not None]
        self.interval: float | None = min(intervals + ([INTERVAL] if self.reader else []), default=None)
        if metrics is not None:
            metrics.reader = self.reader

    def tick(self, ranks: list, attempt: int):
        """The watches due now; a hung rank's result (its stacks taken), or None."""
        peers_due = bool(self.peers and self.peers.due())
        hangs_due = bool(self.hangs and self.hangs.due())
        reader_due = bool(self.reader and self.reader.due())
        if self.metrics is not None:
            self.metrics.update(ranks, self.reader, self.hangs, self.plan)
        if not (peers_due or hangs_due or reader_due):
            return None
        live = [p for p in ranks if p.alive]
        if self.hangs is not None and not self.hangs.finishing and any(
                p.proc is not None and p.result.returncode == 0 for p in ranks):
            self.hangs.finishing = True   # a rank ended well: the others are finishing (a last save, teardown)
        if self.peers and peers_due:
            waiting = self.peers.check([p.spec for p in live])
            if waiting:
                say(waiting)
        if self.reader and reader_due:
            self._read_steps(live)
        hung = check_hangs(self.hangs, live, attempt) if self.hangs and hangs_due else None
        self._keep_learned()
        return hung

    def _read_steps(self, live: list) -> None:
        assert self.reader is not None
        for process in live:
            count, step = self.reader.read(process.spec)
            if count and self.hangs is not None:
                self.hangs.stepped(process.spec, count, step)
            if count and self.metrics is not None:
                self.metrics.stepped(process.spec.rank)
        if self.notice is not None:
            self.reader.measure_work(live)
        if self.notice is not None and self.notice.due():
            line = self.notice.check(list(self.reader.steps.values()))
            if line:
                say(line)
            self.reader.save_work([process.spec for process in live])

    def _keep_learned(self) -> None:
        clock = self.clock
        if clock is None or not clock.changed or time.monotonic() - self._saved < SAVE_SECONDS:
            return
        self._saved = time.monotonic()
        save_clock(clock_path(self.plan.run_dir, self.plan.host_files_suffix), clock)
        news = clock.news()   # first learned, or a budget that moved by 5% or more
        if news:
            say(news)

    def close(self) -> None:
        """The attempt ended: keep what was learned, whatever the rate limit held back."""
        if self.clock is not None and self.clock.changed:
            save_clock(clock_path(self.plan.run_dir, self.plan.host_files_suffix), self.clock)
