"""One host's launch from start to exit code: table -> plan -> run directory -> attempts -> summary.

``dlaunch run`` and ``dlaunch cluster`` differ only in how they find the rank
table and this host's share of it; both end here.  Everything up to the run
directory raises ``UsageError`` (exit 2, nothing started); after it, the exit
code is the root cause's.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from dataclasses import replace

from launcher import rundir
from launcher.console import say
from launcher.results import how_it_ended
from launcher.errors import UsageError
from launcher.execute.tee import tail_lines
from launcher.plan import LaunchPlan, Options, make_plan
from launcher.resume import find_resume_point, resume_point
from launcher.table.model import RankTable, dumps
from launcher.results import AttemptResult
from launcher.execute.local import LocalWorkers, SignalWatch
from launcher.execute.sharedckpt import shared_checkpoint_warnings


def free_port(address: str) -> int:
    """A TCP port free on ``address`` right now (the kernel picks it, as torchrun does)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, 0))
        except OSError as exc:
            raise UsageError(f"cannot use master address {address}: {exc.strerror}") from None
        return sock.getsockname()[1]


def check_command(opts: Options) -> None:
    """The script or executable must exist before any rank starts."""
    import shutil

    command = opts.command
    if command.no_python:
        found = shutil.which(command.target, path=None if os.sep not in command.target else "")
        if not (found or (os.sep in command.target and os.access(command.target, os.X_OK))):
            raise UsageError(f"executable not found: {command.target}")
    elif not command.module and not os.path.isfile(command.target):
        raise UsageError(f"script not found: {command.target}")


def _root_cause(result: AttemptResult) -> dict | None:
    cause = result.root_cause
    if cause is None:
        return None
    info = cause.to_dict()
    info["log_tail"] = tail_lines(cause.log_file, 10)
    message = _error_file_message(cause.error_file)
    if message:
        info["error_file_message"] = message
    return info


def _error_file_message(path: str) -> str | None:
    """The message torchelastic's @record wrote for a failed rank, when there is one."""
    import json

    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        return str(data.get("message", {}).get("message") or data.get("message"))[:2000]
    except (OSError, ValueError, AttributeError):
        return None


def _newest_complete_checkpoint(plan: LaunchPlan) -> str | None:
    """The newest step every rank saved (what --resume picks), read once the ranks are gone."""
    step, _ = resume_point(plan.run_dir, plan.world_size)
    return step.label if step else None


def summarize(plan: LaunchPlan, attempts: list[AttemptResult], started: float, warnings: list[str] = ()) -> dict:
    last = attempts[-1]
    if last.root_cause is not None or last.launcher_error is not None:
        status = "failed"
    elif last.interrupted_by is not None:
        status = "interrupted"
    else:
        status = "succeeded"
    return {
        "run_id": plan.run_id, "run_dir": plan.run_dir, "host": plan.server_id, "server_index": plan.server_index,
        "world_size": plan.world_size, "status": status, "exit_code": last.exit_code,
        "started": started, "ended": time.time(),
        "ranks_started": min((r.start for r in last.ranks if r.start), default=None),
        "resumed_from": ({"run_dir": plan.resume.run_dir, "step": plan.resume.label} if plan.resume else None),
        "newest_complete_checkpoint": _newest_complete_checkpoint(plan),
        "root_cause": _root_cause(last),
        **({"launcher_error": last.launcher_error} if last.launcher_error else {}),
        "interrupted_by": signal.Signals(last.interrupted_by).name if last.interrupted_by else None,
        "ranks": [r.to_dict() for r in last.ranks],
        **({"scheduler": last.scheduler.to_dict()} if last.scheduler else {}),
        "attempts": [{"attempt": a.attempt, "exit_code": a.exit_code, "root_cause": _root_cause(a),
                      "ranks": [r.to_dict() for r in a.ranks]} for a in attempts],
        **({"warnings": list(warnings)} if warnings else {}),
    }


