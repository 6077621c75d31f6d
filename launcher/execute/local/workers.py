"""Start, watch and stop the local rank processes: the only module here with process side effects.

One thread, one selector: rank exits arrive as readable pidfds, console output
as readable pipes, and signals to dlaunch through ``signal.set_wakeup_fd``; no
polling threads.  Every rank runs in its own session (so a signal to its
process group reaches the children it spawns too); stopping sends the signal to
every group, waits one shared grace deadline, then SIGKILLs what is left.

Nothing outlives the job (``reaper.py``): each rank dies with the launcher
(parent-death signal), a forked watchdog kills every rank's group if the
launcher is SIGKILLed, and after every attempt a sweep kills whatever the ranks
left behind, daemons included (the launcher is their subreaper).
"""

from __future__ import annotations

import errno
import os
import selectors
import signal
import time

from launcher.base.console import say
from launcher.contract import LAUNCHER_ID_ENV, LAUNCHER_IDS_ENV, ExitCode, Role
from launcher.execute.local import recovery
from launcher.execute.local.hangclock import HangClock, clock_path, load_clock
from launcher.execute.local.hangs import dump_rank_stacks
from launcher.execute.local.notice import SurvivorWindow, clear_notices, notice_cause
from launcher.execute.local.processes import AttemptProcesses, RankProcess, kill_groups, killpg_quietly, watch_exits
from launcher.execute.local.raised import RaiseChannel, program_ended, raised_rank
from launcher.execute.local.reaper import Reaper, become_subreaper, marker_chain, sweep
from launcher.execute.local.spawn import RankSpawner, open_rank_files
from launcher.execute.local.tee import PREFIX_TEMPLATE_ENV, ConsoleTee, close_pipe, console_key, console_tag
from launcher.execute.local.warm import Standbys
from launcher.execute.local.watches import Watches
from launcher.execute.results import AttemptResult, RankResult
from launcher.execute.signals import SignalWatch
from launcher.host.mindcluster import ResetWatch
from launcher.plan.environment import EnvLog
from launcher.plan.make import LaunchPlan
from launcher.rundir.create import describe_os_error

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    from launcher.execute.job.link import JobLink
    from launcher.execute.local.metrics import MetricsFeed
    from launcher.execute.termination import ZombieCollector

PIPE_DRAIN_SECONDS = 1.0


