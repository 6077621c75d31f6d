"""Reading a run directory back: what status, logs, report, ckpt and prune see of a run.

plan*.json (the ranks, hosts, devices, rank directories; one file per host when hosts share the directory),
pids*.json (the live pids each launcher publishes), summary*.json (how each rank ended), rank_NNN/output.log and
output.K.log (each attempt's output), every JSON file read through the validated model (``rundir.model``).
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field

from launcher.base import numlists
from launcher.contract import Role
from launcher.errors import UsageError
from launcher.rundir.paths import HEAD_SUMMARY, LAYOUT_VERSION, attempt_file, resolve

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from launcher.rundir.model import HeadSummaryFile, PidsFile, PlanFile, RankEntryFile, SummaryFile


SCHEDULER_RANK = -1           # where the MindSpore scheduler sorts among ranks: first
_ATTEMPT_LOG = re.compile(r"^output(?:\.(\d+))?\.log$")


@dataclass(frozen=True)
class RankRef:
    """A rank as its host's plan names it."""

    rank: int            # SCHEDULER_RANK for MindSpore's scheduler (``role`` "scheduler"): shown first
    local_rank: int
    host: str
    device_id: int
    rank_dir: str
    suffix: str          # its host's file suffix: "" or ".<server_id>"
    role: Role = Role.RANK

    @property
    def label(self) -> str:
        return "scheduler" if self.role == Role.SCHEDULER else f"rank{self.rank}"

    @property
    def title(self) -> str:
        """How people read it: ``rank 3``, or ``scheduler`` (which has no rank number)."""
        return "scheduler" if self.role == Role.SCHEDULER else f"rank {self.rank}"


@dataclass
class Run:
    """A run as its files say, every value checked by ``rundir.model`` (the files' TypedDicts)."""

    run_dir: str
    run_id: str
    world_size: int
    ranks: list[RankRef] = field(default_factory=list)
    plans: dict[str, PlanFile] = field(default_factory=dict)        # host suffix -> plan
    summaries: dict[str, SummaryFile] = field(default_factory=dict)  # host suffix -> summary
    pids: dict[str, PidsFile] = field(default_factory=dict)          # host suffix -> pids file
    missing_hosts: list[dict] = field(default_factory=list)     # servers of the table with no plan here
    head: HeadSummaryFile | None = None                         # summary.head.json of a cluster --ssh job
    problems: list[str] = field(default_factory=list)           # one line per damaged file: what was ignored
    damaged: set[str] = field(default_factory=set)              # host suffixes whose plan could not be read
    replaced: set[str] = field(default_factory=set)   # --spares: hosts whose every rank a newer plan runs
    standby: set[str] = field(default_factory=set)    # --spares: hosts whose latest plan stands by
    # host suffix -> rank -> its summary entry, made on first use (a list searched per rank is quadratic)
    _entries: dict[str, dict] = field(default_factory=dict, repr=False, compare=False)

    @property
    def layout(self) -> int:
        """The layout version its plans were written with (1: before versions were recorded)."""
        return max((int(plan.get("layout", 1)) for plan in self.plans.values()), default=LAYOUT_VERSION)

    @property
    def finished(self) -> bool:
        """Every host whose plan is here has written its summary (but a host the job went on without: one a
        spare replaced, or that an elastic job formed again without, which may be gone for good)."""
        roster = next((summ["job"]["roster"] for _, summ in sorted(self.summaries.items())
                       if (summ.get("job") or {}).get("roster")), None)
        kept = set(roster.get("active", [])) | set(roster.get("standing_by", [])) if roster else None
        return bool(self.plans) and all(
            suffix in self.summaries for suffix, plan in self.plans.items()
            if suffix not in self.replaced and (kept is None or plan.get("server_id") in kept))

    def roster(self) -> dict | None:
        """--spares: the job's hosts as its verdict last said (any host's summary), else as the plans say."""
        for _, summ in sorted(self.summaries.items()):
            roster = (summ.get("job") or {}).get("roster")
            if roster:
                return dict(roster)
        if not self.replaced and not self.standby:
            return None
        host = {suffix: plan.get("server_id", suffix) for suffix, plan in self.plans.items()}
        return {"active": sorted(host[s] for s in self.plans if s not in self.replaced | self.standby),
                "standing_by": sorted(host[s] for s in self.standby),
                "replaced": {host[s]: {} for s in sorted(self.replaced)}}


def _suffix(path: str, stem: str) -> str:
    name = os.path.basename(path)
    return name[len(stem):-len(".json")]


