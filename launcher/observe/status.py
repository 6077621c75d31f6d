"""What ``dlaunch status`` and ``dlaunch logs`` do: look at a run, live or finished, from any terminal.

Everything comes from the run directory, never from the launcher itself:

- ``plan*.json``: the ranks, their hosts, devices and rank directories (one file per host
  when hosts share the directory: ``plan.<server_id>.json``);
- ``pids*.json``: the live pids the launcher publishes, per host,
  ``{"launcher_pid": N, "ranks": {"<global rank>": {"pid": N, "start": epoch, "attempt": K}}}``;
- ``summary*.json``: how each rank ended, once its host's launcher is done;
- ``rank_NNN/output.log``, ``output.K.log``: each attempt's output.

Without a pids file (or for a pid that no longer is the rank), a rank's process is found
by its environment: the one process whose ``DLAUNCH_RANK_DIR`` is the rank's directory
and whose parent's is not.  psutil is imported inside the functions that need it.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field

from launcher import numlists
from launcher.argtypes import positive_seconds, whole
from launcher.console import printable, settle_streams
from launcher.results import how_it_ended
from launcher.errors import UsageError
from launcher.lines import LineBuffer, tail_offset

SCHEDULER_RANK = -1           # where the MindSpore scheduler sorts among ranks: first
FOLLOW_POLL_SECONDS = 0.1     # logs --follow: how often log sizes are checked
RESCAN_SECONDS = 1.0          # logs --follow: how often new attempts, ranks and the run's end are looked for
CPU_SAMPLE_SECONDS = 0.2      # status: the window of the first CPU % sample
READ_CHUNK = 1 << 20          # logs: bytes read at a time
_ATTEMPT_LOG = re.compile(r"^output(?:\.(\d+))?\.log$")


# --------------------------------------------------------------------------
# the run directory
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class RankRef:
    """A rank as its host's plan names it."""

    rank: int            # SCHEDULER_RANK for MindSpore's scheduler (``role`` "scheduler"): shown first
    local_rank: int
    host: str
    device_id: int
    rank_dir: str
    suffix: str          # its host's file suffix: "" or ".<server_id>"
    role: str = "rank"

    @property
    def label(self) -> str:
        return "scheduler" if self.role == "scheduler" else f"rank{self.rank}"


@dataclass
class Run:
    run_dir: str
    run_id: str
    world_size: int
    ranks: list[RankRef] = field(default_factory=list)
    plans: dict[str, dict] = field(default_factory=dict)       # host suffix -> plan
    summaries: dict[str, dict] = field(default_factory=dict)   # host suffix -> summary
    pids: dict[str, dict] = field(default_factory=dict)        # host suffix -> pids file
    missing_hosts: list[dict] = field(default_factory=list)     # servers of the table with no plan here

    @property
    def finished(self) -> bool:
        """Every host whose plan is here has written its summary."""
        return bool(self.plans) and all(suffix in self.summaries for suffix in self.plans)


def _read_json(path: str):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None   # gone, or being replaced (writers rename atomically, but not every writer does)


def _suffix(path: str, stem: str) -> str:
    name = os.path.basename(path)
    return name[len(stem):-len(".json")]


def _host_files(run_dir: str, stem: str) -> dict[str, dict]:
    found = {}
    for path in sorted(glob.glob(os.path.join(glob.escape(run_dir), f"{stem}*.json"))):
        data = _read_json(path)
        if isinstance(data, dict):
            found[_suffix(path, stem)] = data
    return found


def run_directory(path: str | None, output_dir: str) -> str:
    """RUN_DIR as given (a run, or an output directory with a ``latest`` link), else the latest run."""
    from launcher.rundir import resolve

    where = resolve(path if path else output_dir)
    if not os.path.isdir(where):
        raise UsageError(f"no run directory at {path or output_dir}"
                         + ("" if path else " (give RUN_DIR, or --output-dir)"))
    if not glob.glob(os.path.join(glob.escape(where), "plan*.json")) and \
            not glob.glob(os.path.join(glob.escape(where), "summary*.json")):
        raise UsageError(f"{where} is not a dlaunch run directory (it has no plan*.json)")
    return where


