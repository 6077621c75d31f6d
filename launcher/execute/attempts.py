"""One host's launch from start to exit code: table -> plan -> run directory -> attempts -> summary.

``dlaunch run`` and ``dlaunch cluster`` differ only in how they find the rank
table and this host's share of it; both end here.  Everything up to the run
directory raises ``UsageError`` (exit 2, nothing started); after it, the exit
code is the root cause's.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace

from launcher.base.console import say
from launcher.checkpoint.resume import find_resume_point
from launcher.errors import UsageError
from launcher.execute.local.workers import LocalWorkers
from launcher.execute.results import AttemptResult, closing_lines, first_failure, how_it_ended, summarize
from launcher.execute.sharedckpt import shared_checkpoint_warnings
from launcher.execute.signals import SignalWatch
from launcher.execute.termination import ZombieCollector, is_pid1, termination_log_path, write_termination_log
from launcher.host.devices import free_port
from launcher.plan.make import LaunchPlan, Options, make_plan
from launcher.rundir.create import create as create_run_dir
from launcher.rundir.create import write_json
from launcher.table.model import RankTable, dumps

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from launcher.rundir.model import PidsFile


def check_command(opts: Options) -> None:
    """The script or executable must exist before any rank starts."""
    import shutil

    command = opts.command
    if command.no_python:
        found = shutil.which(command.target, path=None if os.sep not in command.target else "")
        if not (found or (os.sep in command.target and os.access(command.target, os.X_OK))):
            raise UsageError(f"executable not found: {command.target}")
    elif command.module or os.path.isfile(command.target):
        return
    elif os.path.isdir(command.target):   # Python runs a directory only through its __main__.py
        if not os.path.isfile(os.path.join(command.target, "__main__.py")):
            raise UsageError(f"{command.target} is a directory (with no __main__.py), not a script: give the "
                             f"training script in it")
    else:
        raise UsageError(f"script not found: {command.target}")


def launch(table: RankTable, server_index: int, opts: Options, *, dry_run: bool, on_started=None,
           control=None, reread=None) -> int:
    """Run this host's share of ``table`` to the end; returns dlaunch's exit code.

    ``opts.resume_from`` is an earlier run directory whose newest complete checkpoint step the ranks resume
    from; after a failure, restarts resume from this run's own newest complete step. ``reread`` (the table's
    file, profile, --server-id, --rank-start) lets a restart use a rank table an operator rewrote meanwhile.
    """
    inherited = dict(os.environ)
    rank_table_file = os.path.join(opts.output_dir, opts.run_id, f"rank_table{opts.host_files_suffix}.json")
    resume = None
    if opts.resume_from is not None:
        resume = find_resume_point(opts.resume_from, table.device_count, log=say)
        if resume is None:
            raise UsageError(f"nothing to resume: {opts.resume_from} has no checkpoint that every rank completed")
        say(f"{opts.resume_note + ': ' if opts.resume_note else ''}resuming from {resume.label} of {resume.run_dir}")
    elif opts.resume_note:
        say(opts.resume_note)
    plan = make_plan(table, server_index, opts, rank_table_file, inherited, resume=resume)
    if dry_run:
        from launcher.plan.make import describe

        print(describe(plan, port_chosen_at_start=not opts.fixed_port))
        return 0
    check_command(opts)
    link = None
    if plan.server_count > 1:
        from launcher.execute.job import hosts as job

        link = job.open_link(plan, opts, table, control)
    try:
        create_run_dir(plan, dumps(table), shared=opts.shared_run_dir)
    except BaseException:
        if link:
            link.close()
        raise
    if control is None:   # said at the start, so a long job's logs can be found while it runs
        say(f"run directory {plan.run_dir}")
    started = time.time()
    control_fd, control_pending = control or (None, b"")
    signals = SignalWatch(control_fd, control_pending, forward=opts.forward_signals)
    workers = LocalWorkers(signals)
    workers.job = link
    verdict: dict = {}
    zombies = ZombieCollector(lambda: {*workers.reaper.groups, workers.reaper.pid}).start() if is_pid1() else None
    pids_file = plan.host_file("pids", "json")

    def publish_pids(ranks, scheduler) -> None:
        published: PidsFile = {"launcher_pid": os.getpid(), "ranks": {
            str(r.rank): {"pid": r.pid, "start": r.start, "attempt": plan.attempt} for r in ranks}}
        if scheduler is not None:
            published["scheduler"] = {"pid": scheduler.pid, "start": scheduler.start, "attempt": plan.attempt}
        write_json(pids_file, published)
        if on_started:
            on_started(ranks)

    workers.on_started = publish_pids
    attempts: list[AttemptResult] = []
    failure: Exception | None = None
    try:
        try:
            for attempt in range(opts.policy.max_restarts + 1):
                if attempt:
                    port = opts.master_port if opts.fixed_port else free_port(opts.master_addr)
                    if reread is not None:
                        from launcher.execute.job.restarts import next_table

                        table, server_index, rank_table_file = next_table(reread, table, server_index, plan,
                                                                          rank_table_file, attempt)
                    if link is not None:   # the step every rank of every host has, as the job agreed
                        resume = job.resume_point(plan, verdict) or resume
                    else:
                        resume = find_resume_point(plan.run_dir, table.device_count, log=say) or resume
                    plan = make_plan(table, server_index, replace(opts, master_port=port), rank_table_file, inherited,
                                     attempt=attempt, resume=resume)
                try:
                    result = workers.run(plan)
                except Exception as exc:   # a dlaunch defect: recorded, so the run does not show "starting" forever
                    failure = exc
                    attempts.append(AttemptResult(attempt=plan.attempt, ranks=[],
                                                  launcher_error=f"dlaunch failed ({type(exc).__name__}: {exc})"))
                    break
                result.root_cause = first_failure(result)
                attempts.append(result)
                if link is not None:
                    verdict = job.settle(link, plan, result, signals.fd)
                    if not verdict.get("restart"):
                        break
                    say(f"{job.cause_line(verdict)}; restarting the job on every host "
                        f"(restart {attempt + 1} of {opts.policy.max_restarts})")
                    continue
                cause = result.root_cause   # a rank failed: the one failure a restart answers
                if (result.exit_code == 0 or result.interrupted_by is not None or result.launcher_error is not None
                        or cause is None or attempt == opts.policy.max_restarts):
                    break
                say(f"rank {cause.rank} {how_it_ended(cause.to_dict())}; restarting all ranks "
                    f"(restart {attempt + 1} of {opts.policy.max_restarts})")
        finally:
            if link is not None:
                link.close()
            workers.reaper.leave()   # awaited once the summary is written
            if zombies:
                zombies.stop()
        return _conclude(plan, opts, attempts, started, verdict, failure, control)
    finally:
        # only now: a SIGTERM while the summary is written (srun ending the job once another host's dlaunch
        # exited, a pod being deleted) asks for the end already under way, and must not cut it short
        signals.close()
        workers.close()


def _conclude(plan: LaunchPlan, opts: Options, attempts: list[AttemptResult], started: float, verdict: dict,
              failure: Exception | None, control) -> int:
    """The launch's summary written and said; its exit code."""
    warnings = shared_checkpoint_warnings(plan, started)
    summary = summarize(plan, attempts, started, warnings)
    if verdict:
        from launcher.execute.job import hosts as job

        job.add_verdict(summary, verdict)
    summary_path = plan.host_file("summary", "json")
    unwritten = write_termination_log(termination_log_path(opts.termination_log), summary)
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
    if failure is not None:
        raise failure
    if control:
        from launcher.execute.ssh.protocol import emit

        emit("summary", summary=summary, path=summary_path)
    return summary["exit_code"]

