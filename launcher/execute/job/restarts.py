"""Restarting a job of several hosts from one step: the newest checkpoint every rank of every host has.

A host sees only its own ranks' checkpoints (run directories need not be shared), so each host reports
the steps complete on all of its ranks with its attempt's result, the coordinator keeps the steps every
host reported (``common_step``), and each host resumes its own ranks from their files of that step.
"""

from __future__ import annotations

import os

from launcher.checkpoint.resume import ResumePoint, Step, collect
from launcher.contract import CKPT_DIR
from launcher.plan.make import LaunchPlan

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from launcher.plan.share import TableSource


def steps_covering(dirs: dict[int, str]) -> list[Step]:
    """The steps every rank of ``dirs`` (rank -> checkpoint directory) has (its own file, or a replica's),
    files filled in, oldest first."""
    steps = []
    for step in collect(dirs):
        covered = step.covering(set(dirs))
        if covered is not None:
            step.files = covered
            steps.append(step)
    return steps


def _own_steps(plan: LaunchPlan) -> list[Step]:
    """This host's steps that every one of its ranks has."""
    return steps_covering({spec.rank: os.path.join(spec.rank_dir, CKPT_DIR) for spec in plan.ranks
                           if spec.rank is not None})


def complete_steps(plan: LaunchPlan) -> list[str]:
    """Labels of the steps every rank of this host has, oldest first."""
    return [step.label for step in _own_steps(plan)]


def common_step(reported: list[list[str]]) -> str | None:
    """The newest step in every host's list (the lists are oldest first), or None."""
    if not reported:
        return None
    others = [set(steps) for steps in reported[1:]]
    return next((label for label in reversed(reported[0]) if all(label in steps for steps in others)), None)


def spare_swap(running: list[int], results: dict[int, dict], lost: dict[int, str], connected: list[int],
               hosts: list[str], *, excluded: dict[int, float], master: int) -> dict | None:
    """--spares: after a failed attempt, each host of ``running`` (slot order) that was lost or found unfit
    (exit 92) swapped, in its slot, for a spare that is ``connected``, reported the attempt (its ``slots``: the
    steps it sees of each slot's ranks) and is past any cooldown in ``excluded``. Returns the new active list,
    who replaced whom, the steps every slot of the new job has (for ``common_step``) and the unfit hosts; None
    when nothing is to replace, too few spares stand by, or the master host (the coordinator's own) is unfit."""
    import time

    from launcher.contract import ExitCode
    from launcher.table.spares import replace_hosts

    unfit = [i for i in running if i in lost
             or results.get(i, {}).get("exit_code") in (ExitCode.UNHEALTHY, ExitCode.UNHEALTHY_RESCHEDULE)]
    if not unfit or master in unfit:
        return None
    now = time.time()
    candidates = [i for i in connected if i not in running and results.get(i, {}).get("exit_code") == 0
                  and excluded.get(i, 0.0) <= now]
    active = replace_hosts(running, unfit, candidates)
    if active is None:
        return None
    replaced, steps = {}, []
    for old, index in zip(running, active):
        if old == index:
            steps.append(results[index].get("steps") or [])
            continue
        steps.append((results[index].get("slots") or {}).get(str(old)) or [])
        replaced[hosts[old]] = {"by": hosts[index], "why": lost.get(old) or "its health gate found it unfit"}
    return {"active": active, "replaced": replaced, "steps": steps, "unfit": unfit}


def elastic_form(running: list[int], results: dict[int, dict], lost: dict[int, str], connected: list[int],
                 hosts: list[str], *, excluded: dict[int, float], master: int, least: int) -> dict | None:
    """--nnodes MIN:MAX after a failed attempt: the job formed again with every host that is ``connected``, not
    lost, not unfit (exit 92/192), past any cooldown, and reported the attempt (the ones standing by too: a
    restart takes up to MAX). ``spare_swap``'s answer, or None with fewer than ``least`` hosts or without the
    master. A job of the same hosts resumes from its newest common step; one that grew or shrank has no per-rank
    step to resume (its ranks are numbered anew): its script loads what it saved for any world size."""
    import time

    from launcher.contract import ExitCode

    unfit = [i for i in running if i in lost
             or results.get(i, {}).get("exit_code") in (ExitCode.UNHEALTHY, ExitCode.UNHEALTHY_RESCHEDULE)]
    now = time.time()
    active = [i for i in connected if i not in unfit and i in results and excluded.get(i, 0.0) <= now]
    if len(active) < least or master not in active:
        return None
    steps = [results[i].get("steps") or [] for i in active] if active == running else [[]]
    return {"active": active, "replaced": {}, "steps": steps, "unfit": unfit}


def host_resume_point(plan: LaunchPlan, label: str) -> ResumePoint | None:
    """This host's ranks' files of the step the job resumes from."""
    step = next((s for s in reversed(_own_steps(plan)) if s.label == label), None)
    if step is None:
        return None
    return ResumePoint(run_dir=plan.run_dir, label=step.label, epoch=step.epoch, step=step.step,
                       files=dict(step.files))


def reread_table(source: TableSource, current, server_index: int, environ):
    """Before a restart: the rank table ``source`` names if an operator rewrote it (a rescheduled pod), as
    (table, this host's server index, None); or (the current table, index, why it is kept) when it is
    unchanged, unreadable, invalid or a different job (another world size or number of servers)."""
    from launcher.errors import UsageError
    from launcher.plan.share import host_share
    from launcher.table.model import dumps

    try:
        share = host_share(source, environ)
    except UsageError as exc:
        return current, server_index, f"kept the rank table this job started with: {exc}"
    table = share.table
    if dumps(table) == dumps(current):
        return current, server_index, None
    if (table.device_count, len(table.servers)) != (current.device_count, len(current.servers)):
        return current, server_index, (f"kept the rank table this job started with: {source.path} now has "
                                       f"{table.device_count} ranks on {len(table.servers)} servers")
    return table, share.index, None


def next_table(source: TableSource, table, server_index: int, plan, rank_table_file: str, attempt: int,
               environ):
    """The table for the next attempt: the rewritten one (in its own file of the run directory), or the same."""
    from launcher.base.atomic import write_atomically
    from launcher.base.console import say
    from launcher.rundir.paths import attempt_file
    from launcher.table.model import dumps

    fresh, index, kept = reread_table(source, table, server_index, environ)
    if kept:
        say(kept)
    if fresh is table:
        return table, server_index, rank_table_file
    written = attempt_file(plan.run_dir, f"rank_table{plan.host_files_suffix}", "json", attempt)
    write_atomically(written, lambda fh: fh.write(dumps(fresh)))
    say(f"the rank table {source.path} was rewritten: restart {attempt} uses it ({written})")
    return fresh, index, written