def load_run(run_dir: str) -> Run:
    """The run as its files say now: plans, summaries and pids files of every host."""
    plans = _host_files(run_dir, "plan")
    summaries = _host_files(run_dir, "summary")
    run = Run(run_dir=run_dir, run_id=os.path.basename(run_dir), world_size=0, plans=plans, summaries=summaries,
              pids=_host_files(run_dir, "pids"))
    seen = set()
    for suffix, plan in sorted(plans.items()):
        run.run_id = plan.get("run_id", run.run_id)
        run.world_size = max(run.world_size, int(plan.get("world_size") or 0))
        for spec in plan.get("ranks", []):
            if spec["rank"] in seen:
                continue
            seen.add(spec["rank"])
            run.ranks.append(RankRef(rank=int(spec["rank"]), local_rank=int(spec.get("local_rank", 0)),
                                     host=str(spec.get("server_id", plan.get("server_id", ""))),
                                     device_id=int(spec.get("device_id", -1)), rank_dir=spec["rank_dir"],
                                     suffix=suffix))
    for suffix, summ in summaries.items():  # a summary without its plan (copied runs): ranks from the summary
        if suffix in plans:
            continue
        run.world_size = max(run.world_size, int(summ.get("world_size") or 0))
        for entry in summ.get("ranks", []):
            if entry["rank"] not in seen:
                seen.add(entry["rank"])
                run.ranks.append(RankRef(rank=int(entry["rank"]), local_rank=int(entry.get("local_rank", 0)),
                                         host=str(entry.get("host", "")), device_id=int(entry.get("device_id", -1)),
                                         rank_dir=os.path.dirname(entry.get("log") or ""), suffix=suffix))
    for suffix, plan in sorted(plans.items()):
        scheduler = plan.get("scheduler")
        if isinstance(scheduler, dict) and scheduler.get("rank_dir"):
            run.ranks.append(RankRef(rank=SCHEDULER_RANK, local_rank=-1, host=str(scheduler.get("server_id", "")),
                                     device_id=-1, rank_dir=scheduler["rank_dir"], suffix=suffix, role="scheduler"))
    run.ranks.sort(key=lambda ref: ref.rank)
    run.missing_hosts = _missing_hosts(run_dir, plans, summaries)
    if run.missing_hosts:
        run.world_size = max(run.world_size, len(run.ranks) + sum(h["count"] for h in run.missing_hosts))
    return run


def _missing_hosts(run_dir: str, plans: dict, summaries: dict) -> list[dict]:
    """Servers of the job's rank table that wrote neither a plan nor a summary into this run directory."""
    from launcher.plan import host_suffix
    from launcher.table.model import RankTableError, loads

    if "" in plans or "" in summaries:
        return []   # a one-host run: its table has no other server
    for path in sorted(glob.glob(os.path.join(glob.escape(run_dir), "rank_table*.json"))):
        try:
            with open(path, encoding="utf-8") as fh:
                table = loads(fh.read())
        except (OSError, UnicodeDecodeError, RankTableError):
            continue
        seen = set(plans) | set(summaries)
        return [{"host": str(server.server_id), "count": len(server.devices),
                 "ranks": numlists.format_ranges(d.rank for d in server.devices if d.rank is not None)}
                for server in table.servers if host_suffix(server.server_id) not in seen]
    return []


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
    """``output.log`` for attempt 0, ``output.K.log`` after restart K (plan.attempt_file's names)."""
    return os.path.join(ref.rank_dir, "output.log" if attempt == 0 else f"output.{attempt}.log")


def current_attempt(ref: RankRef) -> int:
    attempts = log_attempts(ref.rank_dir)
    return attempts[-1] if attempts else 0


def _summary_entry(run: Run, ref: RankRef) -> dict | None:
    summ = run.summaries.get(ref.suffix)
    if summ is None:
        return None
    if ref.role == "scheduler":
        return summ.get("scheduler") or {}
    for entry in summ.get("ranks", []):
        if entry.get("rank") == ref.rank:
            return entry
    return {}   # the host finished without starting this rank (an earlier rank failed to spawn)


