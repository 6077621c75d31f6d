"""``dlaunch prune``: remove old run directories, keeping the newest, never touching a run that may be running.

Runs only ever accumulate (nothing of an earlier run is deleted by a launch), so this is the one command that
deletes, and it is careful: it removes only directories that are dlaunch run directories, keeps the newest
``--keep N`` by start time, and skips every run that may still be running: one whose host has written a plan
but no summary, unless that host's launcher is known to be gone (its pid, recorded in ``pids*.json``, is not
alive here).  ``--dry-run`` says what it would do.
"""

from __future__ import annotations

import os
import shutil

from launcher.argtypes import whole
from launcher.console import say
from launcher.errors import UsageError
from launcher.rundir import LATEST, Run, is_run_dir, load_run


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, ValueError, TypeError):
        return False
    except PermissionError:
        return True
    return True


def maybe_running(run: Run) -> str | None:
    """Why the run may still be running (a host without a summary whose launcher is not known gone), or None."""
    for suffix in sorted(set(run.plans) - set(run.summaries)):
        pids = run.pids.get(suffix)
        if not pids:
            return f"host{suffix or ''} has a plan but no summary and no launcher pid (starting, or elsewhere)"
        if _alive(pids.get("launcher_pid")):
            return f"its launcher (pid {pids.get('launcher_pid')}) is running"
    return None


def _started(run: Run) -> float:
    starts = [s["started"] for s in run.summaries.values() if isinstance(s.get("started"), (int, float))]
    return float(min(starts)) if starts else os.stat(run.run_dir).st_mtime


def _size(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def cmd_prune(args) -> int:
    output_dir = args.output_dir
    if not os.path.isdir(output_dir):
        raise UsageError(f"no output directory {output_dir}")
    runs = [load_run(os.path.join(output_dir, name)) for name in os.listdir(output_dir)
            if name != LATEST and not os.path.islink(os.path.join(output_dir, name))
            and is_run_dir(os.path.join(output_dir, name))]
    runs.sort(key=_started, reverse=True)
    kept, removed, skipped, freed = runs[:args.keep], [], [], 0
    for run in runs[args.keep:]:
        run_dir = run.run_dir
        why = maybe_running(run)
        if why:
            skipped.append(run_dir)
            say(f"kept {os.path.basename(run_dir)}: it may be running ({why})")
            continue
        freed += _size(run_dir)
        removed.append(run_dir)
        if not args.dry_run:
            shutil.rmtree(run_dir)
    latest = os.path.join(output_dir, LATEST)
    if not args.dry_run and os.path.islink(latest) and not os.path.exists(latest):
        os.unlink(latest)   # it pointed at a run removed now
    verb = "would remove" if args.dry_run else "removed"
    say(f"{verb} {len(removed)} run(s) ({freed / 2**20:.1f} MiB) of {output_dir}; kept the newest {len(kept)}"
        + (f" and {len(skipped)} that may be running" if skipped else ""))
    if args.dry_run:
        print("\n".join(removed))
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("prune", help="remove old run directories, keeping the newest N",
                       description="Remove old run directories from --output-dir, keeping the newest --keep N (by "
                                   "start time). A run that may still be running (a host with a plan and no "
                                   "summary whose launcher is not known to be gone) is never removed.")
    p.add_argument("--keep", type=whole(0, 10**6), required=True, metavar="N", help="how many of the newest to keep")
    p.add_argument("--output-dir", default="dlaunch_runs", metavar="DIR", help="default ./dlaunch_runs")
    p.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    p.set_defaults(handler=cmd_prune)
