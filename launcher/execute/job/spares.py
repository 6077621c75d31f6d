"""A host of a job with spares (``cluster --spares K``): its plan as the job's active hosts stand, its wait
while it stands by, and what it tells the job when the job stops.

The coordinator (``coordinator.py``, ``restarts.spare_swap``) decides who runs; each host only follows: the
``table.spares.Roster`` it holds moves with every verdict, and its plan is made from the job's table the
roster gives (ranks in its slot) or, standing by, a plan with no rank at all. A spare that takes a place needs
the replaced host's checkpoints: on storage both hosts see (the same --output-dir on a shared filesystem), the
steps it reports for each slot are the ones it can resume from.
"""

from __future__ import annotations

import os
import selectors
import time
from dataclasses import replace

from launcher.base.console import say
from launcher.errors import UsageError
from launcher.execute.results import AttemptResult

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from collections.abc import Mapping

    from launcher.checkpoint.resume import ResumePoint
    from launcher.execute.job.link import JobLink
    from launcher.execute.signals import SignalWatch
    from launcher.plan.make import LaunchPlan, Options
    from launcher.table.spares import Roster


def plan_for(roster: Roster, opts: Options, rank_table_file: str, environ: Mapping[str, str], *, attempt: int,
             resume: ResumePoint | None) -> LaunchPlan:
    """This host's plan: its slot's ranks in the job's table, or, standing by, none (its run directory, its
    host files and the job's link only)."""
    from launcher.plan.make import make_plan

    slot = roster.slot
    if slot is None:
        plan = make_plan(roster.pool, roster.own, opts, rank_table_file, dict(environ), attempt=attempt)
        return replace(plan, ranks=[], services=[], scheduler=None, standby=True, is_master=False, peers=[])
    return make_plan(roster.table(), slot, opts, rank_table_file, dict(environ), attempt=attempt, resume=resume)


def job_table_file(roster: Roster, plan: LaunchPlan, attempt: int) -> str:
    """The job's table after spares took places, checked by dlaunch's own rules and written in the run
    directory (``rank_table.<host>.attempt-N.json``): RANK_TABLE_FILE of the attempt's ranks."""
    from launcher.base.atomic import write_atomically
    from launcher.rundir.paths import attempt_file
    from launcher.table.model import dumps
    from launcher.table.rules import require_valid

    table = roster.table()
    require_valid(table, roster.profile, "the job's rank table with spares in it")
    written = attempt_file(plan.run_dir, f"rank_table{plan.host_files_suffix}", "json", attempt)
    write_atomically(written, lambda fh: fh.write(dumps(table)))
    return written


def record_plan(plan: LaunchPlan) -> None:
    """A host whose part changed (a spare that takes a place, a host now standing by): its rank directories
    made (on a shared run directory, the replaced host's are there already, checkpoints and all) and its
    ``plan.<host>.json`` written again, so that ``status`` and ``logs`` find its ranks."""
    from launcher.rundir.create import write_json
    from launcher.rundir.paths import LAYOUT_VERSION

    for spec in plan.ranks:
        os.makedirs(spec.rank_dir, exist_ok=True)
    write_json(plan.host_file("plan", "json"), {"layout": LAYOUT_VERSION, **plan.to_dict()})


def say_moves(verdict: dict, roster: Roster) -> None:
    """One line per host a spare replaced; with --nnodes MIN:MAX, the hosts the job runs on now."""
    for host, move in (verdict.get("replaced") or {}).items():
        say(f"spare host {move['by']} takes host {host}'s place: {move['why']}")
    if roster.min_nodes:
        hosts = ", ".join(roster.name(i) for i in roster.active)
        part = "this host stands by" if roster.slot is None else f"this host is node {roster.slot} of them"
        say(f"the job runs on {len(roster.active)} host(s) (--nnodes {roster.min_nodes}:{len(roster.pool.servers)}): "
            f"{hosts}; {part}")


def refusal_error(refused: dict, host: str) -> UsageError:
    """The job's coordinator refused this host as it joined (``JobLink.refusal``): said before anything of it
    started; a host replaced by a spare learns until when (in local time) it is kept out."""
    until = refused.get("excluded_until")
    if until is None:
        return UsageError(f"{refused['why']}; nothing was started")
    return UsageError(f"host {host} was replaced by a spare and is excluded from the job until "
                      f"{time.strftime('%H:%M:%S', time.localtime(until))} (--exclude-cooldown, "
                      f"{max(0.0, until - time.time()):.0f} s from now): start it again after that to stand by as "
                      f"a spare; nothing was started")


