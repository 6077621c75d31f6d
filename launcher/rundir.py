"""Run directories: one new directory per run, nothing of an earlier run ever touched.

The seeds' scripts ``rm -rf device$i`` before each run; dlaunch instead gives
every run ``<output>/<run id>/`` and every global rank its own ``rank_NNN/``
inside it, created exclusively so that two launches can never share (and so
clobber) a rank's logs or checkpoints.  With ``--run-id`` several hosts may use
one run directory on a shared filesystem: each creates only its own ranks'
directories and writes only its own host-suffixed files.
"""

from __future__ import annotations

import glob
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from launcher import numlists
from launcher.contract import Role
from launcher.errors import DlaunchError, LaunchError, UsageError
from launcher.jsontext import readable_pieces
from launcher.userfiles import RUN_MARKERS, enclosing_run_dir, is_run_dir  # noqa: F401 (is_run_dir: this module's API)

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from typing import Protocol

    from launcher.rundir_model import HeadSummaryFile, PidsFile, PlanFile, RankEntryFile, SummaryFile

    class _RankLayout(Protocol):
        @property
        def rank_dir(self) -> str: ...

    class RunLayout(Protocol):
        """What ``create`` needs of a launch plan: names and its JSON, so this module needs no plan type."""

        @property
        def run_id(self) -> str: ...
        @property
        def run_dir(self) -> str: ...
        @property
        def output_dir(self) -> str: ...
        @property
        def rank_table_file(self) -> str: ...
        @property
        def ranks(self) -> Sequence[_RankLayout]: ...
        def host_file(self, name: str, ext: str) -> str: ...
        def to_dict(self) -> dict: ...


_RANK_DIR = re.compile(r"^rank_(\d+)$")   # rank_dir_name's names
RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
LATEST = "latest"   # the link to the newest run: a reserved name, never a run id
# The layout, version 2: <output>/<run id>/ holds plan[.<host>].json, rank_table[.<host>].json,
# pids[.<host>].json, summary[.<host>].json (and summary.head.json under --ssh), scheduler/ (MindSpore's),
# and rank_NNN/ per global rank with output[.K].log, env[.K].log, heartbeat and ckpt/. Version 1 (dlaunch
# 0.1) had the same files; its plans lack "layout", "peers" and "scheduler", which readers default.
LAYOUT_VERSION = 2
HEAD_SUMMARY = "summary.head.json"  # the head's summary of a cluster --ssh job


def attempt_name(stem: str, ext: str, attempt: int) -> str:
    """``output.log`` for the first attempt, ``output.1.log`` after the first restart: nothing overwritten."""
    return f"{stem}.{ext}" if attempt == 0 else f"{stem}.{attempt}.{ext}"


def attempt_file(directory: str, stem: str, ext: str, attempt: int) -> str:
    return os.path.join(directory, attempt_name(stem, ext, attempt))


def host_suffix(server_id: str) -> str:
    """What a host's own files in a shared run directory carry: ``plan.<server_id>.json``."""
    return "." + re.sub(r"[^A-Za-z0-9._-]", "_", str(server_id))


def rank_dir_name(rank: int, world_size: int) -> str:
    width = max(3, len(str(max(world_size - 1, 0))))
    return f"rank_{rank:0{width}d}"


def rank_dirs(run_dir: str) -> dict[int, str]:
    """Global rank -> its rank directory, for every rank directory in the run."""
    found: dict[int, str] = {}
    try:
        entries = os.scandir(run_dir)   # is_dir() from the listing itself: no stat per rank (1,024 at the end)
    except OSError:
        return found
    with entries:
        for entry in entries:
            match = _RANK_DIR.match(entry.name)
            if match and entry.is_dir():
                found[int(match[1])] = entry.path
    return found


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + os.urandom(2).hex()   # secrets.token_hex, without hmac and hashlib


def check_run_id(run_id: str) -> str:
    if not RUN_ID_PATTERN.match(run_id):
        raise UsageError(f"bad --run-id {run_id[:40]!r}: use letters, digits, '.', '_' and '-' (at most 128)")
    if run_id == LATEST:
        raise UsageError(f"--run-id {LATEST} is reserved: {LATEST} is the link to the newest run")
    return run_id


def write_json(path: str, data) -> None:
    """Write JSON atomically: readers (status, other hosts) never see half a file, a failure leaves none."""
    from launcher.atomic import write_atomically

    def write(fh) -> None:
        fh.writelines(readable_pieces(data, default=str))
        fh.write("\n")

    write_atomically(path, write, permissions=0o666)


def _make_dirs(path: str, made: list[str]) -> None:
    """``os.makedirs``, recording every level it creates (so a failed start can remove exactly those)."""
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for level in reversed(missing):
        try:
            os.mkdir(level)
            made.append(level)
        except FileExistsError:
            continue   # made by a launch beside this one: not ours to remove


def _remove(made: list[str]) -> None:
    """Undo a failed start: remove what it created, newest first (directories only if still empty)."""
    for path in reversed(made):
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                os.rmdir(path)
            else:
                os.unlink(path)
        except OSError:
            continue   # something else put a file there meanwhile: left, rather than lost