def _published(run: Run, ref: RankRef):
    """What the launcher's pids file says of this rank (or of the scheduler)."""
    pids = run.pids.get(ref.suffix) or {}
    return pids.get("scheduler") if ref.role == "scheduler" else pids.get("ranks", {}).get(str(ref.rank))


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
    if SCHEDULER_RANK in chosen and not any(ref.role == "scheduler" for ref in run.ranks):
        raise UsageError(f"run {run.run_id} has no MindSpore scheduler (it ran without --ms-scheduler)")
    known = {ref.rank for ref in run.ranks if ref.role == "rank"}
    unknown = sorted(chosen - known - {SCHEDULER_RANK})
    if unknown:
        raise UsageError(f"run {run.run_id} has no rank {unknown[0]} (its ranks: "
                         f"{numlists.format_ranges(sorted(known)) or 'none yet'})")
    return [ref for ref in run.ranks if ref.rank in chosen]


# --------------------------------------------------------------------------
# live processes
# --------------------------------------------------------------------------


def _local_names() -> set[str]:
    import socket

    import psutil

    hostname = socket.gethostname()  # no getfqdn(): a DNS lookup can hang where there is no network
    names = {"localhost", "::1", hostname, hostname.split(".")[0]}
    for addrs in psutil.net_if_addrs().values():
        names.update(addr.address.split("%")[0] for addr in addrs)
    return names


def _is_local(host: str, names: set[str]) -> bool:
    return host in names or host.startswith("127.") or not host