class LocalWorkers:
    """Runs one attempt of a plan on this host and reports how every rank ended."""

    def __init__(self, signals: SignalWatch, environ: Mapping[str, str], *, job: JobLink | None = None,
                 on_started: Callable | None = None, console_fd: int = 1):
        """``environ`` is what every rank inherits; ``job`` a multi-host job's link (execute/job: its stops stop
        us, ours stop the other hosts); ``on_started(ranks, scheduler)`` is called once every process runs."""
        self.signals = signals
        self.console_fd = console_fd
        self.job = job
        self.on_started = on_started
        self.launcher_id = os.urandom(16).hex()   # uuid4().hex without importing uuid (platform, ctypes)
        self.subreaper = become_subreaper()
        self.reaper = Reaper(self.launcher_id)
        self.standbys: Standbys | None = None   # --warm-restarts: the next attempt's interpreters
        self.zombies: ZombieCollector | None = None   # the launch's collector of orphans: ticked by the event loop
        self.hang_clock: HangClock | None = None   # --hang-learn: what the attempts taught, kept across them
        self.metrics: MetricsFeed | None = None   # --metrics-port: the snapshot the loop updates (local/metrics.py)
        self.marker_chain = marker_chain(environ, self.launcher_id)
        # what every rank inherits, read (masked for env.log, encoded for the spawn) once, not once per rank
        self._environ = dict(environ)
        self._env_log = EnvLog(self._environ)
        self.raises = RaiseChannel()   # a Python rank's uncaught exception, heard when raised (raised.py)
        self.spawner = RankSpawner(self._environ, {LAUNCHER_ID_ENV: self.launcher_id,
                                                   LAUNCHER_IDS_ENV: self.marker_chain, **self.raises.env()},
                                   inherited_fd=self.raises.rank_fd)

    def close(self) -> None:
        if self.standbys is not None:
            self.standbys.close()
        self.reaper.close()
        self.raises.close()

    def run(self, plan: LaunchPlan) -> AttemptResult:
        attempt = AttemptProcesses(plan)
        selector = selectors.DefaultSelector()
        tee = ConsoleTee(self.console_fd)
        attempt.selector, attempt.tee = selector, tee   # a rank restarted alone is spawned from the event loop
        if plan.policy.reset_config:
            attempt.reset = ResetWatch(plan.policy.reset_config)
        selector.register(self.signals.fd, selectors.EVENT_READ, ("signal", None))
        selector.register(self.raises.fd, selectors.EVENT_READ, ("raised", None))
        self.reaper.keep_watched(selector)
        if self.signals.control_fd is not None:
            selector.register(self.signals.control_fd, selectors.EVENT_READ, ("control", None))
        if self.job is not None:
            selector.register(self.job.fd, selectors.EVENT_READ, ("job", None))
        self.signals.received.extend(self.signals.pending_control())
        try:
            self._start(attempt, selector, tee)
            policy = plan.policy
            if policy.warm_restarts and policy.restart_policy == "job" and plan.attempt < policy.max_restarts:
                if self.standbys is None:
                    self.standbys = Standbys(self.spawner, self.reaper, policy.warm_restarts)
                self.standbys.begin(attempt)   # the next attempt's ranks, started once this one's settled
            self._supervise(attempt, selector, tee)
        finally:
            self._finish(attempt, selector, tee)
        return attempt.result

    # ------------------------------------------------------------------ starting

    def _start(self, attempt: AttemptProcesses, selector, tee: ConsoleTee) -> None:
        """Spawn the scheduler (if any) and every rank; a spawn failure or a signal stops what started."""
        result = attempt.result
        if attempt.plan.policy.survivor_window:
            say(*clear_notices([spec.rank_dir for spec in attempt.plan.ranks]))   # what could not be removed
        try:
            for spec in attempt.plan.processes():
                process = RankProcess(spec, RankResult(spec.rank, spec.local_rank, spec.device_id, spec.server_id,
                                                    spec.log_file, spec.error_file, role=spec.role))
                if spec.role == Role.SCHEDULER:
                    attempt.scheduler, result.scheduler = process, process.result
                elif spec.role != Role.RANK:   # TorchFT's store or lighthouse: no rank of the summary
                    attempt.services.append(process)
                else:
                    attempt.ranks.append(process)
                    result.ranks.append(process.result)
                self._spawn(process, selector, tee, attempt.plan.policy.prefix_host)
                if process.result.spawn_error:
                    self._begin_stop(attempt, root_cause=process.result)
                    return
                pending = [s for s in self.signals.drain() if s not in self._pass_on(attempt, s)] \
                    if self.signals.received else []
                if pending:
                    self._on_signal(attempt, pending[0])
                    return
        finally:
            self.reaper.flush()   # every group the watchdog was not told of yet
            attempt.unwatched = watch_exits(attempt.processes, selector)
        if self.on_started:
            try:
                self.on_started([p.result for p in attempt.ranks], result.scheduler)
            except OSError as exc:   # e.g. pids.json on a full disk: the job cannot be watched or trusted
                self._begin_stop(attempt, launcher_error=f"cannot write {describe_os_error(exc)}")

    # ------------------------------------------------------------------ the loop

    def _supervise(self, attempt: AttemptProcesses, selector, tee: ConsoleTee) -> None:
        """Until every process has ended and its output is drained: events, watches, the stop deadline.

        When the last rank has ended, its group is killed (nothing of a finished rank may linger) and the
        scheduler, if one runs, gets the grace period to leave by itself before it is killed: never an
        unbounded wait.
        """
        plan = attempt.plan
        if plan.policy.hang_learn and plan.policy.hang_timeout and self.hang_clock is None:
            self.hang_clock = load_clock(clock_path(plan.run_dir, plan.host_files_suffix), plan.policy.hang_timeout)
        watches = attempt.watches = Watches(plan, self.hang_clock, self.metrics)
        rest_until: float | None = None   # after the last rank: how long the scheduler and the pipes may take
        while True:
            if attempt.ranks_done():
                if rest_until is None:
                    kill_groups(attempt.ranks + attempt.services)
                    patience = plan.policy.grace_period if attempt.scheduler and attempt.scheduler.alive else 0.0
                    rest_until = time.monotonic() + patience + PIPE_DRAIN_SECONDS
                busy = (attempt.scheduler is not None and attempt.scheduler.alive) or bool(self._pipe_keys(selector))
                if not busy:
                    return
                if time.monotonic() >= rest_until:
                    if attempt.scheduler and attempt.scheduler.alive:
                        say(f"the MindSpore scheduler did not leave within {plan.policy.grace_period:g} s of the last "
                            f"rank's end; killed it")
                        kill_groups([attempt.scheduler])
                        rest_until = time.monotonic() + PIPE_DRAIN_SECONDS
                        continue
                    return
                timeout = max(0.0, rest_until - time.monotonic())
                if attempt.deadline is not None:
                    timeout = min(timeout, max(0.0, attempt.deadline - time.monotonic()))
            elif attempt.window is not None:
                timeout = attempt.window.wait()
            elif attempt.deadline is not None:
                timeout = max(0.0, attempt.deadline - time.monotonic())
            elif watches.interval or attempt.reset:
                timeout = min(i for i in (watches.interval, attempt.reset and attempt.reset.interval) if i)
            else:
                timeout = None
            soon = recovery.next_due(attempt, time.monotonic())   # --restart-delay; a torch rank: its peers' end
            if soon is not None:
                timeout = soon if timeout is None else min(timeout, soon)
            for wake in (self.zombies.tick() if self.zombies else None,   # the ranks' orphans, as they exit
                         self.standbys.tick(attempt) if self.standbys else None):   # the next attempt's standbys
                timeout = wake if timeout is None else timeout if wake is None else min(timeout, wake)
            events = self._dispatch(selector, tee, attempt.unwatched, timeout)
            for process in recovery.due_now(attempt, time.monotonic()):
                if process.waiting and not attempt.stopping:
                    self._respawn(attempt, process)
            if not attempt.stopping and not attempt.ranks_done():
                hung = watches.tick(attempt.ranks, plan.attempt)
                if hung is not None:
                    self._begin_stop(attempt, root_cause=hung)
                if attempt.reset is not None and not attempt.stopping:
                    self._follow_reset(attempt)
            for kind, value in events:
                self._on_event(attempt, kind, value)
            if attempt.window is not None and attempt.window.over():
                attempt.window = None
                attempt.terminate(signal.SIGTERM, plan.policy.grace_period, controller_last=True)
            if attempt.last is not None and not any(p.alive for p in attempt.ranks if p is not attempt.last):
                killpg_quietly(attempt.last.popen.pid, signal.SIGTERM)   # the others are gone: now rank 0
                attempt.last = None
            if attempt.deadline is not None and not attempt.killed and time.monotonic() >= attempt.deadline:
                if attempt.alive():
                    say(f"the grace period of {attempt.grace:g} s is over: killed "
                        f"{attempt.describe_alive()} still running (SIGKILL)")
                kill_groups(attempt.processes)
                attempt.killed = True

    def _follow_reset(self, attempt: AttemptProcesses) -> None:
        """MindCluster's reset file, when due: its faulty ranks restarted alone, or this host stopped."""
        assert attempt.reset is not None
        late = recovery.overdue(attempt, time.monotonic())
        if late is not None:   # no order came for a held rank: it fails the pod, as without the hold
            self._begin_stop(attempt, root_cause=late.result)
            return
        orders = attempt.reset.check(time.monotonic()) if attempt.reset.due(time.monotonic()) else None
        if orders is None:
            return
        restart, stop = recovery.reset_actions(orders, attempt, node0=attempt.plan.server_index == 0)
        if stop is not None:
            say(f"stopping this host's {attempt.describe_alive()}: {stop['why']}")
            self._begin_stop(attempt, stopped_by=stop)
        for process in restart:   # a live one's exit (SIGKILL) starts it again: _on_event, restart_reason
            process.restart_why = "MindCluster marked it faulty (reset.json RestartFaultProcess)"
            if process.alive:
                killpg_quietly(process.popen.pid, signal.SIGKILL)
            else:   # held since it failed: started again now
                self._restart(attempt, process, process.restart_why)

    def _on_event(self, attempt: AttemptProcesses, kind: str, value) -> None:
        if kind == "launcher_error" and not attempt.stopping:
            self._begin_stop(attempt, launcher_error=value)
        elif kind == "exit" and not attempt.stopping and value.returncode != 0:
            process = attempt.process_of(value)
            why = recovery.restart_reason(attempt, process)
            if why is not None:
                self._restart(attempt, process, why)
            elif recovery.hold_for_orders(attempt, process):
                pass   # said there; the reset file's next order, or the hold's end, decides
            elif process.spec.role != Role.RANK and process.spec.role != Role.SCHEDULER:
                if recovery.serves_running(attempt, process):   # not killed with, or after, the ranks it serves
                    self._begin_stop(attempt, launcher_error=recovery.service_ended(process))
            else:
                self._begin_stop(attempt, root_cause=value)
        elif kind == "raised" and (process := raised_rank(attempt, value)) is not None:
            say(f"rank {process.spec.rank} raised an exception (its log has the traceback): stopping the attempt "
                f"now, not once its teardown ends")
            self._begin_stop(attempt, root_cause=process.result)
        elif kind == "ending":
            program_ended(attempt, value)
        elif kind == "job_stop" and not attempt.stopping:
            say(f"stopping this host's {attempt.describe_alive()}: {value['why']}")
            if value["cause"].get("kind") == "hung":   # a hang elsewhere: where were this host's ranks?
                dump_rank_stacks([p for p in attempt.ranks if p.alive], attempt.plan.attempt,
                                 attempt.watches.hangs if attempt.watches else None)
            self._begin_stop(attempt, stopped_by=value)
        elif kind == "signal" and value in self.signals.pass_through:
            self._pass_on(attempt, value)
        elif kind == "signal":
            first = attempt.stopping and attempt.result.interrupted_by is None   # preempted while it stops
            if first:
                attempt.result.interrupted_by = value   # the restart a failure asked for does not happen
            if attempt.window is not None:   # preempted while survivors save: the signal's own stop, now
                attempt.window = None
                attempt.terminate(value, attempt.plan.policy.signal_grace)
            elif not attempt.stopping:
                self._on_signal(attempt, value)
            elif value in (signal.SIGINT, signal.SIGKILL) and not first and not attempt.killed:   # a second Ctrl-C
                say(f"{signal.Signals(value).name} again: killing {attempt.describe_alive()} now")
                kill_groups(attempt.processes)
                attempt.killed = True
            elif not attempt.killed:
                attempt.preempt(value)

    def _restart(self, attempt: AttemptProcesses, process: RankProcess, why: str) -> None:
        """``process`` exited: start it again in place, same ids (recovery.restart_spec), alone or (its replica group's
        restart) once the rest of its group, stopped now, has ended too; the others run on."""
        result = process.result
        together = recovery.restarted_with(attempt, process)
        delay = attempt.plan.policy.restart_delay
        if process.spec.role in (Role.RANK, Role.SCHEDULER):
            result.restarts.append({"pid": result.pid, "exit_code": result.exit_code, "end": result.end,
                                    "why": why})
        if process.restart_why is None or len(together) == 1:   # the failure itself: said once
            say(recovery.restart_line(attempt, process, together, why))
        process.waiting = True
        for member in together:
            if member.alive and member.restart_why is not None:
                killpg_quietly(member.popen.pid, signal.SIGKILL)
        if recovery.still_ending(together):
            return   # the last member's exit starts them all
        for member in together:   # in plan order: the group's store before its ranks
            if member.waiting and (delay > 0 or recovery.awaits_peers(attempt)):
                attempt.due[member] = time.monotonic() + delay
                attempt.revived(member)   # ranks_done must look at it again: it is not done
            elif member.waiting:
                self._respawn(attempt, member)

    def _respawn(self, attempt: AttemptProcesses, process: RankProcess) -> None:
        result = process.result
        process.waiting = False
        if process.pidfd is not None:   # the old process's exit watch (already unregistered by _dispatch)
            os.close(process.pidfd)
            process.pidfd = None
        assert attempt.selector is not None and attempt.tee is not None
        close_pipe(attempt.selector, attempt.tee, console_key(result.rank))
        result.returncode = result.end = None
        process.restart_why, process.spec = None, recovery.restart_spec(attempt, process)
        self._spawn(process, attempt.selector, attempt.tee, attempt.plan.policy.prefix_host)
        self.reaper.flush()
        attempt.unwatched += watch_exits([process], attempt.selector)
        attempt.revived(process)
        if result.spawn_error:
            self._begin_stop(attempt, root_cause=result)
        elif self.on_started:
            self.on_started([p.result for p in attempt.ranks], attempt.result.scheduler)

    def _pass_on(self, attempt: AttemptProcesses, sig: int) -> tuple[int, ...]:
        """A pass-through signal (SIGUSR1, --forward-signals): every live process gets it; nothing stops.
        Returns the pass-through set, so callers can filter with it."""
        if sig in self.signals.pass_through:
            told = sum(killpg_quietly(p.popen.pid, sig) for p in attempt.processes if p.alive)
            say(f"{signal.Signals(sig).name}: forwarded to {told} process(es); the job goes on")
        return self.signals.pass_through

    def _on_signal(self, attempt: AttemptProcesses, sig: int) -> None:
        """A signal to dlaunch: forwarded to every process, and said at once: who, how long, how to cut it short."""
        self._begin_stop(attempt, signal_=sig)
        policy = attempt.plan.policy
        flag = "--grace-period" if policy.signal_grace == policy.grace_period else "--signal-grace"
        say(f"{signal.Signals(sig).name}: told {attempt.describe_alive()} to stop; they have "
            f"{policy.signal_grace:g} s ({flag}) before SIGKILL; Ctrl-C again kills them now")

    def _begin_stop(self, attempt: AttemptProcesses, root_cause: RankResult | None = None, signal_: int | None = None,
                    launcher_error: str | None = None, stopped_by: dict | None = None) -> None:
        """The first failure, hang, launcher error, signal or stop from another host: record it, tell the
        other hosts (when it is ours) and every live process, start the one shared grace period."""
        result = attempt.result
        for process in attempt.processes:   # nothing waiting for its group starts again: the attempt stops
            process.waiting = False
        result.root_cause, result.launcher_error = root_cause, launcher_error
        result.interrupted_by, result.stopped_by = signal_, stopped_by
        result.stopped_at = time.time()
        if self.job is not None and (stopped_by is None or stopped_by["cause"].get("kind") == "mindcluster"):
            self.job.stopped(result)   # a stop of this host's own making: every other host stops too
        policy = attempt.plan.policy
        survivors = [p for p in attempt.ranks if p.alive and not p.result.raised]
        failure = root_cause is not None or (stopped_by is not None and stopped_by["cause"].get("kind") != "late")
        if policy.survivor_window > 0 and failure and survivors:
            attempt.window = SurvivorWindow(survivors, notice_cause(root_cause, stopped_by), policy.survivor_window,
                                            attempt.plan.attempt, signalled=bool(policy.notice_signal))
            for process in survivors:
                for sig in policy.notice_signal:
                    killpg_quietly(process.popen.pid, sig)
            if root_cause is not None and root_cause.raised and root_cause.pid:   # its sockets closed now: the
                killpg_quietly(root_cause.pid, signal.SIGTERM)   # survivors' collectives fail now, and they save
            attempt.result.extra["notices"] = len(survivors) - len(attempt.window.unwritten)   # for the metrics
            waited = sum(map(attempt.window.waits_for, survivors))   # those that watch for notices
            say(f"told the {len(survivors)} surviving rank(s) here of the failure; "
                + ("they have" if waited == len(survivors) else f"the {waited} that watch for notices have")
                + f" {policy.survivor_window:g} s (--survivor-window) to save before they are stopped",
                *(f"cannot write a notice: {where}" for where in attempt.window.unwritten))
            return
        attempt.terminate(signal_ or signal.SIGTERM, policy.signal_grace if signal_ else policy.grace_period)

    # ------------------------------------------------------------------ the end

    def _finish(self, attempt: AttemptProcesses, selector, tee: ConsoleTee) -> None:
        """Whatever happened: no process of the attempt survives, every exit status is collected."""
        kill_groups(attempt.processes)
        for process in attempt.processes:
            if process.alive:
                process.result.returncode = process.popen.wait()
                process.result.end = time.time()
            if process.pidfd is not None:
                os.close(process.pidfd)
        for key in list(self._pipe_keys(selector)):
            selector.unregister(key.fileobj)
            tee.close(key.data[1])
            os.close(key.fd)
        tee.finish()
        selector.close()
        if attempt.watches is not None:
            attempt.watches.close()
        self.reaper.check()
        standbys = self.standbys.pids() if self.standbys is not None else set()   # the next attempt's: kept
        sweep(self.launcher_id, keep={self.reaper.pid, *standbys}, quiet_rounds=2,   # 2: a pid-hopping daemon
              subreaper=self.subreaper)

    # ------------------------------------------------------------------ processes

    def _spawn(self, process: RankProcess, selector, tee: ConsoleTee, prefix_host: bool) -> None:
        spec, result = process.spec, process.result
        log_fd: int | None   # closed at the end unless the tee took it
        try:
            log_fd = open_rank_files(spec, self._env_log.text(spec.env))
        except OSError as exc:   # a full disk: this process cannot start with its files, so the job does not
            result.spawn_error = f"dlaunch could not prepare it: cannot write {describe_os_error(exc)}"
            result.returncode = 1
            result.start = result.end = time.time()
            return
        read_fd = write_fd = None
        try:
            if spec.console:
                read_fd, write_fd = os.pipe()
            result.start = time.time()
            out_fd = write_fd if write_fd is not None else log_fd
            try:
                warm = self.standbys.take(process, out_fd) if self.standbys is not None else None
                process.proc = warm or self.spawner.spawn(spec.argv, spec.env, spec.cwd, out_fd)
            except OSError as exc:
                result.spawn_error = f"cannot start {spec.argv[0]}: {exc.strerror or exc}"
                result.returncode = ExitCode.NOT_EXECUTABLE if exc.errno == errno.EACCES else ExitCode.NOT_FOUND
                result.end = time.time()
                os.write(log_fd, f"dlaunch: {result.spawn_error}\n".encode())
                return
            self.reaper.watch(process.proc.pid)
            self.reaper.keep_watched(selector)
            result.pid = process.proc.pid
            if spec.console:   # a rank, or the scheduler of a scheduler pod (its key: console_key)
                template = self.spawner.variable(PREFIX_TEMPLATE_ENV, spec.env)
                tag = console_tag(spec.rank, spec.local_rank, template)   # a line carrying it gets only the host's
                tee.add(console_key(spec.rank), f"[{spec.server_id}]{tag}" if prefix_host and spec.rank is not None
                        else tag, log_fd, tag)
                selector.register(read_fd, selectors.EVENT_READ, ("pipe", console_key(spec.rank)))
                read_fd = log_fd = None   # the tee owns them now
        finally:
            for fd in (log_fd, read_fd, write_fd):
                if fd is not None:
                    os.close(fd)

    def _pipe_keys(self, selector):
        return [key for key in selector.get_map().values() if key.data[0] == "pipe"]

    def _dispatch(self, selector, tee: ConsoleTee, unwatched: list[RankProcess], timeout):
        """Wait for one batch of events; returns ("exit", RankResult), ("signal", signum) and ("launcher_error",
        message) items.  ``unwatched`` (processes without a pidfd) are polled; the others' exits are events."""
        polling = any(p.alive for p in unwatched)
        if polling:
            timeout = 0.05 if timeout is None else min(timeout, 0.05)
        happened: list[tuple[str, Any]] = []
        for key, _ in selector.select(timeout):
            kind, data = key.data
            if kind == "pipe":
                try:
                    chunk = os.read(key.fd, 65536)
                except OSError:
                    chunk = b""
                if chunk:
                    failure = tee.feed(data, chunk)
                    if failure:
                        happened.append(("launcher_error", failure))
                else:
                    selector.unregister(key.fd)
                    os.close(key.fd)
                    tee.close(data)
            elif kind == "exit":
                selector.unregister(key.fd)
                happened.append(("exit", self._reap(data)))
            elif kind == "raised":
                happened.extend(self.raises.read())   # ("raised" or "ending", pid)
            elif kind == "reaper":
                self.reaper.check()
                self.reaper.keep_watched(selector)
            elif kind == "job":
                assert self.job is not None   # registered only with a link
                happened.extend(self.job.stop_events())
            elif kind == "control":
                found = self.signals.read_control()
                if self.signals.control_fd is None:
                    selector.unregister(key.fd)
                happened.extend(("signal", sig) for sig in found)
            else:
                happened.extend(("signal", sig) for sig in self.signals.drain())
        if polling:
            for process in unwatched:
                if process.alive and process.popen.poll() is not None:
                    happened.append(("exit", self._reap(process)))
        return happened

    def _reap(self, process: RankProcess) -> RankResult:
        process.result.returncode = process.popen.wait()
        process.result.end = time.time()
        return process.result