def stand_by(link: JobLink, signals: SignalWatch, plan: LaunchPlan, elastic: bool = False) -> AttemptResult:
    """A spare's attempt: no rank; it ends when the job stops (the spare then reports what it could take
    over), the job ends, the master host is lost, or dlaunch is signalled."""
    say(f"host {plan.server_id} stands by (attempt {plan.attempt}): " + (
        "the job formed without it; it joins when the job forms again at a restart (--nnodes MIN:MAX)" if elastic
        else "a spare, it takes the place of a host the job loses or finds unfit"))
    selector = selectors.DefaultSelector()
    selector.register(link.fd, selectors.EVENT_READ)
    selector.register(signals.fd, selectors.EVENT_READ)
    if signals.control_fd is not None:
        selector.register(signals.control_fd, selectors.EVENT_READ, "control")
    try:
        while not link.news():
            for key, _ in selector.select():
                if key.data == "control":
                    signals.received.extend(signals.read_control())
                    if signals.control_fd is None:
                        selector.unregister(key.fd)
            stops = [sig for sig in signals.drain() if sig not in signals.pass_through]
            if stops:
                return AttemptResult(attempt=plan.attempt, ranks=[], interrupted_by=stops[0])
    finally:
        selector.close()
    events = link.stop_events()   # the stop is this attempt's end: taken, so the next attempt does not see it
    lost = [event["cause"].get("host") for _, event in events if event["cause"].get("kind") == "lost"]
    return AttemptResult(attempt=plan.attempt, ranks=[], extra={"standby": True, "lost_hosts": lost})


def slot_steps(roster: Roster, run_dir: str) -> dict[str, list[str]]:
    """For each active host (by pool index): the steps this host sees complete on every rank of its slot."""
    from launcher.contract import CKPT_DIR
    from launcher.execute.job.restarts import steps_covering
    from launcher.rundir.paths import rank_dir_name

    table = roster.table()
    world = table.device_count
    seen = {}
    for index, server in zip(roster.active, table.servers):
        dirs = {p.rank: os.path.join(run_dir, rank_dir_name(p.rank, world), CKPT_DIR) for p in server.placed()}
        seen[str(index)] = [step.label for step in steps_covering(dirs)]
    return seen


def pull_from_buddies(link, roster: Roster, run_dir: str, lost: list[str], stop_fd: int | None = None) -> list[str]:
    """--memory-ckpt: a spare, before it reports what it can take over, fetches each lost host's ranks' newest
    persisted steps from that host's buddy (``job/buddy.py``) into its own rank checkpoint directories, where
    ``slot_steps`` finds them. Returns the files written; a buddy that cannot answer is said, not fatal (the job
    then resumes from what the spare sees otherwise). All of it within ``buddy.FETCH_SECONDS``; a stop signal
    (``stop_fd`` readable) ends it at once, with what was fetched."""
    from launcher.contract import CKPT_DIR
    from launcher.execute.job import buddy
    from launcher.rundir.paths import rank_dir_name

    table = roster.table()
    names = [roster.name(index) for index in roster.active]
    got: list[str] = []
    deadline = time.monotonic() + buddy.FETCH_SECONDS
    for index, server in zip(roster.active, table.servers):
        keeper = buddy.buddy_of(names, roster.name(index))
        if roster.name(index) not in lost or keeper is None or keeper in lost:
            continue
        fetched = []
        for placed in server.placed():
            into = os.path.join(run_dir, rank_dir_name(placed.rank, table.device_count), CKPT_DIR)
            try:
                fetched += buddy.pull(keeper, buddy.port_of(link.port), link.secret, roster.name(roster.own),
                                      placed.rank, into, deadline, stop_fd)
            except buddy.Interrupted:
                return got + fetched
            except (OSError, ConnectionError, ValueError) as exc:
                say(f"cannot fetch rank {placed.rank}'s newest step from host {keeper}, the buddy of lost host "
                    f"{roster.name(index)}: {exc}")
                if time.monotonic() >= deadline:
                    return got + fetched   # the others would fail alike
                continue
        got += fetched
        if fetched:
            say(f"fetched {len(fetched)} step file(s) of lost host {roster.name(index)}'s ranks from its buddy "
                f"{keeper}: {', '.join(sorted({os.path.basename(p) for p in fetched}))}")
    return got
