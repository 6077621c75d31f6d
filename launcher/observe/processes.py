"""The live processes of a run, seen from any terminal: which are the ranks', their CPU, memory and state.

The pids come from ``pids*.json`` (what each launcher publishes). Without one (or for a pid that no
longer is the rank), a rank's process is found by its environment: the one process whose
``DLAUNCH_RANK_DIR`` is the rank's directory and whose parent's is not. psutil is imported inside the
functions that need it.
"""

from __future__ import annotations

import os
import time
from typing import Any

from launcher.base.steps import UserPattern
from launcher.base.stragglers import log_steps, scores, with_work
from launcher.contract import RANK_DIR_ENV, Role
from launcher.execute.results import job_verdict, restarted_how
from launcher.host.devices import host_names
from launcher.observe import tell_problems
from launcher.observe.hangview import hang_view
from launcher.observe.memory import memory_view
from launcher.observe.torchft import lighthouse_of, quorum
from launcher.rundir.read import (
    RankRef,
    Run,
    current_attempt,
    load_run,
    log_path,
    published_pids,
    select_ranks,
    summary_entry,
)

CPU_SAMPLE_SECONDS = 0.2      # status: the window of the first CPU % sample


def _is_local(host: str, names: set[str]) -> bool:
    return host in names or host.startswith("127.") or not host



def launch_pattern(run: Run) -> UserPattern | None:
    """The ``--step-pattern`` the run was launched with (any host's plan), for a status that gave none."""
    for plan in run.plans.values():
        text = plan.get("step_pattern")
        if isinstance(text, str) and text:
            try:
                return UserPattern.parse(text)
            except ValueError:   # a plan edited by hand: the frameworks' lines still count
                return None
    return None