def create(plan: RunLayout, rank_table_text: str, shared: bool) -> None:
    """Create the run directory and this host's rank directories; refuse to reuse any rank directory.

    ``shared`` (an explicit --run-id) allows the run directory to exist already, as it does
    when several hosts of one job write into one shared filesystem.  If anything cannot be created
    (a full disk), everything this call made is removed again and nothing starts.
    """
    made: list[str] = []
    writing = plan.output_dir   # what is being made, for the message if it fails
    outer = enclosing_run_dir(os.path.join(os.path.realpath(plan.output_dir), RUN_MARKERS[0]))
    if outer is not None:
        raise UsageError(f"the output directory {plan.output_dir} is inside the run directory {outer}: a run "
                         f"inside another would be removed with it (prune, a copy); choose a directory outside it")
    try:
        _make_dirs(plan.output_dir, made)
        writing = plan.run_dir
        try:
            os.mkdir(plan.run_dir)
            made.append(plan.run_dir)
        except FileExistsError:
            if not shared:
                raise UsageError(f"run directory {plan.run_dir} already exists") from None
        # a run directory this call made is empty: only one that existed can hold an earlier launch's ranks
        taken = [spec.rank_dir for spec in plan.ranks if os.path.lexists(spec.rank_dir)] \
            if plan.run_dir not in made else []
        if taken:
            raise UsageError(f"run {plan.run_id} already has {os.path.basename(taken[0])} in {plan.run_dir} "
                             f"from an earlier launch; nothing was changed: choose another --run-id")
        for spec in plan.ranks:
            writing = spec.rank_dir
            try:
                os.mkdir(spec.rank_dir)
            except FileExistsError as exc:
                raise UsageError(f"{exc.filename} appeared while dlaunch was creating it (another launch with "
                                 f"run id {plan.run_id}?); nothing was changed") from None
            made.append(spec.rank_dir)
        writing = plan.rank_table_file
        with open(plan.rank_table_file, "x", encoding="utf-8") as fh:
            made.append(plan.rank_table_file)
            fh.write(rank_table_text)
        writing = plan_file = plan.host_file("plan", "json")
        write_json(plan_file, {"layout": LAYOUT_VERSION, **plan.to_dict()})
        made.append(plan_file)
    except DlaunchError:
        _remove(made)
        raise
    except OSError as exc:
        _remove(made)
        raise LaunchError(f"cannot create run {plan.run_id}: cannot write {exc.filename or writing}: "
                          f"{exc.strerror}; nothing was started") from None
    point_latest(plan.output_dir, plan.run_id)


def describe_os_error(exc: OSError) -> str:
    """``FILE: No space left on device``, naming the file when the error knows it."""
    return f"{exc.filename}: {exc.strerror}" if exc.filename else (exc.strerror or str(exc))


def point_latest(output_dir: str, run_id: str) -> None:
    """Make ``<output>/latest`` name the newest run, replacing only dlaunch's own link, atomically.

    Anything else of that name (a directory, a file) is left alone with a warning: it is not ours to replace.
    """
    link = os.path.join(output_dir, LATEST)
    if os.path.lexists(link) and not os.path.islink(link):
        from launcher.console import say

        say(f"warning: {link} is not dlaunch's link to the newest run; left as it is")
        return
    tmp = f"{link}.tmp.{os.getpid()}"
    try:
        os.symlink(run_id, tmp)
        os.replace(tmp, link)
    except OSError:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def resolve(path: str) -> str:
    """A run directory from a path that may be an output directory (uses its ``latest`` link, never a
    directory or file that only has the name)."""
    latest = os.path.join(path, LATEST)
    return os.path.realpath(latest) if os.path.islink(latest) and os.path.isdir(latest) else os.path.realpath(path)


# ---------------------------------------------------------------- reading a run back
# What status, logs, report and ckpt read: plan*.json (the ranks, hosts, devices, rank directories; one file
# per host when hosts share the directory), pids*.json (the live pids each launcher publishes),
# summary*.json (how each rank ended), rank_NNN/output.log and output.K.log (each attempt's output).

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
    """A run as its files say, every value checked by ``rundir_model`` (the files' TypedDicts)."""

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
    # host suffix -> rank -> its summary entry, made on first use (a rank looked up in a list per rank
    # made `status` of 1,024 ranks quadratic)
    _entries: dict[str, dict] = field(default_factory=dict, repr=False, compare=False)

    @property
    def layout(self) -> int:
        """The layout version its plans were written with (1: before versions were recorded)."""
        return max((int(plan.get("layout", 1)) for plan in self.plans.values()), default=LAYOUT_VERSION)

    @property
    def finished(self) -> bool:
        """Every host whose plan is here has written its summary."""
        return bool(self.plans) and all(suffix in self.summaries for suffix in self.plans)


def _suffix(path: str, stem: str) -> str:
    name = os.path.basename(path)
    return name[len(stem):-len(".json")]


def _host_files(run_dir: str, stem: str, model, problems: list[str], unread: set[str] | None = None) -> dict:
    """Suffix -> checked contents of every ``{stem}*.json``; what could not be read is told in ``problems``
    (and its suffix added to ``unread``)."""
    from launcher.rundir_model import load

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

    from launcher.rundir_model import HeadSummaryFile, PidsFile, PlanFile, SummaryFile, load

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
    for suffix, plan in sorted(plans.items()):
        run.run_id = plan.get("run_id", run.run_id)
        run.world_size = max(run.world_size, plan.get("world_size", 0))
        for spec in plan.get("ranks", []):
            _add_rank(run, seen, suffix, spec, spec.get("server_id", plan.get("server_id", "")), spec.get("rank_dir"))
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
    from launcher.rundir_model import MAX_WORLD

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
    if unknown:
        raise UsageError(f"run {run.run_id} has no rank {unknown[0]} (its ranks: "
                         f"{numlists.format_ranges(sorted(known)) or 'none yet'})")
    return [ref for ref in run.ranks if ref.rank in chosen]
