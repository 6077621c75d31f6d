"""Finding checkpoints in a run directory, without torch: names, completeness, the resume point.

Checkpoint files follow the seeds' convention ``{prefix}-{epoch}_{step}.pt`` in
each rank's ``rank_NNN/ckpt/``.  Saves are atomic (a hidden temporary file
renamed into place), so a file with a checkpoint's name is a whole checkpoint;
a *step* is complete only when every rank of the run has it.  ``--resume``
picks the newest complete step and gives each rank its own file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

CHECKPOINT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<epoch>\d+)_(?P<step>\d+)\.pt$")
RANK_DIR = re.compile(r"^rank_(\d+)$")


def checkpoint_name(prefix: str, epoch: int, step: int) -> str:
    return f"{prefix}-{epoch}_{step}.pt"


def parse_name(name: str) -> tuple[str, int, int] | None:
    """(prefix, epoch, step) of a checkpoint file name, or None for anything else (temporaries included)."""
    match = CHECKPOINT_NAME.match(name)
    if not match or name.startswith("."):
        return None
    return match["prefix"], int(match["epoch"]), int(match["step"])


@dataclass
class Step:
    """One (prefix, epoch, step) across the ranks of a run."""

    prefix: str
    epoch: int
    step: int
    files: dict[int, str] = field(default_factory=dict)   # global rank -> path
    sizes: dict[int, int] = field(default_factory=dict)

    @property
    def key(self) -> tuple[int, int]:
        return self.epoch, self.step

    @property
    def label(self) -> str:
        return f"{self.prefix}-{self.epoch}_{self.step}"


def rank_dirs(run_dir: str) -> dict[int, str]:
    """Global rank -> its rank directory, for every rank directory in the run."""
    found: dict[int, str] = {}
    try:
        names = os.listdir(run_dir)
    except OSError:
        return found
    for name in names:
        match = RANK_DIR.match(name)
        if match and os.path.isdir(os.path.join(run_dir, name)):
            found[int(match[1])] = os.path.join(run_dir, name)
    return found


def scan(run_dir: str) -> tuple[list[Step], list[int]]:
    """Every checkpoint step in the run, oldest first, and the run's ranks."""
    ranks = rank_dirs(run_dir)
    steps: dict[tuple[str, int, int], Step] = {}
    for rank, directory in ranks.items():
        ckpt = os.path.join(directory, "ckpt")
        try:
            names = os.listdir(ckpt)
        except OSError:
            continue
        for name in names:
            parsed = parse_name(name)
            if parsed is None:
                continue
            step = steps.setdefault(parsed, Step(*parsed))
            path = os.path.join(ckpt, name)
            step.files[rank] = path
            step.sizes[rank] = os.path.getsize(path)
    ordered = sorted(steps.values(), key=lambda s: (s.epoch, s.step, s.prefix))
    return ordered, sorted(ranks)


def resume_point(run_dir: str, world_size: int | None = None) -> tuple[Step | None, list[str]]:
    """The newest step that every rank has, and a message for each newer step skipped as incomplete."""
    steps, ranks = scan(run_dir)
    expected = set(range(world_size)) if world_size is not None else set(ranks)
    skipped: list[str] = []
    for step in reversed(steps):
        missing = sorted(expected - set(step.files))
        if not missing and expected:
            return step, skipped
        shown = ", ".join(map(str, missing[:8])) + (" ..." if len(missing) > 8 else "")
        skipped.append(f"skipping {step.label}: incomplete, ranks {shown} have no checkpoint of it")
    return None, skipped


def find_resume_point(run_dir: str, world_size: int, log=None):
    """The ResumePoint for a new run of ``world_size`` ranks from ``run_dir``, or None if it has no complete step.

    ``log`` receives one message per newer step skipped as incomplete.
    """
    from launcher.errors import UsageError
    from launcher.plan import ResumePoint

    saved_ranks = sorted(rank_dirs(run_dir))
    if saved_ranks and len(saved_ranks) != world_size:
        raise UsageError(f"{run_dir} was run with {len(saved_ranks)} ranks, this run has {world_size}: "
                         f"reshard it first (dlaunch ckpt reshard {run_dir} --ranks {world_size} -o DIR)")
    step, skipped = resume_point(run_dir, world_size)
    for message in skipped:
        if log:
            log(message)
    if step is None:
        return None
    return ResumePoint(run_dir=run_dir, label=step.label, epoch=step.epoch, step=step.step, files=dict(step.files))
