"""``dlaunch prune``: remove old run directories, keeping the newest, never touching a run that may be running.

Runs only ever accumulate (nothing of an earlier run is deleted by a launch), so this is the one command that
deletes, and it is careful: it removes only directories that are dlaunch run directories, keeps the newest
``--keep N`` by start time, and skips every run that may still be running: one whose host has written a plan
but no summary, unless that host's launcher is known to be gone (its pid, recorded in ``pids*.json``, is not
alive here).  ``--dry-run`` says what it would do.
"""

from __future__ import annotations

import glob
import os
import re
import secrets
import shutil
import time
from dataclasses import dataclass

from launcher.base.console import printable, say
from launcher.base.userfiles import is_run_dir
from launcher.errors import UsageError
from launcher.observe import tell_problems
from launcher.rundir.paths import LATEST
from launcher.rundir.read import Run, load_run

CREATING_SECONDS = 3600     # a rank table without its plan this long: a launch that died creating it
_REMOVING = re.compile(r"^\..+\.pruning-[0-9a-f]+$")   # a run renamed aside by a prune that did not finish


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, ValueError, TypeError, OverflowError):
        return False
    except PermissionError:
        return True
    return True


def _being_created(run: Run) -> str | None:
    """A host whose rank table is written but whose plan is not yet: a launch creating the run right now."""
    for path in glob.glob(os.path.join(glob.escape(run.run_dir), "rank_table*.json")):
        suffix = os.path.basename(path)[len("rank_table"):-len(".json")]
        if suffix in run.plans or suffix in run.damaged or suffix in run.summaries:
            continue
        try:
            age = time.time() - os.lstat(path).st_mtime
        except OSError:
            continue
        if age < CREATING_SECONDS:
            return f"host{suffix} is creating it (a rank table, no plan yet)"
    return None


def maybe_running(run: Run) -> str | None:
    """Why the run may still be running (a host without a summary whose launcher is not known gone), or None."""
    for suffix in sorted((set(run.plans) | run.damaged) - set(run.summaries)):
        pids = run.pids.get(suffix)
        if not pids or "launcher_pid" not in pids:
            return f"host{suffix or ''} has a plan but no summary and no launcher pid (starting, or elsewhere)"
        if _alive(pids["launcher_pid"]):
            return f"its launcher (pid {pids['launcher_pid']}) is running"
    if run.missing_hosts and time.time() - _started(run) < CREATING_SECONDS:   # a host of a shared run yet to start
        return f"host {run.missing_hosts[0]['host'] or '?'} of the job has not written its plan yet"
    return _being_created(run)


def _started(run: Run) -> float:
    starts = [s["started"] for s in run.summaries.values() if "started" in s]
    if starts:
        return min(starts)
    try:
        return os.stat(run.run_dir).st_mtime
    except OSError:
        return 0.0


def _size(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def _remove(run_dir: str) -> list[str]:
    """Remove a run: first renamed aside in one step (a launch never finds half a run under its name, a
    second prune finds nothing to remove twice), then deleted; what cannot be deleted is told, not raised."""
    aside = os.path.join(os.path.dirname(run_dir), f".{os.path.basename(run_dir)}.pruning-{secrets.token_hex(4)}")
    try:
        os.rename(run_dir, aside)
    except FileNotFoundError:
        return []   # removed meanwhile (another prune)
    except OSError as exc:
        return [f"{run_dir}: {exc.strerror}"]
    return _delete(aside)


def _delete(path: str) -> list[str]:
    failures: list[str] = []

    def failed(_function, name, info) -> None:
        if not isinstance(info[1], FileNotFoundError):
            failures.append(f"{name}: {getattr(info[1], 'strerror', None) or info[1]}")

    shutil.rmtree(path, onerror=failed)
    return failures[:1] + ([f"and {len(failures) - 1} more"] if len(failures) > 1 else [])


def _runs(output_dir: str) -> tuple[list[Run], list[str]]:
    """The run directories of ``output_dir`` (each read through rundir's checked model), and leftovers of
    earlier prunes that stopped half-way."""
    runs, leftovers = [], []
    for name in sorted(os.listdir(output_dir)):
        path = os.path.join(output_dir, name)
        if _REMOVING.match(name) and os.path.isdir(path) and not os.path.islink(path):
            leftovers.append(path)
        elif name != LATEST and not os.path.islink(path) and is_run_dir(path):
            run = load_run(path)
            tell_problems(run)
            runs.append(run)
    return runs, leftovers


@dataclass(frozen=True)
class PruneRequest:
    """``dlaunch prune``'s settings (``cli.prune`` builds it)."""

    output_dir: str
    keep: int | None
    dry_run: bool
    memory_root: str = "/dev/shm"


def free_memory_areas(root: str, dry_run: bool) -> int:
    """Memory areas (--memory-ckpt) whose dlaunch is gone (SIGKILLed): each persisted into its run's checkpoint
    directories, then freed, and said; how many."""
    from launcher.execute.memory.area import orphans
    from launcher.execute.memory.keeper import rescue

    left = orphans(root)
    for area in left:
        if dry_run:
            say(f"would free the memory area {printable(area)} (its dlaunch is gone), after persisting it")
        else:
            rescue(area, say)
    return len(left)


def cmd_prune(args: PruneRequest) -> int:
    free_memory_areas(args.memory_root, args.dry_run)
    if args.keep is None:
        return 0
    output_dir = args.output_dir
    if not os.path.isdir(output_dir):
        raise UsageError(f"no output directory {output_dir}")
    try:
        runs, leftovers = _runs(output_dir)
    except OSError as exc:
        raise UsageError(f"cannot read the output directory {output_dir}: {exc.strerror}") from None
    runs.sort(key=_started, reverse=True)
    kept, removed, skipped, failed, freed = runs[:args.keep], [], [], [], 0
    for run in runs[args.keep:]:
        run_dir = run.run_dir
        why = maybe_running(run)
        if why:
            skipped.append(run_dir)
            say(f"kept {printable(os.path.basename(run_dir))}: it may be running ({printable(why)})")
            continue
        size = _size(run_dir)
        problems = [] if args.dry_run else _remove(run_dir)
        if problems:
            failed.append(run_dir)
            say(f"could not remove all of {printable(run_dir)}: {printable('; '.join(problems))}")
            continue
        freed += size
        removed.append(run_dir)
    for path in leftovers if not args.dry_run else []:
        for problem in _delete(path):
            failed.append(path)
            say(f"could not remove {printable(problem)}")
    latest = os.path.join(output_dir, LATEST)
    if not args.dry_run and os.path.islink(latest) and not os.path.exists(latest):
        try:
            os.unlink(latest)   # it pointed at a run removed now
        except FileNotFoundError:
            pass                # another prune was first
    verb = "would remove" if args.dry_run else "removed"
    say(f"{verb} {len(removed)} run(s) ({freed / 2**20:.1f} MiB) of {output_dir}; kept the newest {len(kept)}"
        + (f" and {len(skipped)} that may be running" if skipped else ""))
    if args.dry_run:
        print("\n".join(printable(path) for path in removed))
    return 1 if failed else 0