class Observer:
    """Looks at a run's ranks: keeps psutil objects between looks, so CPU % spans the refresh interval."""

    def __init__(self, run_dir: str, hang_after: float | None = None, step_pattern=None):
        self.run_dir = run_dir
        self.hang_after = hang_after
        self.step_pattern = step_pattern            # steps.UserPattern, or None: the frameworks' lines only
        self._procs: dict[int, Any] = {}        # pid -> psutil.Process
        self._primed: set = set()                  # processes whose CPU % has a start
        self._launchers: set[int] = set()          # launcher pids seen (pids files, parents of ranks)
        self._local: set[str] | None = None
        self._told: set[str] = set()                # damaged files already warned of

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
                return proc if proc.environ().get(RANK_DIR_ENV) == ref.rank_dir else None
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
                rank_dir = proc.environ().get(RANK_DIR_ENV)
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

        found: dict[int, Any] = {}
        missing: dict[str, RankRef] = {}
        for ref in refs:
            if ref.suffix in run.summaries:
                continue
            entry = published_pids(run, ref)
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
            self._local = host_names()
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
        usage: dict[int, tuple[float | None, int | None]] = {}
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
        snap = self._snapshot(load_run(self.run_dir), ranks)
        if snap["finished"] and snap["exit_code"] is None:
            # a launcher writes its summary, then exits: one found gone after its run was read may have written
            # it in between, so the files are read again before the run is called over without a summary
            run = load_run(self.run_dir)
            if run.finished:
                return self._snapshot(run, ranks)
        return snap

    def _snapshot(self, run: Run, ranks: list[str] | None) -> dict:
        tell_problems(run, self._told)
        refs = select_ranks(run, ranks)
        live = self.find_ranks(run, refs)
        usage = self._usage({rank: self._tree(proc) for rank, proc in live.items()})
        now = time.time()
        rows = [self._row(run, ref, live.get(ref.rank), usage.get(ref.rank, (None, None)), now) for ref in refs]
        self._procs = {pid: p for pid, p in self._procs.items() if _alive(p)}
        self._primed = {p for p in self._primed if _alive(p)}
        snap = {"run_id": run.run_id, "run_dir": run.run_dir, "time": now, **self._overall(run, refs, rows),
                "hosts": sorted({ref.host for ref in run.ranks}), "world_size": run.world_size, "ranks": rows,
                "missing_hosts": run.missing_hosts}
        pattern = self.step_pattern or launch_pattern(run)
        dirs = {ref.rank: ref.rank_dir for ref in refs}
        steps = scores([with_work(log_steps(row["log"], row["rank"], row["host"], pattern), dirs.get(row["rank"]))
                        for row in rows if row.get("role", Role.RANK) == Role.RANK])
        if steps:   # step times the ranks printed: straggler scores (base.stragglers)
            snap["steps"] = steps
        if any(cause.get("hung") for cause in snap["root_causes"]):   # every rank's last step, who stopped first
            snap["hang"] = hang_view(run)
        unfit = [cause for _, summ in sorted(run.summaries.items())
                 if (cause := (summ.get("stopped_by") or {}).get("cause") or {}).get("kind") == "unhealthy"]
        if unfit:   # --health-gate: what each unfit host's checks found, and where their answers are kept
            snap["unfit"] = unfit
        memory = memory_view(run)
        if memory:   # --memory-ckpt: each rank's newest step in memory, beside the disk's
            snap["memory"] = memory
        roster = run.roster()
        if roster:   # --spares: active, standing by, replaced
            snap["roster"] = roster
        lighthouse = lighthouse_of(run.plans.values())
        if lighthouse and not snap["finished"]:   # --replica-groups: the quorum, as the lighthouse sees it
            snap["torchft"] = quorum(lighthouse)
        return snap

    def _row(self, run: Run, ref: RankRef, proc, usage, now: float) -> dict:
        entry = summary_entry(run, ref)
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
                row["state"] = "not started" + unfit_said(run.summaries[ref.suffix])
        elif proc is not None:
            row.update(pid=proc.pid, state="running")
            if self.hang_after is not None and idle is not None and idle > self.hang_after:
                row.update(state="hung", hung_reason=f"no output for {idle:.0f} s (--hang-after {self.hang_after:g})")
        else:
            published = published_pids(run, ref)
            row["pid"] = published.get("pid") if isinstance(published, dict) else None
            if not self.local(ref.host):
                row["state"] = "remote"
            elif idle is None:
                row["state"] = "starting"
            else:
                row["state"] = "ended"
        published = published_pids(run, ref) if entry is None else entry
        restarts = published.get("restarts") if isinstance(published, dict) else None
        count = len(restarts) if isinstance(restarts, list) else restarts if isinstance(restarts, int) else 0
        if count:   # started again in place (--restart-policy rank or group, MindCluster's RestartFaultProcess)
            how = restarted_how(restarts[-1] if isinstance(restarts, list) else None)
            row.update(restarts=count, state=f"{row['state']}, restarted {how} {count}x")
        return row

    def _overall(self, run: Run, refs: list[RankRef], rows: list[dict]) -> dict:
        """The run's state: its summaries' when all are in; else running or starting, or over without one."""
        verdict = job_verdict([s for _, s in sorted(run.summaries.items())], run.head, run.missing_hosts)
        causes = verdict["root_causes"]
        if run.finished:
            return {"status": verdict["status"], "finished": True, "exit_code": verdict["exit_code"],
                    "root_causes": causes}
        if run.damaged and not run.plans and not run.summaries:   # nothing readable will ever say more: over
            return {"status": "unreadable (its plan cannot be read)", "finished": True, "exit_code": None,
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
    from launcher.base.lines import tail_lines

    lines = tail_lines(path, 1, max_bytes=4096)
    if not lines:
        return ""
    return lines[-1].split("\r")[-1] if lines[-1].strip("\r") else lines[-1]


def unfit_said(summary) -> str:
    """``: its host was unfit (health gate)`` for a rank of a host the health gate kept from starting."""
    cause = (summary.get("stopped_by") or {}).get("cause") or {}
    return ": its host was unfit (health gate)" if cause.get("kind") == "unhealthy" else ""
