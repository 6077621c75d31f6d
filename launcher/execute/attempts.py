"""One host's launch from start to exit code: table -> plan -> run directory -> attempts -> summary.

``dlaunch run`` and ``dlaunch cluster`` differ only in how they find the rank table and this host's share
of it; both end here. ``Launch`` has the elastic agent's seams: ``start`` (run directory, signals, workers),
``run_attempt``, ``decide`` (succeeded, restart, or stop), ``next_plan`` and ``conclude`` (the summary and the
exit code). A restart policy is a rule in ``decide``; what a restart runs is ``next_plan``. Everything up to
the run directory raises ``UsageError`` (exit 2, nothing started); after it, the exit code is the root cause's.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import replace
from enum import Enum

from launcher.base.console import say
from launcher.base.signals import Stopped
from launcher.base.waiting import check, until
from launcher.checkpoint.resume import find_resume_point
from launcher.contract import ExitCode
from launcher.errors import UsageError
from launcher.execute.budget import RestartBudget
from launcher.execute.memory.workers import workers_of
from launcher.execute.results import AttemptResult, closing_lines, first_failure, how_it_ended, summarize
from launcher.execute.resuming import first_resume_point
from launcher.execute.sharedckpt import shared_checkpoint_warnings
from launcher.execute.signals import SignalWatch
from launcher.execute.termination import ZombieCollector, is_pid1, termination_log_path, write_termination_log
from launcher.host.devices import free_port
from launcher.host.mindcluster import read_version, version_path
from launcher.plan.make import LaunchPlan, Options, check_command, make_plan
from launcher.plan.notes import policy_lines, refusal
from launcher.rundir.create import create as create_run_dir
from launcher.rundir.create import write_json
from launcher.table.model import RankTable, dumps

RESET_POLL = 1.0   # seconds between looks at MindCluster's reset file while a rescheduled pod comes back

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from launcher.checkpoint.resume import ResumePoint
    from launcher.execute.job.link import JobLink
    from launcher.execute.local.metrics import MetricsFeed
    from launcher.plan.share import TableSource
    from launcher.rundir.model import PidsFile
    from launcher.table.spares import Roster


class Decision(Enum):
    """What an attempt's end means for the launch."""

    SUCCEEDED = "succeeded"   # every rank (of every host) succeeded: conclude
    RESTART = "restart"       # run the next attempt from the newest complete checkpoint
    STOP = "stop"             # conclude with the attempt's exit code (the root cause's)


def policy_reschedules(opts: Options) -> bool:
    """An unfit pod exits for its operator to start it elsewhere (``settle.unfit_exit_code``)."""
    return opts.policy.unfit_exit_code != ExitCode.UNHEALTHY


def launch(table: RankTable, server_index: int | None, opts: Options, *, dry_run: bool, environ: Mapping[str, str],
           on_started: Callable | None = None, control=None, reread: TableSource | None = None,
           roster: Roster | None = None) -> int:
    """Run this host's share of ``table`` to the end; returns dlaunch's exit code.

    ``environ`` is the environment the ranks inherit. ``opts.resume_from`` is an earlier run directory whose
    newest complete checkpoint step the ranks resume from; after a failure, restarts resume from this run's
    own newest complete step. ``reread`` lets a restart use a rank table an operator rewrote meanwhile.
    With spares, ``roster`` says which servers run the job (``table`` is their table) and ``server_index`` is
    None while this host stands by.
    """
    check_command(opts.command)   # before a dry run says all is well, too
    rank_table_file = os.path.join(opts.output_dir, opts.run_id, f"rank_table{opts.host_files_suffix}.json")
    resume = first_resume_point(opts, table.device_count)
    if roster is not None:
        from launcher.execute.job.spares import plan_for

        plan = plan_for(roster, opts, rank_table_file, environ, attempt=0, resume=resume)
    else:
        assert server_index is not None   # only a spare has none
        plan = make_plan(table, server_index, opts, rank_table_file, dict(environ), resume=resume)
    refused = refusal(plan)
    if refused:
        raise UsageError(refused)
    if dry_run:
        from launcher.plan.describe import describe

        print(describe(plan, port_chosen_at_start=not opts.fixed_port))
        return 0
    return Launch(table, server_index, opts, plan, environ=environ, control=control, on_started=on_started,
                  reread=reread, roster=roster).run()