class Observer:
    """Looks at a run's ranks: keeps psutil objects between looks, so CPU % spans the refresh interval."""

    def __init__(self, run_dir: str, hang_after: float | None = None):
        self.run_dir = run_dir
        self.hang_after = hang_after
        self._procs: dict[int, object] = {}        # pid -> psutil.Process
        self._primed: set = set()                  # processes whose CPU % has a start
        self._launchers: set[int] = set()          # launcher pids seen (pids files, parents of ranks)
        self._local: set[str] | None = None

    # -- finding ranks -----------------------------------------------------

    def _process(self, pid: int):
        import psutil

        proc = self._procs.get(pid)
        if proc is None or not proc.is_running():
            proc = psutil.Process(pid)
            self._procs[pid] = proc
        return proc

    def _is_rank(self, pid: int, ref: RankRef, start: float | None):
        """The process ``pid`` if it is ``ref``'s rank: its environment names the rank's directory."""
        import psutil

        try:
            proc = self._process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            try:
                return proc if proc.environ().get("DLAUNCH_RANK_DIR") == ref.rank_dir else None
            except psutil.AccessDenied:  # another user's job: trust the pid when it started when the rank did
                return proc if start is not None and abs(proc.create_time() - start) < 5 else None
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            return None

    def _scan(self, wanted: dict[str, RankRef]) -> dict[int, object]:
        """Rank -> leader process, for ranks whose DLAUNCH_RANK_DIR is in ``wanted``: one pass over /proc."""
        import psutil

        matched: dict[str, list] = {}
        for proc in psutil.process_iter():
            try:
                rank_dir = proc.environ().get("DLAUNCH_RANK_DIR")
                if rank_dir in wanted and proc.status() != psutil.STATUS_ZOMBIE:
                    matched.setdefault(rank_dir, []).append(proc)
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                continue
        leaders = {}
        for rank_dir, procs in matched.items():
            pids = {p.pid for p in procs}
            try:
                tops = [p for p in procs if p.ppid() not in pids]
                leader = min(tops or procs, key=lambda p: p.create_time())
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
            self._procs.setdefault(leader.pid, leader)
            leaders[wanted[rank_dir].rank] = self._procs[leader.pid]
        return leaders

    def find_ranks(self, run: Run, refs: list[RankRef]) -> dict[int, object]:
        """Rank -> its live leader process here, for the ranks of hosts without a summary yet.

        The pids file's pid when its environment proves it is the rank, else one pass over every
        process (a rank whose pids entry is not written yet, or whose launcher never writes one).
        """
        import psutil

        found: dict[int, object] = {}
        missing: dict[str, RankRef] = {}
        for ref in refs:
            if ref.suffix in run.summaries:
                continue
            entry = _published(run, ref)
            proc = None
            if isinstance(entry, dict) and entry.get("pid"):
                proc = self._is_rank(int(entry["pid"]), ref, entry.get("start"))
            if proc is not None:
                found[ref.rank] = proc
            else:
                missing[ref.rank_dir] = ref
        if missing:
            found.update(self._scan(missing))
        for suffix, pids in run.pids.items():
            if suffix not in run.summaries and pids.get("launcher_pid"):
                self._launchers.add(int(pids["launcher_pid"]))
        for proc in found.values():
            try:
                parent = proc.ppid()
            except psutil.Error:
                continue
            if parent > 1:  # 1 (or a subreaper's pid): an orphan, its launcher already gone
                self._launchers.add(parent)
        return found

    def local(self, host: str) -> bool:
        if self._local is None:
            self._local = _local_names()
        return _is_local(host, self._local)

    def launcher_alive(self) -> bool | None:
        """Whether a launcher of this run still lives here; None when none is known."""
        import psutil

        if not self._launchers:
            return None
        for pid in self._launchers:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    return True
            except psutil.Error:
                continue
        return False

    # -- measuring ---------------------------------------------------------

    def _tree(self, leader) -> list:
        import psutil

        procs = [leader]
        try:
            for child in leader.children(recursive=True):
                procs.append(self._procs.setdefault(child.pid, child))
        except psutil.Error:
            pass
        return procs

    def _usage(self, trees: dict[int, list]) -> dict[int, tuple[float | None, int | None]]:
        """Rank -> (CPU % of its process tree, resident bytes); new processes get one shared short sample."""
        import psutil

        fresh = [p for procs in trees.values() for p in procs if p not in self._primed]
        for proc in fresh:
            try:
                proc.cpu_percent(None)
                self._primed.add(proc)
            except psutil.Error:
                pass
        if fresh:
            time.sleep(CPU_SAMPLE_SECONDS)
        usage = {}
        for rank, procs in trees.items():
            cpu, rss, any_alive = 0.0, 0, False
            for proc in procs:
                try:
                    cpu += proc.cpu_percent(None)
                    rss += proc.memory_info().rss
                    any_alive = True
                except psutil.Error:
                    continue
            usage[rank] = (round(cpu, 1), rss) if any_alive else (None, None)
        return usage

    def snapshot(self, ranks: list[str] | None = None) -> dict:
        """The run now, as ``status --json`` prints it."""
        run = load_run(self.run_dir)
        refs = select_ranks(run, ranks)
        live = self.find_ranks(run, refs)
        usage = self._usage({rank: self._tree(proc) for rank, proc in live.items()})
        now = time.time()
        rows = [self._row(run, ref, live.get(ref.rank), usage.get(ref.rank, (None, None)), now) for ref in refs]
        self._procs = {pid: p for pid, p in self._procs.items() if _alive(p)}
        self._primed = {p for p in self._primed if _alive(p)}
        return {"run_id": run.run_id, "run_dir": run.run_dir, "time": now, **self._overall(run, refs, rows),
                "hosts": sorted({ref.host for ref in run.ranks}), "world_size": run.world_size, "ranks": rows,
                "missing_hosts": run.missing_hosts}

    def _row(self, run: Run, ref: RankRef, proc, usage, now: float) -> dict:
        entry = _summary_entry(run, ref)
        attempt = current_attempt(ref)
        log = log_path(ref, attempt)
        try:
            idle = round(now - os.stat(log).st_mtime, 1)
        except OSError:
            idle = None
        row = {"rank": ref.rank, "role": ref.role, "local_rank": ref.local_rank, "host": ref.host,
               "device_id": ref.device_id,
               "attempt": attempt, "pid": None, "state": "", "alive": proc is not None, "exit_code": None,
               "signal": None, "cpu_percent": usage[0], "rss_bytes": usage[1], "idle_seconds": idle,
               "last_line": _last_line(log), "log": log}
        if entry is not None:
            row.update(pid=entry.get("pid"), exit_code=entry.get("exit_code"), signal=entry.get("signal"))
            cause = run.summaries[ref.suffix].get("root_cause") or {}
            if entry.get("hung") or (cause.get("rank") == ref.rank and cause.get("hung")):
                row.update(state="hung", hung_reason=entry.get("reason") or cause.get("reason"))
            elif entry.get("signal"):
                row["state"] = f"died of {entry['signal']}"
            elif entry.get("exit_code") is not None:
                row["state"] = f"exited {entry['exit_code']}"
            elif entry.get("spawn_error"):
                row["state"] = "failed to start"
            else:
                row["state"] = "not started"
        elif proc is not None:
            row.update(pid=proc.pid, state="running")
            if self.hang_after is not None and idle is not None and idle > self.hang_after:
                row.update(state="hung", hung_reason=f"no output for {idle:.0f} s (--hang-after {self.hang_after:g})")
        else:
            published = _published(run, ref)
            row["pid"] = published.get("pid") if isinstance(published, dict) else None
            if not self.local(ref.host):
                row["state"] = "remote"
            elif idle is None:
                row["state"] = "starting"
            else:
                row["state"] = "ended"
        return row

    def _overall(self, run: Run, refs: list[RankRef], rows: list[dict]) -> dict:
        """The run's state: its summaries' when all are in; else running or starting, or over without one."""
        causes = [s["root_cause"] for _, s in sorted(run.summaries.items()) if s.get("root_cause")]
        if run.finished:
            statuses = [s.get("status") for s in run.summaries.values()]
            status = next((st for st in ("failed", "interrupted") if st in statuses), "succeeded")
            if status == "succeeded" and run.missing_hosts:
                status = "incomplete"   # the hosts here succeeded, but the job's other hosts never reported
            codes = [s.get("exit_code") or 0 for _, s in sorted(run.summaries.items())]
            return {"status": status, "finished": True, "exit_code": next((c for c in codes if c), 0),
                    "root_causes": causes}
        waiting = [row for ref, row in zip(refs, rows) if ref.suffix not in run.summaries]
        launcher = self.launcher_alive()
        over = (bool(waiting) and not any(row["alive"] or row["state"] == "remote" for row in waiting)
                and (launcher is False or (launcher is None and all(row["state"] == "ended" for row in waiting))))
        if over:
            return {"status": "ended without a summary (launcher gone)", "finished": True, "exit_code": None,
                    "root_causes": causes}
        started = any(row["state"] != "starting" for row in rows)
        return {"status": "running" if started else "starting", "finished": False, "exit_code": None,
                "root_causes": causes}

    def over(self) -> bool:
        """Whether the run will write no more (what ``logs --follow`` waits for): cheaper than a snapshot."""
        run = load_run(self.run_dir)
        if run.finished:
            return True
        live = self.find_ranks(run, run.ranks)
        now = time.time()
        rows = [self._row(run, ref, live.get(ref.rank), (None, None), now) for ref in run.ranks]
        return self._overall(run, run.ranks, rows)["finished"]