def _host_files(run_dir: str, stem: str, model, problems: list[str], unread: set[str] | None = None) -> dict:
    """Suffix -> checked contents of every ``{stem}*.json``; what could not be read is told in ``problems``
    (and its suffix added to ``unread``)."""
    from launcher.rundir.model import load

    found = {}
    for path in sorted(glob.glob(os.path.join(glob.escape(run_dir), f"{stem}*.json"))):
        if os.path.basename(path) == HEAD_SUMMARY:
            continue   # the head's verdict over every host (Run.head), not one more host's summary
        data, problem = load(path, model, path)
        if problem:
            problems.append(problem)
        if data is not None:
            found[_suffix(path, stem)] = data
        elif unread is not None and os.path.lexists(path):
            unread.add(_suffix(path, stem))
    return found


def run_directory(path: str | None, output_dir: str) -> str:
    """RUN_DIR as given (a run, or an output directory with a ``latest`` link), else the latest run."""
    where = resolve(path if path else output_dir)
    if not os.path.isdir(where):
        raise UsageError(f"no run directory at {path or output_dir}"
                         + ("" if path else " (give RUN_DIR, or --output-dir)"))
    if not glob.glob(os.path.join(glob.escape(where), "plan*.json")) and \
            not glob.glob(os.path.join(glob.escape(where), "summary*.json")):
        raise UsageError(f"{where} is not a dlaunch run directory (it has no plan*.json)")
    return where


def load_run(run_dir: str) -> Run:
    """The run as its files say now: plans, summaries and pids files of every host, each checked."""
    from typing import cast

    from launcher.rundir.model import HeadSummaryFile, PidsFile, PlanFile, SummaryFile, load

    problems: list[str] = []
    damaged: set[str] = set()
    plans: dict[str, PlanFile] = _host_files(run_dir, "plan", PlanFile, problems, damaged)
    summaries: dict[str, SummaryFile] = _host_files(run_dir, "summary", SummaryFile, problems)
    run = Run(run_dir=run_dir, run_id=os.path.basename(run_dir), world_size=0, plans=plans, summaries=summaries,
              pids=_host_files(run_dir, "pids", PidsFile, problems), problems=problems, damaged=damaged)
    head_path = os.path.join(run_dir, HEAD_SUMMARY)
    head, problem = load(head_path, HeadSummaryFile, head_path)
    run.head = cast("HeadSummaryFile | None", head)
    problems += [problem] if problem else []
    seen: set[int] = set()
    # the newest attempt's plan first: a spare that took a host's place runs its ranks now (--spares)
    for suffix, plan in sorted(plans.items(), key=lambda item: (-item[1].get("attempt", 0), item[0])):
        run.run_id = plan.get("run_id", run.run_id)
        run.world_size = max(run.world_size, plan.get("world_size", 0)) if not plan.get("standby") else \
            run.world_size
        owned = len(seen)
        for spec in plan.get("ranks", []):
            _add_rank(run, seen, suffix, spec, spec.get("server_id", plan.get("server_id", "")), spec.get("rank_dir"))
        if plan.get("standby"):
            run.standby.add(suffix)
        elif plan.get("ranks") and len(seen) == owned and suffix not in summaries:
            run.replaced.add(suffix)
    for suffix, summ in summaries.items():  # a summary without its plan (copied runs): ranks from the summary
        if suffix in plans:
            continue
        run.world_size = max(run.world_size, summ.get("world_size", 0))
        for entry in summ.get("ranks", []):
            _add_rank(run, seen, suffix, entry, entry.get("host", ""), os.path.dirname(entry.get("log", "")))
    for suffix, plan in sorted(plans.items()):
        scheduler = plan.get("scheduler")
        if scheduler and scheduler.get("rank_dir"):
            run.ranks.append(RankRef(rank=SCHEDULER_RANK, local_rank=-1, host=scheduler.get("server_id", ""),
                                     device_id=-1, rank_dir=scheduler["rank_dir"], suffix=suffix, role=Role.SCHEDULER))
    run.ranks.sort(key=lambda ref: ref.rank)
    run.missing_hosts = _missing_hosts(run_dir, plans, set(plans) | set(summaries) | damaged, problems)
    if run.missing_hosts:
        run.world_size = max(run.world_size, len(run.ranks) + sum(h["count"] for h in run.missing_hosts))
    return run


def _add_rank(run: Run, seen: set[int], suffix: str, entry, host: str, rank_dir: str | None) -> None:
    """One rank of a plan or summary, unless it has no rank number (a plan's rank: no directory) or is
    already listed."""
    rank = entry.get("rank")
    if rank_dir is None or rank is None or rank in seen:
        return
    seen.add(rank)
    run.ranks.append(RankRef(rank=rank, local_rank=entry.get("local_rank") or 0, host=host,
                             device_id=_or(entry.get("device_id"), -1), rank_dir=rank_dir, suffix=suffix))