def closing_lines(summary: dict, summary_path: str) -> list[str]:
    """The closing lines people read: success in one line, failure with its root cause and log tail."""
    count = len(summary["ranks"])
    took = summary["ended"] - summary["started"]
    cause = summary["root_cause"]
    if summary["status"] == "succeeded":
        return [f"all {count} rank(s) exited 0 in {took:.1f} s; run directory {summary['run_dir']}"]
    lines = []
    if cause and cause.get("hung"):
        lines.append(cause["reason"])
        if cause.get("stack_file"):
            lines.append(f"stacks of this host's ranks: {cause['stack_file']} (and its peers')")
    if cause:
        who = (f"the MindSpore scheduler (host {cause['host']})" if cause.get("role") == "scheduler" else
               f"rank {cause['rank']} (host {cause['host']}, device {cause['device_id']})")
        lines.append(f"{who} {how_it_ended(cause)}; log: {cause['log']}")
        if cause.get("error_file_message"):
            lines.append(f"its error file says: {cause['error_file_message']}")
        if cause["log_tail"]:
            lines.append("last lines of its log:")
            lines += [f"    | {line}" for line in cause["log_tail"]]
        if cause.get("role") == "scheduler":
            stopped = f"stopped all {count} rank(s); "
        else:
            others = sum(1 for r in summary["ranks"] if r["rank"] != cause.get("rank"))
            stopped = f"stopped the other {others} rank(s); " if others else ""
        lines.append(f"{stopped}exit code {summary['exit_code']}; summary {summary_path}")
    elif summary.get("launcher_error"):
        lines.append(f"{summary['launcher_error']}: stopped all {count} rank(s); exit code {summary['exit_code']}; "
                     f"summary {summary_path}")
    else:
        lines.append(f"interrupted by {summary['interrupted_by']}; stopped {count} rank(s); summary {summary_path}")
    if summary.get("newest_complete_checkpoint"):
        lines.append(f"newest complete checkpoint: {summary['newest_complete_checkpoint']} (what --resume picks)")
    return lines


def launch(table: RankTable, server_index: int, opts: Options, *, dry_run: bool, shared_run_dir: bool,
           fixed_port: bool, prefix_host: bool = False, on_started=None, control=None,
           resume_from: str | None = None, hang_timeout: float | None = None) -> int:
    """Run this host's share of ``table`` to the end; returns dlaunch's exit code.

    ``resume_from`` is an earlier run directory whose newest complete checkpoint step the ranks resume
    from; after a failure, restarts resume from this run's own newest complete step.
    """
    inherited = dict(os.environ)
    rank_table_file = os.path.join(opts.output_dir, opts.run_id, f"rank_table{opts.host_files_suffix}.json")
    resume = None
    if resume_from is not None:
        resume = find_resume_point(resume_from, table.device_count, log=say)
        if resume is None:
            raise UsageError(f"nothing to resume: {resume_from} has no checkpoint that every rank completed")
        say(f"resuming from {resume.label} of {resume.run_dir}")
    plan = make_plan(table, server_index, opts, rank_table_file, inherited, resume=resume)
    if dry_run:
        from launcher.plan import describe

        print(describe(plan))
        return 0
    check_command(opts)
    rundir.create(plan, dumps(table), shared=shared_run_dir)
    started = time.time()
    signals = SignalWatch(*control) if control else SignalWatch()
    workers = LocalWorkers(signals, prefix_host=prefix_host, hang_timeout=hang_timeout)
    pids_file = plan.host_file("pids", "json")

    def publish_pids(ranks, scheduler):
        published = {"launcher_pid": os.getpid(), "ranks": {
            str(r.rank): {"pid": r.pid, "start": r.start, "attempt": plan.attempt} for r in ranks}}
        if scheduler is not None:
            published["scheduler"] = {"pid": scheduler.pid, "start": scheduler.start, "attempt": plan.attempt}
        rundir.write_json(pids_file, published)
        if on_started:
            on_started(ranks)

    workers.on_started = publish_pids
    attempts: list[AttemptResult] = []
    try:
        for attempt in range(opts.max_restarts + 1):
            if attempt:
                port = opts.master_port if fixed_port else free_port(opts.master_addr)
                resume = find_resume_point(plan.run_dir, table.device_count, log=say) or resume
                plan = make_plan(table, server_index, replace(opts, master_port=port), rank_table_file, inherited,
                                 attempt=attempt, resume=resume)
            result = workers.run(plan)
            attempts.append(result)
            if (result.exit_code == 0 or result.interrupted_by is not None or result.launcher_error is not None
                    or attempt == opts.max_restarts):
                break
            cause = result.root_cause
            say(f"rank {cause.rank} {how_it_ended(cause.to_dict())}; restarting all ranks "
                f"(restart {attempt + 1} of {opts.max_restarts})")
    finally:
        workers.close()
        signals.close()
    warnings = shared_checkpoint_warnings(plan, started)
    summary = summarize(plan, attempts, started, warnings)
    summary_path = plan.host_file("summary", "json")
    try:
        rundir.write_json(summary_path, summary)
    except OSError as exc:
        say(*closing_lines(summary, "not written"), *warnings,
            f"error: cannot write the summary {summary_path}: {exc.strerror}; the ranks' logs are in "
            f"{plan.run_dir}")
        return summary["exit_code"] or 1
    say(*closing_lines(summary, summary_path), *warnings)
    if control:
        from launcher.execute.ssh.agent import emit

        emit("summary", summary=summary, path=summary_path)
    return summary["exit_code"]