def _alive(proc) -> bool:
    try:
        return proc.is_running()
    except Exception:  # noqa: BLE001 - psutil not wanting to say: forget it
        return False


def _last_line(path: str) -> str:
    from launcher.lines import tail_lines

    lines = tail_lines(path, 1, max_bytes=4096)
    if not lines:
        return ""
    return lines[-1].split("\r")[-1] if lines[-1].strip("\r") else lines[-1]


# --------------------------------------------------------------------------
# dlaunch status
# --------------------------------------------------------------------------


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 60:
        return f"{value:.1f}s" if value < 10 else f"{value:.0f}s"
    if value < 3600:
        return f"{int(value // 60)}m{int(value % 60):02d}s"
    return f"{int(value // 3600)}h{int(value % 3600 // 60):02d}m"


def _bytes(value: int | None) -> str:
    if value is None:
        return "-"
    for unit in ("B", "K", "M", "G"):
        if value < 1024 or unit == "G":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return "-"


def _headline(snap: dict) -> list[str]:
    count = sum(1 for row in snap["ranks"] if row.get("role", "rank") == "rank")
    hosts = len(snap["hosts"])
    line = f"run {snap['run_id']} ({snap['run_dir']}): {snap['status']}"
    if snap["finished"] and snap["exit_code"] is not None:
        line += f", exit code {snap['exit_code']}"
    missing = snap.get("missing_hosts") or []
    if missing:
        total = count + sum(h["count"] for h in missing)
        line += f"; {count} of {total} rank(s) on {hosts} of {hosts + len(missing)} host(s)"
    else:
        line += f"; {count} rank(s) on {hosts} host(s)"
    lines = [line]
    if missing:
        names = ", ".join(f"{h['host']} (ranks {h['ranks']})" for h in missing)
        lines.append(f"never reported: {names}: no plan or summary of theirs in this run directory")
    for cause in snap["root_causes"]:
        where = f"rank {cause.get('rank')} (host {cause.get('host')}, device {cause.get('device_id')})"
        if cause.get("hung"):
            lines.append(f"root cause (host {cause.get('host')}, device {cause.get('device_id')}): "
                         + (cause.get("reason") or f"rank {cause.get('rank')} hung"))
            if cause.get("stack_file"):
                lines.append(f"stacks: {cause['stack_file']}")
            continue
        how = how_it_ended(cause)
        lines.append(f"root cause: {where} {how}")
    return lines


