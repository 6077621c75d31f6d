"""The processes of one attempt (ranks, MindSpore's scheduler, TorchFT's services): each one's handle, exit
watch and result, and the attempt's view of them (which are alive, whether it is stopping).
"""

from __future__ import annotations

import errno
import os
import selectors
import signal
import time

from launcher.contract import Role
from launcher.execute.local.proctree import own_groups
from launcher.execute.local.spawn import Child
from launcher.execute.results import AttemptResult, RankResult
from launcher.plan.make import LaunchPlan, RankSpec

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    import subprocess

    from launcher.execute.local.notice import SurvivorWindow
    from launcher.execute.local.tee import ConsoleTee
    from launcher.execute.local.watches import Watches
    from launcher.host.mindcluster import ResetWatch


def killpg_quietly(pgid: int, sig: int) -> bool:
    """Signal a rank's process group; False when it no longer exists."""
    try:
        os.killpg(pgid, sig)
        return True
    except OSError as exc:
        if exc.errno in (errno.ESRCH, errno.EPERM):
            return False
        raise


class RankProcess:
    """A process of the attempt (a rank, the scheduler, a TorchFT service): its Popen, exit watch and result."""

    def __init__(self, spec: RankSpec, result: RankResult):
        self.spec, self.result = spec, result
        self.proc: Child | subprocess.Popen | None = None
        self.pidfd: int | None = None
        self.restart_why: str | None = None   # killed to be started again (MindCluster, its replica group): why
        self.waiting = False   # ended, to be started again once the rest of its replica group has ended too

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.result.returncode is None

    @property
    def running(self) -> bool:
        """Alive, or about to be started again with its group: not ended, as far as the attempt is concerned."""
        return self.waiting or self.alive

    @property
    def popen(self) -> Child | subprocess.Popen:
        """Its process (a spawned ``Child``, or a Popen where posix_spawn could not serve), for a process that
        started (alive, or being reaped: only those are signalled or waited)."""
        assert self.proc is not None, f"{self.spec.rank_dir}: never started"
        return self.proc