class Launch:
    """One host's launch once its first plan is made: the attempts, the decisions between them, the summary."""

    def __init__(self, table: RankTable, server_index: int | None, opts: Options, plan: LaunchPlan, *,
                 environ: Mapping[str, str], control=None, on_started: Callable | None = None,
                 reread: TableSource | None = None, roster: Roster | None = None):
        self.table, self.server_index, self.opts, self.plan = table, server_index, opts, plan
        self.roster = roster              # --spares: which servers run the job, and whether this host does
        self.inherited = dict(environ)
        self.control = control            # (fd, pending bytes) of a head's control channel (--ssh), or None
        self.on_started = on_started      # told the ranks once every process of an attempt runs
        self.reread = reread
        self.resume = plan.resume
        self.next_resume: ResumePoint | None = None   # the step the next attempt resumes from (one host)
        self.budget = RestartBudget(without_progress=opts.policy.restarts_without_progress,
                                    per_hour=opts.policy.max_failures_per_hour,
                                    step=plan.resume.label if plan.resume else None)
        self.no_restart: str | None = None   # why restarts stopped before they ran out (exit 93)
        # MindCluster (an AscendJob pod): the rank table's version file, and its content as this launch began
        table_path = reread.path if reread is not None and opts.policy.reset_config else None
        self.version_file = version_path(table_path) if table_path else None
        self.version_seen = read_version(self.version_file) if self.version_file else None
        self.attempts: list[AttemptResult] = []
        self.verdict: dict = {}           # the job's verdict on the last attempt (several hosts)
        self.failure: Exception | None = None
        self.interrupted: int | None = None   # a stop signal that came between attempts, or cancelled a restart
        self.started = time.time()
        self.link: JobLink | None = None  # a multi-host job's link, opened by start
        self.metrics: MetricsFeed | None = None   # --metrics-port (execute/local/metrics.py), started by start

    # ------------------------------------------------------------------ the seams

    def run(self) -> int:
        """start, then attempts until ``decide`` says otherwise, then conclude."""
        self.start()
        try:
            try:
                while True:
                    result = self.run_attempt()
                    decision = None if result is None else self.decide(result)
                    if self.metrics is not None and result is not None:
                        self.metrics.ended(result, self.plan, restart=decision is Decision.RESTART)
                    if decision is not Decision.RESTART:
                        break
                    # the job's next attempt: one more, or, for a host that joined late, the one the job is in
                    check(self.signals)   # a stop signal while this attempt stopped: no next attempt
                    self.plan = self.next_plan(self.verdict.get("next_attempt") or self.plan.attempt + 1)
            except Stopped as stop:   # a stop signal between attempts (base.waiting): the restart does not happen
                self._interrupted(stop.signum)
            finally:
                self._stop_watching()
            return self.conclude()
        finally:
            # only now: a SIGTERM while the summary is written (srun ending the job once another host's dlaunch
            # exited, a pod being deleted) asks for the end already under way, and must not cut it short
            self.signals.close()
            self.workers.close()

    def start(self) -> None:
        """The job's link (several hosts), the run directory, then what watches every attempt: the signals to
        dlaunch, the workers, and as PID 1 the collector of zombies."""
        if self.opts.policy.fault_tolerance:   # the first line: what --fault-tolerant turned on here, and left off
            say(self.opts.policy.fault_tolerance)
        self.link = self._open_link()
        try:
            if self.roster is not None and self.link is not None:
                if self.link.joined(None, self.opts.join_timeout):
                    if self.link.active is not None and tuple(self.link.active) != self.roster.active:
                        # the job moved on before this host came (a replaced host back as a spare): its part now
                        self._follow_roster(self.link.active, self.plan.attempt, record=False)
                else:
                    refused = self.link.refusal()
                    if refused is not None:   # before the run directory: nothing of this host's is touched
                        from launcher.execute.job.spares import refusal_error

                        raise refusal_error(refused, self.roster.name(self.roster.own))
            create_run_dir(self.plan, dumps(self.table), shared=self.opts.shared_run_dir)
        except BaseException:
            if self.link:
                self.link.close()
            raise
        if self.control is None:   # said at the start, so a long job's logs can be found while it runs
            hidden = self.opts.console == "0" and self.plan.ranks and not any(s.console for s in self.plan.ranks)
            say(f"run directory {self.plan.run_dir}" + (
                f"; this host's {len(self.plan.ranks)} rank(s) are not on the console (--console {self.opts.console}:"
                f" --console all, or a list of ranks, shows them), their logs are in rank_NNN/output.log"
                if hidden else ""), *policy_lines(self.plan))
        self.started = time.time()
        control_fd, control_pending = self.control or (None, b"")
        self.signals = SignalWatch(control_fd, control_pending, forward=self.opts.forward_signals)
        self.workers = workers_of(self.opts)(self.signals, self.inherited, job=self.link, on_started=self._publish_pids)
        if self.opts.policy.metrics_port is not None:   # imported only then: no cost on the launch path without it
            from launcher.execute.local.metrics import MetricsFeed

            self.metrics = self.workers.metrics = MetricsFeed(self.plan.server_id)
            self._roster_moved(())
            self.metrics.serve(self.opts.policy.metrics_addr, self.opts.policy.metrics_port)
        # dlaunch is a child subreaper (reaper.py), as PID 1 or not: orphans of the ranks become its children,
        # and short-lived ones would pile up as its zombies until the attempt's end
        self.zombies = ZombieCollector(lambda: {*self.workers.reaper.groups, self.workers.reaper.pid})
        self.workers.zombies = self.zombies.start() if is_pid1() else self.zombies

    def run_attempt(self) -> AttemptResult | None:
        """The current plan's attempt, recorded; None when dlaunch itself failed (recorded too, so the run does
        not show "starting" forever)."""
        check(self.signals)   # a stop signal before this attempt: nothing of it starts
        unfit = self._health_gate() if self.opts.policy.health_gate else None
        if unfit is not None:
            self.attempts.append(unfit)
            return unfit
        if self.plan.standby:
            from launcher.execute.job.spares import stand_by

            assert self.link is not None   # a spare stands by on the job's link
            result = stand_by(self.link, self.signals, self.plan, elastic=bool(self.roster and self.roster.min_nodes))
            self.attempts.append(result)
            return result
        if self.metrics is not None:
            self.metrics.begin(self.plan)
        try:
            result = self.workers.run(self.plan)
        except Exception as exc:   # a dlaunch defect
            self.failure = exc
            self.attempts.append(AttemptResult(attempt=self.plan.attempt, ranks=[],
                                               launcher_error=f"dlaunch failed ({type(exc).__name__}: {exc})"))
            return None
        result.root_cause = first_failure(result)
        self.attempts.append(result)
        return result

    def decide(self, result: AttemptResult) -> Decision:
        """Succeeded, restart or stop. Several hosts decide together (the job's verdict); one host restarts
        after a rank failed while restarts are left, never after a signal or a launcher error."""
        last = self.plan.attempt == self.opts.policy.max_restarts
        restart = f"restart {self.plan.attempt + 1} of {self.opts.policy.max_restarts}"
        if self.plan.standby and result.extra.get("unfit"):   # an unfit spare leaves the job
            return Decision.STOP
        if self.link is not None:
            from launcher.execute.job import hosts as job

            self.verdict = job.settle(self.link, self.plan, result, self.signals.fd, self.roster)
            if result.interrupted_by is not None and self.verdict.get("restart"):   # preempted while it stopped
                self._interrupted(result.interrupted_by)
                return Decision.STOP
            if self.roster is None and result.extra.get("unfit") and policy_reschedules(self.opts):
                return Decision.STOP   # this pod is unfit: its operator starts it again elsewhere
            if self.verdict.get("restart") and not self._pod_back(self.verdict.get("root_cause")):
                return Decision.STOP
            if self.verdict.get("late"):
                say(f"{job.cause_line(self.verdict)} (it restarted before this host joined): this host's ranks "
                    f"restart to take part in it")
                return Decision.RESTART
            if self.verdict.get("restart"):
                say(f"{job.cause_line(self.verdict)}; restarting the job on every host ({restart})")
                return Decision.RESTART
            if self.verdict.get("no_restart"):
                say(f"{job.cause_line(self.verdict)}; not restarting the job: {self.verdict['no_restart']} "
                    f"(exit {ExitCode.NO_PROGRESS}: do not requeue)")
            return Decision.SUCCEEDED if self.verdict.get("status") == "succeeded" else Decision.STOP
        if result.exit_code == 0:
            return Decision.SUCCEEDED
        if result.stopped_by is not None and result.stopped_by["cause"].get("order") == "unrecovered" and not last:
            if not self._pod_back(result.stopped_by["cause"]):
                return Decision.STOP
            say(f"every rank recovered and the rank table moved on; restarting all ranks ({restart})")
            return Decision.RESTART
        cause = result.root_cause   # a rank failed: the one failure a restart answers
        if result.interrupted_by is not None and cause is not None and not last:   # preempted while it stopped
            self._interrupted(result.interrupted_by)
            return Decision.STOP
        if result.interrupted_by is not None or result.launcher_error is not None or cause is None or last \
                or self.opts.policy.restart_policy != "job":   # its restarts were each rank's (group's), in place
            return Decision.STOP
        self.next_resume = find_resume_point(self.plan.run_dir, self.table.device_count, log=say)
        self.no_restart = self.budget.refuses(self.next_resume.label if self.next_resume else None, time.time())
        if self.no_restart:
            say(f"rank {cause.rank} {how_it_ended(cause.to_dict())}; not restarting: {self.no_restart} (exit "
                f"{ExitCode.NO_PROGRESS}: do not requeue)")
            return Decision.STOP
        say(f"rank {cause.rank} {how_it_ended(cause.to_dict())}; restarting all ranks ({restart})")
        return Decision.RESTART

    def next_plan(self, attempt: int) -> LaunchPlan:
        """The plan of restart ``attempt``: a fresh port unless fixed, the table an operator rewrote, and the
        newest step every rank completed (of every host, as the job agreed)."""
        opts, plan = self.opts, self.plan
        self._wait_for_devices()
        port = opts.master_port if opts.fixed_port else free_port(opts.master_addr)
        rank_table_file = plan.rank_table_file
        if self.roster is not None:
            return self._follow_roster(self.verdict.get("active"), attempt)
        assert self.server_index is not None   # only a spare (with a roster) has none
        if self.reread is not None:
            from launcher.execute.job.restarts import next_table

            self.table, self.server_index, rank_table_file = next_table(self.reread, self.table, self.server_index,
                                                                        plan, rank_table_file, attempt, self.inherited)
        if self.link is not None:
            from launcher.execute.job import hosts as job

            self.resume = job.resume_point(plan, self.verdict) or self.resume
        else:
            self.resume = self.next_resume or self.resume
        return make_plan(self.table, self.server_index, replace(opts, master_port=port), rank_table_file,
                         self.inherited, attempt=attempt, resume=self.resume)

    def _follow_roster(self, active, attempt: int, record: bool = True) -> LaunchPlan:
        """--spares, --nnodes MIN:MAX: the plan of ``attempt`` as the job's ``active`` hosts stand (the same
        ones when None):
        this host's slot's ranks with the job's table rewritten and written for them, resuming from the step
        the job agreed on (found in this host's files of those ranks), or no rank while it stands by.
        ``record``: its plan file written again (not before the run directory is made)."""
        from launcher.execute.job import hosts as job
        from launcher.execute.job import spares

        roster = self.roster
        assert roster is not None
        if active is not None and tuple(active) != roster.active:
            before, roster = roster.active, roster.moved(active)
            self.roster = roster
            spares.say_moves(self.verdict, roster)
            self._roster_moved(before)
        written = dumps(self.table)   # what this plan's RANK_TABLE_FILE holds
        self.table, self.server_index = roster.table(), roster.slot
        rank_table_file = self.plan.rank_table_file
        if not record:   # joining a job that moved on: this host's earlier life may have left its table file
            from launcher.rundir.paths import attempt_file

            behind = self.link.behind if self.link is not None else None
            rank_table_file = attempt_file(self.plan.run_dir, f"rank_table{self.plan.host_files_suffix}", "json",
                                           behind["attempt"] if behind else attempt)
        elif roster.slot is not None and dumps(self.table) != written:   # the job's table changed: a file of its own
            rank_table_file = spares.job_table_file(roster, self.plan, attempt)
        plan = spares.plan_for(roster, self.opts, rank_table_file, self.inherited, attempt=attempt, resume=None)
        self.resume = job.resume_point(plan, self.verdict) if self.verdict.get("resume_step") else self.resume
        if self.resume is not None and not plan.standby:
            plan = spares.plan_for(roster, self.opts, rank_table_file, self.inherited, attempt=attempt,
                                   resume=self.resume)
        if record and (plan.ranks != self.plan.ranks or plan.standby != self.plan.standby):
            spares.record_plan(plan)
        self.plan = plan
        return plan

    def conclude(self) -> int:
        """The launch's summary written and said; its exit code."""
        plan, opts = self.plan, self.opts
        warnings = shared_checkpoint_warnings(plan, self.started)
        summary = summarize(plan, self.attempts, self.started, warnings)
        if self.interrupted is not None:   # the scheduler's word is the last: its signal's exit code
            summary.update(status="interrupted", exit_code=ExitCode.of_signal(self.interrupted),
                           interrupted_by=signal.Signals(self.interrupted).name)
        if self.verdict:
            from launcher.execute.job import hosts as job

            job.add_verdict(summary, self.verdict)
        elif self.no_restart:
            summary.update(exit_code=ExitCode.NO_PROGRESS, no_restart=self.no_restart)
        summary_path = plan.host_file("summary", "json")
        unwritten = write_termination_log(termination_log_path(opts.termination_log, self.inherited), summary)
        if unwritten:
            warnings = [*warnings, unwritten]
        try:
            write_json(summary_path, summary)
        except OSError as exc:
            say(*closing_lines(summary, "not written"), *warnings,
                f"error: cannot write the summary {summary_path}: {exc.strerror}; the ranks' logs are in "
                f"{plan.run_dir}")
            return summary["exit_code"] or 1
        say(*closing_lines(summary, summary_path), *warnings)
        if self.failure is not None:
            raise self.failure
        if self.control:
            from launcher.execute.ssh.protocol import emit

            emit("summary", summary=summary, path=summary_path)
        return summary["exit_code"]

    # ------------------------------------------------------------------ collaborators

    def _stop_watching(self) -> None:
        """After the last attempt: the job's link closed, the reaper told to leave (awaited once the summary is
        written), the zombie collector stopped."""
        if self.link is not None:
            self.link.close()
        if self.metrics is not None:
            self.metrics.close()
        self.workers.reaper.leave()
        if self.zombies:
            self.zombies.stop()

    def _roster_moved(self, before: tuple[int, ...]) -> None:
        """--spares: the metrics' hosts standing by, and those replaced (active before, not now)."""
        if self.metrics is not None and self.roster is not None:
            left = len(set(before) - set(self.roster.active)) if before else 0
            self.metrics.roster(len(self.roster.pool.servers) - len(self.roster.active), self.metrics.replaced + left)

    def _interrupted(self, signum: int) -> None:
        """A stop signal came after an attempt ended, or while it stopped for a restart: no attempt follows, and
        the launch ends with the signal's exit code (a scheduler preempting the job is obeyed in every phase)."""
        self.interrupted = signum
        if not self.attempts:   # before the first attempt started anything (the health gate)
            self.attempts.append(AttemptResult(attempt=self.plan.attempt, ranks=[], interrupted_by=signum))
        say(f"{signal.Signals(signum).name}: no further attempt starts (exit {ExitCode.of_signal(signum)})")

    def _pod_back(self, cause: dict | None) -> bool:
        """After MindCluster marked a rank unrecovered (its pod rescheduled): wait, about once a second, until
        every rank is recovered and the rank table's version file moved on (the next plan re-reads the table);
        False when that has not happened within --join-timeout; ``Stopped`` when a stop signal came."""
        from launcher.host.mindcluster import recovered

        if not cause or not (cause.get("order") == "unrecovered" or cause.get("reschedule")) \
                or self.version_file is None:
            return True
        reset, version_file = self.opts.policy.reset_config, self.version_file
        assert reset is not None   # version_file is set only with it
        say(f"waiting for MindCluster: every rank recovered and {self.version_file} moved on from "
            f"{self.version_seen!r}")
        if not until(lambda: recovered(reset, version_file, self.version_seen), self.opts.join_timeout,
                     RESET_POLL, self.signals):   # a stop signal ends it too (Stopped: no restart)
            say(f"MindCluster did not bring every rank back within {self.opts.join_timeout:g} s (--join-timeout): "
                f"not restarting")
            return False
        self.version_seen = read_version(self.version_file)
        return True

    def _health_gate(self) -> AttemptResult | None:
        """This host checked before its ranks start (host/health.py): None when fit; else an attempt that
        started nothing, stopped with exit 92, every finding said, and the other hosts told. Each check's
        outcome is said before the first start; every tool's answer is kept in ``health[.<host>].txt``."""
        from launcher.host.health import GateSettings, gate, keep_answers

        policy, plan = self.opts.policy, self.plan
        devices = [spec.device_id for spec in plan.ranks if spec.device_id is not None]
        if plan.standby and self.roster is not None:   # a spare is checked for the devices it would run
            devices = [placed.device for placed in self.roster.pool.servers[self.roster.own].placed()]
        kept_in = plan.host_file("health", "txt")
        report = gate(devices, plan.run_dir, GateSettings(command=policy.health_check, kept_in=kept_in),
                      self.inherited.get("PATH", os.defpath), stop=self.signals)
        unwritten = keep_answers(kept_in, plan.attempt, report.lines(), report.transcript)
        if not self.attempts:   # before the first start: what was checked, and what could not be
            say(*report.lines(), *([unwritten] if unwritten else []))
        if not report.findings:
            return None
        lines = [finding.line(plan.server_id) for finding in report.findings]
        code = policy.unfit_exit_code
        rescheduled = policy_reschedules(self.opts)
        say(f"the health gate found this host unfit to start (exit {code}"
            + (", which an operator's ExitCode restart policy reschedules elsewhere" if rescheduled else "") + "):",
            *lines)
        result = AttemptResult(attempt=plan.attempt, ranks=[], stopped_by={
            "why": f"the health gate found host {plan.server_id} unfit: {lines[0]}"
                   + (f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""),
            "exit_code": code, "cause": {"kind": "unhealthy", "host": plan.server_id, "reschedule": rescheduled,
                                         "findings": lines, "checks": report.lines(),
                                         **({"output": kept_in} if not unwritten else {})}}, extra={"unfit": True})
        if self.link is not None and not plan.standby:   # an unfit spare only leaves: the job runs on
            self.link.stopped(result)
        return result

    def _wait_for_devices(self) -> None:
        """The last attempt's device memory released before the next attempt's ranks start (host/release.py)."""
        from launcher.host.release import memory_reader, wait_for_release

        timeout = self.opts.policy.device_release_timeout
        reader = memory_reader(self.opts.devices.source, self.inherited.get("PATH")) if timeout else None
        devices = sorted({spec.device_id for spec in self.plan.ranks if spec.device_id is not None})
        if reader is not None and devices:
            wait_for_release(devices, reader, timeout, say, stop=self.signals)

    def _open_link(self) -> JobLink | None:
        if self.plan.server_count < 2 and self.roster is None:
            return None
        if self.opts.unlinked:
            say(f"not linked to the job's other hosts: {self.opts.unlinked}")
            return None
        from launcher.execute.job import hosts as job

        return job.open_link(self.plan, self.opts, self.table, self.control, self.inherited, self.roster)

    def _publish_pids(self, ranks, scheduler) -> None:
        """pids.json once every process of an attempt runs (status and logs find live ranks there)."""
        plan = self.plan
        published: PidsFile = {"launcher_pid": os.getpid(), "ranks": {
            str(r.rank): {"pid": r.pid, "start": r.start, "attempt": plan.attempt,
                          **({"restarts": len(r.restarts)} if r.restarts else {})} for r in ranks}}
        if scheduler is not None:
            published["scheduler"] = {"pid": scheduler.pid, "start": scheduler.start, "attempt": plan.attempt}
        write_json(plan.host_file("pids", "json"), published)
        if self.on_started:
            self.on_started(ranks)