def format_status(snap: dict, width: int | None = 120) -> str:
    """The status table; the last column is cut at ``width`` (the terminal's), or not at all when None."""
    header = ["RANK", "HOST", "DEV", "PID", "STATE", "CPU%", "RSS", "IDLE", "LAST LINE"]
    table = []
    for row in snap["ranks"]:
        state = row["state"] + (f" (attempt {row['attempt']})" if row["attempt"] else "")
        scheduler = row.get("role") == "scheduler"
        table.append(["sched" if scheduler else str(row["rank"]), row["host"], "-" if scheduler else str(row["device_id"]),
                      str(row["pid"]) if row["pid"] else "-", state,
                      "-" if row["cpu_percent"] is None else f"{row['cpu_percent']:.0f}",
                      _bytes(row["rss_bytes"]), _seconds(row["idle_seconds"]), row["last_line"]])
    widths = [max([len(header[i])] + [len(r[i]) for r in table]) for i in range(len(header) - 1)]
    right = {0, 2, 3, 5, 6, 7}

    def line(cells):
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))]
        text = "  ".join(parts) + "  "
        whole = text + cells[-1]
        return (whole if width is None else whole[:max(width, len(text) + 10)]).rstrip()

    return "\n".join(printable(text) for text in _headline(snap) + [line(header)] + [line(r) for r in table])


def cmd_status(args) -> int:
    import shutil

    run_dir = run_directory(args.run_dir, args.output_dir)
    observer = Observer(run_dir, hang_after=args.hang_after)
    out = sys.stdout
    try:
        while True:
            snap = observer.snapshot(args.rank)
            if args.json:
                text = json.dumps(snap, indent=None if args.watch else 2, default=str)
                out.write(text + "\n")
            else:
                terminal = out.isatty()
                text = format_status(snap, shutil.get_terminal_size((120, 40)).columns if terminal else None)
                if args.watch and not terminal:   # a file or pipe gets plain snapshots, no escape codes
                    text = f"{time.strftime('%H:%M:%S')}\n{text}\n" + ("run finished\n" if snap["finished"] else "")
                elif args.watch:  # home, each line cleared to its end, then the rest of the screen
                    stamp = time.strftime("%H:%M:%S")
                    text = ("\x1b[H" + "\x1b[K\n".join([f"{stamp}  every {args.interval:g} s, Ctrl-C to stop",
                                                        *text.split("\n")]) + "\x1b[K\n\x1b[J")
                    if snap["finished"]:
                        text += "run finished\n"
                out.write(text if args.watch else text + "\n")
            out.flush()
            if not args.watch or snap["finished"]:
                return 0
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0


