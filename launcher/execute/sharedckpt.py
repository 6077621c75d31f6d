"""After a run: MindSpore checkpoints that ranks saved into a directory they share, said in one line.

dlaunch gives every rank its own checkpoint directory (``DLAUNCH_CKPT_DIR``, ``rank_NNN/ckpt``), and
runs every rank in the launch directory, as torchrun and msrun do.  A MindSpore script that saves
with ``ModelCheckpoint(prefix=...)`` and no directory (the seeds' semi-auto example), or with one
fixed directory, then makes all ranks save one prefix into one directory: their files of a step have
one name and overwrite each other, and each rank's ``keep_checkpoint_max`` counts and deletes the
others' files too (4 ranks x 3 saves left 3 files, and every rank exited 0).  Nor do
``dlaunch ckpt list`` and ``--resume`` see them.

So once the ranks are gone, the directories this host's ranks share are searched for MindSpore
checkpoints saved since the run started: their working directory (when two or more share it, to
two levels below it, skipping the output directory and hidden ones) and the run directory (rank
directories apart).  The search is bounded (``MAX_DIRS``) and never fails a run.
"""

from __future__ import annotations

import os

from launcher.checkpoint import names as ckptnames
from launcher.contract import CKPT_DIR_ENV, SCHEDULER_DIR
from launcher.plan.make import LaunchPlan

MAX_DIRS = 256          # directories looked at, at most, per run
SLACK = 2.0             # seconds: file times are coarser than the launcher's clock on some file systems


def _walk(top: str, depth: int, skip: set[str], budget: list[int]):
    """``top`` and its subdirectories down to ``depth`` levels, breadth first, at most ``budget[0]`` in all."""
    level = [top]
    for remaining in range(depth, -1, -1):
        below = []
        for directory in level:
            if budget[0] <= 0:
                return
            budget[0] -= 1
            yield directory
            if not remaining:
                continue
            real = os.path.join(os.path.realpath(directory), "")   # once: a subdirectory's real path is real + name
            try:   # skipped before sorting: a run directory holds a directory per rank
                kept = [e for e in os.scandir(directory) if not e.name.startswith(".")
                        and e.is_dir(follow_symlinks=False) and real + e.name not in skip]
            except OSError:
                continue
            below += [e.path for e in sorted(kept, key=lambda e: e.name)]
        level = below


def _saved_since(directory: str, since: float) -> dict[str, list[str]]:
    """Series prefix -> names of the MindSpore checkpoints and breakpoints saved in ``directory`` since ``since``."""
    try:
        names = os.listdir(directory)
    except OSError:
        return {}
    parsed = {name: what for name in names if (what := ckptnames.parse(name)) is not None and what.mindspore}
    instances = ckptnames.series(parsed.values())
    found: dict[str, list[str]] = {}
    for name, what in parsed.items():
        if what.kind not in (ckptnames.CHECKPOINT, ckptnames.BREAKPOINT):
            continue
        try:
            if os.stat(os.path.join(directory, name)).st_mtime < since - SLACK:
                continue
        except OSError:
            continue
        found.setdefault(instances[what.prefix][0], []).append(name)
    return found


def _warning(directory: str, sharers: int, found: dict[str, list[str]]) -> str:
    names = sorted(name for names in found.values() for name in names)
    prefixes = ", ".join(repr(prefix) for prefix in sorted(found))
    return (f"warning: MindSpore checkpoints of prefix {prefixes} were saved into {directory}, a directory "
            f"{sharers} ranks share ({len(names)} file(s) there now, e.g. {names[-1]}): ranks saving one prefix "
            "there overwrite each other's files and keep_checkpoint_max deletes other ranks' files, and "
            "dlaunch ckpt list/--resume do not see them; save into each rank's own directory: "
            f"ModelCheckpoint(directory=os.environ[\"{CKPT_DIR_ENV}\"])")


def shared_checkpoint_warnings(plan: LaunchPlan, since: float) -> list[str]:
    """One line for each directory several of this host's ranks share that received MindSpore checkpoints
    since ``since`` (epoch seconds)."""
    by_cwd: dict[str, int] = {}
    real: dict[str, str] = {}   # one realpath per distinct directory (1,024 ranks share one cwd): lstat per level
    for spec in plan.ranks:
        cwd = real.get(spec.cwd) or real.setdefault(spec.cwd, os.path.realpath(spec.cwd))
        by_cwd[cwd] = by_cwd.get(cwd, 0) + 1
    run_dir = os.path.realpath(plan.run_dir)
    # rank directories are the run directory's own subdirectories, made by dlaunch (rundir.create): no links
    own = {os.path.join(run_dir, os.path.basename(spec.rank_dir)) for spec in plan.ranks} | \
        {os.path.join(run_dir, SCHEDULER_DIR)}
    searches = [(cwd, 2, {os.path.realpath(plan.output_dir)}, count) for cwd, count in by_cwd.items() if count > 1]
    if len(plan.ranks) > 1:
        searches.append((run_dir, 1, own, len(plan.ranks)))
    budget, warnings, seen = [MAX_DIRS], [], set()
    for top, depth, skip, sharers in searches:
        for directory in _walk(top, depth, skip, budget):
            real = os.path.realpath(directory)
            if real in seen:
                continue
            seen.add(real)
            found = _saved_since(directory, since)
            if found:
                warnings.append(_warning(directory, sharers, found))
    return warnings