def _or(value, default):
    return default if value is None else value


def _missing_hosts(run_dir: str, plans: dict, reported, problems: list[str]) -> list[dict]:
    """Servers of the job that wrote neither a plan nor a summary into this run directory.

    Each host's plan lists the job's other servers (``peers``), so one host that reported is enough to
    name the ones that never did.
    """
    from launcher.rundir.model import MAX_WORLD

    missing: dict[str, dict] = {}
    total = 0
    for suffix, plan in sorted(plans.items()):
        for peer in plan.get("peers", []):
            where = peer.get("suffix")
            if where is None or where in reported or where in missing:
                continue
            if total > MAX_WORLD:   # more ranks than a job can have: the rest is not worth parsing
                problems.append(f"{os.path.join(run_dir, f'plan{suffix}.json')}: ignored peers past "
                                f"{MAX_WORLD + 1} ranks")
                return list(missing.values())
            ranks = peer.get("ranks", "")
            try:
                count = len(numlists.parse(ranks, "peer ranks")) if ranks else 0
            except UsageError as exc:
                problems.append(f"{os.path.join(run_dir, f'plan{suffix}.json')}: ignored peers: {exc}")
                ranks, count = "?", 0
            missing[where] = {"host": peer.get("server_id", ""), "count": count, "ranks": ranks}
            total += count
    return list(missing.values())


def log_attempts(rank_dir: str) -> list[int]:
    """Attempts that have an output log in ``rank_dir``, ascending (0 is ``output.log``)."""
    try:
        names = os.listdir(rank_dir)
    except OSError:
        return []
    found = []
    for name in names:
        match = _ATTEMPT_LOG.match(name)
        if match:
            found.append(int(match.group(1) or 0))
    return sorted(found)


def log_path(ref: RankRef, attempt: int) -> str:
    """``output.log`` for attempt 0, ``output.K.log`` after restart K."""
    return attempt_file(ref.rank_dir, "output", "log", attempt)


def current_attempt(ref: RankRef) -> int:
    attempts = log_attempts(ref.rank_dir)
    return attempts[-1] if attempts else 0


def summary_entry(run: Run, ref: RankRef) -> RankEntryFile | None:
    summ = run.summaries.get(ref.suffix)
    if summ is None:
        return None
    if ref.role == Role.SCHEDULER:
        return summ.get("scheduler", {})
    if ref.suffix not in run._entries:
        entries: dict = {}
        for entry in summ.get("ranks", []):
            entries.setdefault(entry.get("rank"), entry)   # the first, as a scan would find it
        run._entries[ref.suffix] = entries
    return run._entries[ref.suffix].get(ref.rank, {})   # {}: the host ended before starting this rank


def published_pids(run: Run, ref: RankRef):
    """What the launcher's pids file says of this rank (or of the scheduler)."""
    pids = run.pids.get(ref.suffix, {})
    return pids.get("scheduler") if ref.role == Role.SCHEDULER else pids.get("ranks", {}).get(str(ref.rank))


def select_ranks(run: Run, wanted: list[str] | None) -> list[RankRef]:
    """``--rank 0 --rank 3,5-7`` (or ``--rank scheduler``): the ranks named, in rank order; all when none are
    named."""
    if not wanted:
        return list(run.ranks)
    chosen: set[int] = set()
    for item in wanted:
        if item.strip().lower() in ("scheduler", "sched"):
            chosen.add(SCHEDULER_RANK)
            continue
        chosen.update(numlists.parse(item, "--rank"))
    if SCHEDULER_RANK in chosen and not any(ref.role == Role.SCHEDULER for ref in run.ranks):
        raise UsageError(f"run {run.run_id} has no MindSpore scheduler (it ran without --ms-scheduler)")
    known = {ref.rank for ref in run.ranks if ref.role == Role.RANK}
    unknown = sorted(chosen - known - {SCHEDULER_RANK})
    if unknown and not known and any(ref.role == Role.SCHEDULER for ref in run.ranks):
        raise UsageError(f"run {run.run_id} has no rank {unknown[0]}: it ran MindSpore's scheduler alone (an "
                         f"operator's scheduler pod): --rank scheduler")
    if unknown:
        raise UsageError(f"run {run.run_id} has no rank {unknown[0]} (its ranks: "
                         f"{numlists.format_ranges(sorted(known)) or 'none yet'})")
    return [ref for ref in run.ranks if ref.rank in chosen]