# --------------------------------------------------------------------------
# dlaunch logs
# --------------------------------------------------------------------------


class _Tail:
    """One log file being read: where we are, and a line not yet ended."""

    def __init__(self, ref: RankRef, attempt: int, offset: int = 0):
        self.ref, self.attempt, self.offset = ref, attempt, offset
        self.path = log_path(ref, attempt)
        self.buffer = LineBuffer(READ_CHUNK)   # a "line" without end (a progress bar): shown in pieces
        self.prefix = f"[{ref.label}]: ".encode()

    def read(self, out, final: bool = False) -> bool:
        """Write the whole lines appended since the last read; ``final`` also writes an unended last line."""
        try:
            size = os.stat(self.path).st_size
        except OSError:
            return False
        wrote = False
        if size > self.offset:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                while self.offset < size:  # in bounded chunks: logs can be gigabytes
                    chunk = fh.read(min(READ_CHUNK, size - self.offset))
                    if not chunk:
                        break
                    self.offset += len(chunk)
                    wrote = self._write(out, self.buffer.feed(chunk)) or wrote
        if final:
            wrote = self._write(out, self.buffer.flush()) or wrote
        return wrote

    def _write(self, out, lines: bytes) -> bool:
        """Write whole ``lines``, each prefixed."""
        if not lines:
            return False
        body = lines.removesuffix(b"\n")
        out.write(self.prefix + body.replace(b"\n", b"\n" + self.prefix) + b"\n")
        return True


def _parse_attempt(text: str):
    if text == "all":
        return "all"
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"bad --attempt {text!r}: a number (0 is the first) or all") from None
    if value < 0:
        raise UsageError("--attempt cannot be negative")
    return value


def cmd_logs(args) -> int:
    try:
        return _logs(args)
    except KeyboardInterrupt:  # Ctrl-C is how one leaves --follow: not an error
        settle_streams()
        return 0


def _logs(args) -> int:
    run_dir = run_directory(args.run_dir, args.output_dir)
    attempt = _parse_attempt(args.attempt) if args.attempt is not None else None
    run = load_run(run_dir)
    refs = select_ranks(run, args.rank)
    if run.missing_hosts:
        from launcher.console import say

        say("never reported (no logs of theirs here): "
            + ", ".join(f"{h['host']} (ranks {h['ranks']})" for h in run.missing_hosts))
    out = sys.stdout.buffer
    tails: dict[int, _Tail] = {}
    for ref in refs:
        attempts = log_attempts(ref.rank_dir)
        if attempt == "all":
            chosen = attempts or [0]
        elif attempt is not None:
            if attempt not in attempts and not args.follow:
                raise UsageError(f"rank {ref.rank} has no log of attempt {attempt} (it has: "
                                 f"{', '.join(map(str, attempts)) or 'none'})")
            chosen = [attempt]
        else:
            chosen = [attempts[-1] if attempts else 0]
        for number in chosen[:-1]:
            _note(out, f"rank {ref.rank}: attempt {number} ({os.path.basename(log_path(ref, number))})")
            done = _Tail(ref, number, tail_offset(log_path(ref, number), args.lines)
                         if args.lines is not None else 0)
            done.read(out, final=True)
        if len(chosen) > 1:
            _note(out, f"rank {ref.rank}: attempt {chosen[-1]} ({os.path.basename(log_path(ref, chosen[-1]))})")
        path = log_path(ref, chosen[-1])
        tail = _Tail(ref, chosen[-1], tail_offset(path, args.lines) if args.lines is not None else 0)
        tail.read(out, final=not args.follow)
        tails[ref.rank] = tail
    out.flush()
    if not args.follow:
        return 0
    return _follow(run_dir, args, tails, fixed_attempt=isinstance(attempt, int), out=out)


