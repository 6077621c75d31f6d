"""How ranks ended: the result model of an attempt, THE exit-code rule, and the one wording every message uses.

A rank that exits 3 "exited with code 3"; one killed by SIGKILL "died of SIGKILL (exit 137)", naming both
the signal and the code the shell and dlaunch report for it; one that could not start says why; one judged
hung says so.  Closing lines, the head's report over SSH, ``status`` and restart messages all use
``how_it_ended``, so the same event never reads two ways.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from launcher.base.console import printable
from launcher.base.lines import tail_lines
from launcher.contract import ExitCode, Role

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from typing import Any

    from launcher.plan.make import LaunchPlan



def restarted_how(restart) -> str:
    """How a rank was started again in its attempt, from its last restart's entry: with its TorchFT replica
    group (``--restart-policy group``), or alone (``rank``, MindCluster's RestartFaultProcess)."""
    why = restart.get("why") if isinstance(restart, dict) else None
    return "with its replica group" if isinstance(why, str) and "replica group" in why else "alone"


def how_it_ended(entry: Mapping[str, Any]) -> str:
    """``entry``: a rank's summary record (or a root cause): exit_code, signal, spawn_error, hung."""
    if entry.get("spawn_error"):
        how = entry["spawn_error"]
    elif entry.get("signal"):
        how = f"died of {entry['signal']} (exit {entry.get('exit_code')})"
    else:
        how = f"exited with code {entry.get('exit_code')}"
    return f"hung and was stopped ({how})" if entry.get("hung") else how


def who(cause: Mapping[str, Any]) -> str:
    """Whom a root cause names: ``rank 3 (host h, device 3)``, or MindSpore's scheduler, which has neither rank
    nor device."""
    if cause.get("role") == Role.SCHEDULER:
        return f"the MindSpore scheduler (host {cause.get('host')})"
    return f"rank {cause.get('rank')} (host {cause.get('host')}, device {cause.get('device_id')})"


@dataclass
class RankResult:
    """How one process of an attempt went: a rank, or (``role`` "scheduler") MindSpore's scheduler."""

    rank: int | None
    local_rank: int | None
    device_id: int | None
    server_id: str
    log_file: str
    error_file: str | None
    pid: int | None = None
    start: float | None = None
    end: float | None = None
    returncode: int | None = None   # as Popen: negative for "killed by signal"
    spawn_error: str | None = None
    hang: str | None = None          # why dlaunch judged this rank hung, if it did
    stopped_first: bool = False      # a hang: its stack or step showed it is the rank the others wait for
    stack_file: str | None = None
    role: Role = Role.RANK
    restarts: list = field(default_factory=list)   # its earlier runs in this attempt (restarted alone): how each ended
    raised: bool = False             # its Python said it raised an uncaught exception (execute/local/raised.py)

    @property
    def exit_code(self) -> int | None:
        """The shell's convention: 128+N for a rank killed by signal N; 1, Python's, for a rank that raised,
        whatever signal ended its teardown (and from the moment it raised)."""
        if self.raised and (self.returncode is None or self.returncode < 0):
            return 1
        if self.returncode is None:
            return None
        return ExitCode.of_signal(-self.returncode) if self.returncode < 0 else self.returncode

    @property
    def signal_name(self) -> str | None:
        if self.returncode is None or self.returncode >= 0 or self.raised:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"

    def to_dict(self) -> dict:
        return {"rank": self.rank, "local_rank": self.local_rank, "device_id": self.device_id,
                "host": self.server_id, "pid": self.pid, "start": self.start, "end": self.end,
                "exit_code": self.exit_code, "signal": self.signal_name, "log": self.log_file,
                **({"spawn_error": self.spawn_error} if self.spawn_error else {}),
                **({"hung": True, "reason": self.hang} if self.hang else {}),
                **({"stopped_first": True} if self.stopped_first else {}),
                **({"stack_file": self.stack_file} if self.stack_file else {}),
                **({"role": self.role} if self.role != Role.RANK else {}),
                **({"restarts": self.restarts} if self.restarts else {})}


@dataclass
class AttemptResult:
    """One attempt of a host's plan: every rank's result, the root cause, and THE exit-code rule."""

    attempt: int
    ranks: list[RankResult]
    scheduler: RankResult | None = None
    root_cause: RankResult | None = None
    interrupted_by: int | None = None     # the signal dlaunch received, if that ended the attempt
    launcher_error: str | None = None     # dlaunch itself could not go on (a full disk): it stopped the ranks
    stopped_at: float | None = None
    stopped_by: dict | None = None        # another host of the job ended it: {"why", "exit_code", "cause"}
    extra: dict = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        if self.root_cause is not None:
            return ExitCode.HUNG if self.root_cause.hang else (self.root_cause.exit_code or 1)
        if self.launcher_error is not None:
            return 1
        if self.stopped_by is not None:
            return self.stopped_by["exit_code"]
        if self.interrupted_by is not None:
            return ExitCode.of_signal(self.interrupted_by)
        return 0


def _recorded_at(rank: RankResult) -> float | None:
    """When torchelastic's @record wrote ``rank``'s error file (its failure), or None without one."""
    try:
        return os.stat(rank.error_file).st_mtime if rank.error_file else None
    except OSError:
        return None


def first_failure(result: AttemptResult) -> RankResult | None:
    """The root cause as torchrun orders failures, by their error files' timestamps (torchrun reads every failed
    worker's): a rank whose error file this attempt was written before the observed root cause failed, failed
    first, whether it then exited on its own (its exit only seen later, while its interpreter shut down) or was
    stopped by dlaunch on the way out. Such a rank's exit code is its exception's, 1, not the stop signal's. A
    hang never yields to it."""
    cause = result.root_cause
    if cause is None or cause.hang:
        return cause
    seen_at = _recorded_at(cause) or cause.end
    earlier = []
    for rank in result.ranks:
        when = _recorded_at(rank)
        if rank is not cause and rank.returncode and when is not None and seen_at and when < seen_at \
                and when >= (rank.start or 0):
            earlier.append((when, rank.rank or 0, rank))
    if not earlier:
        return cause
    first = min(earlier, key=lambda item: item[:2])[2]
    return replace(first, returncode=1) if (first.returncode or 0) < 0 else first


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


def _error_file_message(path: str | None) -> str | None:
    """The message torchelastic's @record wrote for a failed rank, when there is one (read as any run file:
    bounded, never a FIFO the rank left in its place)."""
    from launcher.rundir.model import read_json

    if not path:
        return None
    data, _ = read_json(path, path)
    if not isinstance(data, dict):
        return None
    message = data.get("message")
    if not message:
        return None
    return str(message.get("message") if isinstance(message, dict) and message.get("message") else message)[:2000]


def _newest_complete_checkpoint(plan: LaunchPlan) -> str | None:
    """The newest step every rank saved (what --resume picks), read once the ranks are gone.

    A step counts complete when every rank has it in memory or on disk (the memory tier, --memory-ckpt): the
    summary is written after the end-of-attempt persist (execute/memory/keeper.py), which put each rank's
    newest complete memory step on disk, so this scan of the disk sees both tiers.

    A step every rank saved is one rank 0 saved: where rank 0's checkpoint directory holds none (a run that
    saved nothing, or rank 0 is another host's), one directory is listed instead of every rank's."""
    from launcher.checkpoint.resume import collect, resume_point
    from launcher.contract import CKPT_DIR
    from launcher.rundir.paths import rank_dir_name

    if not collect({0: os.path.join(plan.run_dir, rank_dir_name(0, plan.world_size), CKPT_DIR)}):
        return None
    step, _ = resume_point(plan.run_dir, plan.world_size)
    return step.label if step else None


def summarize(plan: LaunchPlan, attempts: list[AttemptResult], started: float, warnings=()) -> dict:
    last = attempts[-1]
    if last.root_cause is not None or last.launcher_error is not None or last.stopped_by is not None:
        status = "failed"
    elif last.interrupted_by is not None:
        status = "interrupted"
    else:
        status = "succeeded"
    ranks = [[r.to_dict() for r in a.ranks] for a in attempts]   # each once: the last attempt's are said twice
    return {
        "run_id": plan.run_id, "run_dir": plan.run_dir, "host": plan.server_id, "server_index": plan.server_index,
        "world_size": plan.world_size, "status": status, "exit_code": last.exit_code,
        "started": started, "ended": time.time(),
        "ranks_started": min((r.start for r in last.ranks if r.start), default=None),
        "resumed_from": ({"run_dir": plan.resume.run_dir, "step": plan.resume.label} if plan.resume else None),
        "newest_complete_checkpoint": _newest_complete_checkpoint(plan),
        "root_cause": _root_cause(last),
        **({"launcher_error": last.launcher_error} if last.launcher_error else {}),
        **({"stopped_by": last.stopped_by} if last.stopped_by else {}),
        "interrupted_by": signal.Signals(last.interrupted_by).name if last.interrupted_by else None,
        "ranks": ranks[-1],
        **({"scheduler": last.scheduler.to_dict()} if last.scheduler else {}),
        "attempts": [{"attempt": a.attempt, "exit_code": a.exit_code, "root_cause": _root_cause(a),
                      "ranks": entries, **({"unfit": True} if a.extra.get("unfit") else {})}
                     for a, entries in zip(attempts, ranks)],
        **({"warnings": list(warnings)} if warnings else {}),
        **({"standby": True} if plan.standby else {}),   # --spares: this host stood by in the last attempt
    }


TEARDOWN_ABORT_HINT = ("if it used torch.distributed: torch's own teardown aborts a rank that exits without "
                      "torch.distributed.destroy_process_group() (2 to 4 runs in 8 here, under torchrun too); call "
                      "it before the script ends and the exit code is the script's (docs/run.md, \"Exit code\")")


def _teardown_abort(cause: Mapping[str, Any]) -> bool:
    """A rank that died of SIGABRT right after C++'s "terminate called without an active exception": the way
    torch's interpreter teardown kills a rank whose process group was not destroyed (a gloo thread ended by
    CPython while it frees a tensor; issue 38, item 13)."""
    tail = cause.get("log_tail") or []
    return cause.get("signal") == "SIGABRT" and any("terminate called without an active exception" in line
                                                    for line in tail[-3:])


def restarts_said(summary: Mapping[str, Any]) -> str:
    """`` after 2 restart(s)`` of the job (attempts that started ranks: one a health gate found unfit did not),
    `` after 3 restart(s) of rank(s) 1,4`` started again in place (``--restart-policy rank`` or ``group``,
    MindCluster), both, or "" for none."""
    from launcher.base.numlists import format_ranges

    job = sum(1 for attempt in (summary.get("attempts") or [])[1:] if not attempt.get("unfit"))
    alone = {int(r["rank"]): len(r["restarts"]) for r in summary.get("ranks") or []
             if isinstance(r.get("rank"), int) and r.get("restarts")}
    said = f" after {job} restart(s)" if job > 0 else ""
    if alone:
        said += (" and" if said else " after") + (f" {sum(alone.values())} restart(s) of rank(s) "
                                                  f"{format_ranges(sorted(alone))}")
    return said


def _ran_on(rank: Mapping[str, Any], cause: Mapping[str, Any]) -> bool:
    """Whether ``rank`` was still running when the root cause ended (so the stop that followed stopped it);
    a rank that had ended before, exit 0 or not, was not stopped."""
    end, failed = rank.get("end"), cause.get("end")
    return not isinstance(end, (int, float)) or not isinstance(failed, (int, float)) or end >= failed


def closing_lines(summary: dict, summary_path: str) -> list[str]:
    """The closing lines people read: success in one line, failure with its root cause and log tail."""
    count = len(summary["ranks"])
    took = summary["ended"] - summary["started"]
    cause = summary["root_cause"]
    restarted = restarts_said(summary)
    if summary["status"] == "succeeded" and summary.get("standby"):
        return [f"the job succeeded{restarted} in {took:.1f} s with this host standing by as a spare; run "
                f"directory {summary['run_dir']}"]
    alone = not summary["ranks"] and bool(summary.get("scheduler"))   # an operator's scheduler pod: no rank
    if summary["status"] == "succeeded":
        return [("the MindSpore scheduler exited 0" if alone else f"all {count} rank(s) exited 0")
                + f"{restarted} in {took:.1f} s; run directory {summary['run_dir']}"]
    lines = []
    if cause and cause.get("hung"):
        lines.append(cause["reason"])
        if cause.get("stack_file"):
            lines.append(f"stacks of this host's ranks: {cause['stack_file']} (and its peers')")
    if cause:
        lines.append(f"{who(cause)} {how_it_ended(cause)}; log: {cause['log']}")
        if cause.get("error_file_message"):   # the rank's own words: shown, never obeyed by the terminal
            lines.append(f"its error file says: {printable(cause['error_file_message'])}")
        if cause["log_tail"]:
            lines.append("last lines of its log:")
            lines += [f"    | {printable(line)}" for line in cause["log_tail"]]
        if _teardown_abort(cause):
            lines.append(TEARDOWN_ABORT_HINT)
        if cause.get("role") == Role.SCHEDULER:
            stopped = f"stopped all {count} rank(s); " if count else ""
        else:
            others = sum(1 for r in summary["ranks"] if r["rank"] != cause.get("rank") and _ran_on(r, cause))
            stopped = f"stopped the other {others} rank(s); " if others else ""
        lines.append(f"{stopped}exit code {summary['exit_code']}{restarted}; summary {summary_path}")
    elif summary.get("stopped_by"):
        unfit = summary["stopped_by"].get("cause", {}).get("kind") == "unhealthy" and not count
        lines.append(f"stopped: {summary['stopped_by']['why']}; "
                     + ("no rank of this host started" if unfit else "stopped the MindSpore scheduler" if alone
                        else f"stopped this host's {count} rank(s)")
                     + f"; exit code {summary['exit_code']}{restarted}; summary {summary_path}")
    elif summary.get("launcher_error"):
        lines.append(f"{summary['launcher_error']}: stopped "
                     + ("the MindSpore scheduler" if alone else f"all {count} rank(s)")
                     + f"; exit code {summary['exit_code']}; summary {summary_path}")
    else:
        lines.append(f"interrupted by {summary['interrupted_by']}; stopped "
                     + ("the MindSpore scheduler" if alone else f"{count} rank(s)") + f"; summary {summary_path}")
    if summary.get("no_restart"):
        lines.insert(-1, f"restarts stopped: {summary['no_restart']}; exit code {summary['exit_code']}: do not "
                         f"requeue")
    if summary.get("newest_complete_checkpoint"):
        lines.append(f"newest complete checkpoint: {printable(summary['newest_complete_checkpoint'])} "
                     "(what --resume picks)")
    return lines


def job_verdict(summaries: Sequence[Mapping[str, Any]], head: Mapping[str, Any] | None = None,
                missing_hosts=()) -> dict:
    """The whole job, from the summaries of its hosts (and the head's, for ``cluster --ssh``).

    THE rule for a job of several hosts: the head, when there is one, has already judged across hosts (the
    earliest failure is the root cause; the others were stopped), so its verdict stands; so does the
    verdict hosts that talked agreed on (``execute/job``), which every host's summary carries. Otherwise,
    a job failed or was interrupted if any host says so, its exit code is the first host's non-zero code
    (host order), and a job whose reporting hosts all succeeded while others never reported is
    "incomplete". ``root_causes`` lists each failing host's once, never the same one twice.
    """
    if head is not None and head.get("status"):
        cause = head.get("root_cause")
        return {"status": head["status"], "exit_code": head.get("exit_code"), "root_causes": [cause] if cause else []}
    talked = next((s["job"] for s in summaries if isinstance(s.get("job"), dict) and s["job"].get("status")), None)
    if talked is not None:   # the hosts' own verdict (execute/job): every host wrote the same one
        cause = talked.get("root_cause")
        return {"status": talked["status"], "exit_code": talked.get("exit_code"),
                "root_causes": [cause] if cause else []}
    causes = [s["root_cause"] for s in summaries if s.get("root_cause")]
    statuses = [s.get("status") for s in summaries]
    status = next((st for st in ("failed", "interrupted") if st in statuses), "succeeded")
    if status == "succeeded" and missing_hosts:
        status = "incomplete"   # the hosts here succeeded, but the job's other hosts never reported
    exit_code = next((s.get("exit_code") for s in summaries if s.get("exit_code")), 0)
    return {"status": status, "exit_code": exit_code, "root_causes": causes}


def cluster_verdict(causes: list[dict], interrupted_by: int | None, host_exit_codes) -> dict:
    """A job whose hosts one head started together (``cluster --ssh``): THE rule across hosts.

    ``causes`` are each failing host's own root cause (a rank, with ``launcher_exit_code`` its host
    launcher's verdict, e.g. 124 for a hang) or the host itself (a lost connection, a launcher that
    failed). The root cause is the one that ended first: the others were stopped because of it. Then the
    exit code is its host launcher's (or its own); an interrupted job exits 128+N; otherwise the first
    host's non-zero code, or 0.
    """
    cause = min(causes, key=lambda c: c.get("end") or float("inf"), default=None)
    if cause is not None:
        return {"status": "failed", "exit_code": cause.get("launcher_exit_code") or cause.get("exit_code") or 1,
                "root_cause": cause}
    if interrupted_by is not None:
        return {"status": "interrupted", "exit_code": ExitCode.of_signal(interrupted_by), "root_cause": None}
    failed = [code for code in host_exit_codes if code not in (0, None)]
    return {"status": "failed" if failed else "succeeded", "exit_code": failed[0] if failed else 0,
            "root_cause": None}


def roster_line(roster: dict) -> str:
    """--spares: ``hosts: active a, b; standing by c; replaced d (by c: why)``."""
    def names(hosts) -> str:
        return ", ".join(hosts) if hosts else "none"

    replaced = [f"{host}" + (f" (by {move['by']}: {move.get('why', '')})" if move.get("by") else "")
                for host, move in (roster.get("replaced") or {}).items()]
    line = f"hosts: active {names(roster.get('active'))}; standing by {names(roster.get('standing_by'))}"
    if replaced:
        line += f"; replaced {'; '.join(replaced)}"
    excluded = roster.get("excluded") or {}
    if excluded:
        line += f"; excluded until their cooldown ends: {names(sorted(excluded))}"
    return line