class AttemptProcesses:
    """One attempt's state: its processes, its result, and the one shared stop deadline."""

    def __init__(self, plan: LaunchPlan):
        self.plan = plan
        self.result = AttemptResult(attempt=plan.attempt, ranks=[])
        self.ranks: list[RankProcess] = []
        self.scheduler: RankProcess | None = None
        self.services: list[RankProcess] = []   # TorchFT's group stores and lighthouse (--replica-groups)
        self.group_restarts: dict[int, int] = {}   # replica group -> times it was started again
        self.due: dict[RankProcess, float] = {}    # --restart-delay: ended, to be started again at this time
        self.held: dict[RankProcess, float] = {}   # --reset-hold: failed ranks awaiting MindCluster's order, until
        self.deadline: float | None = None   # when stopping: SIGKILL for whatever is left at this time
        self.grace = plan.policy.grace_period   # the grace that deadline gives (--signal-grace after a signal)
        self.window: SurvivorWindow | None = None   # the survivors' window while it runs, before the stop's signal
        self.last: RankProcess | None = None   # global rank 0 after a window: signalled once the others ended
        self.killed = False
        self.reset: ResetWatch | None = None   # MindCluster's reset file, in an AscendJob pod
        self.watches: Watches | None = None   # the periodic looks at the live ranks (hangs, peers, steps)
        self.selector: selectors.BaseSelector | None = None   # the attempt's selector and console tee (workers)
        self.tee: ConsoleTee | None = None
        self.unwatched: list[RankProcess] = []   # started, but no pidfd (an old kernel): _dispatch polls them
        self._first_live = 0   # ranks before it have ended (an ended process never lives again)

    @property
    def processes(self) -> list[RankProcess]:
        return self.ranks + self.services + ([self.scheduler] if self.scheduler else [])

    @property
    def stopping(self) -> bool:
        return self.deadline is not None or self.window is not None

    def terminate(self, sig: int, grace: float, controller_last: bool = False) -> None:
        """The stop's signal to every live process, then ``grace`` seconds before SIGKILL. After a survivors'
        window, global rank 0 (MindIO's and MindSpore's controller) is signalled once the others ended."""
        live = [p for p in self.processes if p.alive]
        last = next((p for p in live if p.spec.rank == 0), None) if controller_last and len(live) > 1 else None
        for process in live:
            if process is not last:
                killpg_quietly(process.popen.pid, sig)
        self.last, self.grace = last, grace
        self.deadline = time.monotonic() + grace

    def preempt(self, sig: int) -> None:
        """A stop signal while the attempt already stops: passed to every live process, and the signal's grace
        (--signal-grace) when it ends sooner than the stop's own."""
        for process in self.processes:
            if process.alive:
                killpg_quietly(process.popen.pid, sig)
        grace = self.plan.policy.signal_grace
        if self.deadline is None or time.monotonic() + grace < self.deadline:
            self.grace, self.deadline = grace, time.monotonic() + grace

    def revived(self, process: RankProcess) -> None:
        """``process`` was started again: ``ranks_done`` must look at it again (a rank; a service is no rank)."""
        if process.spec.role == Role.RANK:
            self._first_live = min(self._first_live, self.ranks.index(process))

    def process_of(self, result: RankResult) -> RankProcess:
        return next(p for p in self.processes if p.result is result)

    def ranks_done(self) -> bool:
        """Every rank has ended.  Asked on every wake-up of the loop (each chunk of console output): the ranks
        known to have ended are not looked at again, so 1,024 ranks cost O(1) per wake-up, not a scan.
        In an operator's scheduler pod, whose plan is MindSpore's scheduler alone, the scheduler is what ends
        the attempt (it serves the job's ranks in the other pods until they are done)."""
        if not self.plan.ranks and self.plan.scheduler is not None:
            return self.scheduler is None or not self.scheduler.running
        ranks, first = self.ranks, self._first_live
        while first < len(ranks) and not ranks[first].running:
            first += 1
        self._first_live = first
        return first == len(ranks)

    def alive(self) -> int:
        return sum(1 for p in self.processes if p.alive)

    def describe_alive(self) -> str:
        """``3 rank(s)``, or ``3 rank(s) and the scheduler``: what is still running, as messages name it."""
        ranks = sum(1 for p in self.ranks if p.alive)
        scheduler = self.scheduler is not None and self.scheduler.alive
        if not self.plan.ranks and self.plan.scheduler is not None:   # an operator's scheduler pod: it alone
            return "the MindSpore scheduler" if scheduler else "no process"
        return f"{ranks} rank(s)" + (" and the scheduler" if scheduler else "")


def watch_exits(processes: list[RankProcess], selector) -> list[RankProcess]:
    """A pidfd per started process, opened once all are spawned: each fd the launcher holds is copied into
    every later spawn's fd table and closed again at its exec (1,024 pidfds held while spawning: O(N^2)).
    A rank that ended meanwhile is a zombie until reaped: its pid cannot be reused, its pidfd is readable.
    Returns the started processes that got no pidfd (an old kernel): ``_dispatch`` polls those."""
    unwatched = []
    for process in processes:
        if process.proc is None or process.pidfd is not None:
            continue
        try:
            process.pidfd = os.pidfd_open(process.proc.pid)
            selector.register(process.pidfd, selectors.EVENT_READ, ("exit", process))
        except (AttributeError, OSError):
            process.pidfd = None
            unwatched.append(process)
    return unwatched


def kill_groups(processes: list[RankProcess]) -> None:
    """SIGKILL each process's group. A leader not reaped yet holds its number; a reaped one's may be another
    job's new session by now (pid_max wraps within seconds on a busy host: threads take pids too), so its
    group is killed only while a process of this launcher's own tree (its leftover children) is in it."""
    reaped = [p for p in processes if p.proc is not None and not p.alive]
    ours = own_groups() if reaped else set()
    for process in processes:
        if process.proc is not None and (process.alive or process.proc.pid in ours):
            killpg_quietly(process.proc.pid, signal.SIGKILL)