def _follow(run_dir: str, args, tails: dict[int, _Tail], fixed_attempt: bool, out) -> int:
    """Print lines as they are appended to any followed log, until the run is over or Ctrl-C."""
    observer = Observer(run_dir)
    next_scan = 0.0
    while True:
        wrote = False
        for tail in tails.values():
            wrote = tail.read(out) or wrote
        if wrote:
            out.flush()
        now = time.monotonic()
        if now >= next_scan:
            next_scan = now + RESCAN_SECONDS
            run = load_run(run_dir)
            if not fixed_attempt:
                _switch_attempts(tails, out)
            if not args.rank:
                for ref in run.ranks:  # a host that started later in a shared run directory
                    if ref.rank not in tails:
                        tails[ref.rank] = _Tail(ref, current_attempt(ref))
            if run.finished or observer.over():
                for tail in tails.values():
                    tail.read(out, final=True)
                out.flush()
                return 0
        time.sleep(FOLLOW_POLL_SECONDS)


def _note(out, text: str) -> None:
    """A remark between log lines: on stderr, so stdout holds only the ranks' lines."""
    out.flush()
    sys.stderr.write(f"dlaunch: {text}\n")
    sys.stderr.flush()


def _switch_attempts(tails: dict[int, _Tail], out) -> None:
    """A rank restarted: finish its old log, go on with the new attempt's."""
    for rank, tail in list(tails.items()):
        newest = current_attempt(tail.ref)
        if newest > tail.attempt:
            tail.read(out, final=True)
            _note(out, f"rank {rank} restarted: following {os.path.basename(log_path(tail.ref, newest))}")
            tails[rank] = _Tail(tail.ref, newest)


# --------------------------------------------------------------------------
# wiring
# --------------------------------------------------------------------------


def _run_args(p) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", nargs="?",
                   help="a run directory, or an output directory (its latest run); default: the latest run "
                        "in --output-dir")
    p.add_argument("--output-dir", default="dlaunch_runs", metavar="DIR",
                   help="where run directories are (default ./dlaunch_runs)")
    p.add_argument("--rank", action="append", metavar="R",
                   help="only these ranks: 3, 0,3 or 4-7 (repeatable; default all)")


def add_parser(sub, launch_args) -> None:
    """Register ``status`` and ``logs``; ``launch_args`` (run's options) is not needed here."""
    p = sub.add_parser("status", help="each rank of a run, live or finished: state, CPU, memory, last output",
                       description="One row per rank: host, device, pid, state (starting, running, exited N, "
                                   "died of SIG, hung, ended, remote), CPU % and resident memory of its "
                                   "processes, seconds since its last output and its last line. Works from any "
                                   "terminal while the job runs (live processes, pids*.json) and after it "
                                   "(summary*.json).",
                       epilog="states: ended = gone but its launcher has not written the summary yet; "
                              "remote = on another host, whose processes cannot be seen from here")
    _run_args(p)
    p.add_argument("--watch", action="store_true", help="refresh in place until the run finishes (Ctrl-C stops)")
    p.add_argument("--interval", type=positive_seconds, default=2.0, metavar="SECONDS", help="--watch refresh (default 2)")
    p.add_argument("--json", action="store_true", help="print JSON (with --watch: one object a line)")
    p.add_argument("--hang-after", type=positive_seconds, metavar="SECONDS",
                   help="call a running rank hung when it has printed nothing for this long")
    p.set_defaults(handler=cmd_status)

    p = sub.add_parser("logs", help="print ranks' logs, each line prefixed [rankN]: ; --follow to stream",
                       description="Print ranks' output logs, each line prefixed [rankN]: . Lines carry no "
                                   "time, so what is already written is printed rank by rank, each in file "
                                   "order; with --follow, lines appended afterwards are printed as they "
                                   "appear (within 0.1 s), interleaved in the order they arrived, until the "
                                   "run is over. Default: every rank's newest attempt.")
    _run_args(p)
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing new lines until the run has finished (Ctrl-C stops); follows restarts")
    p.add_argument("-n", "--lines", type=whole(0, 10**7), metavar="N", help="start with only the last N lines of each rank")
    p.add_argument("--attempt", metavar="K",
                   help="which attempt's log: 0 the first, 1 after the first restart, ..., or all "
                        "(default: each rank's newest)")
    p.set_defaults(handler=cmd_logs)
