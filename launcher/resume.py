"""Finding checkpoints in a run directory, without torch: names, completeness, the resume point.

Each rank saves into its own ``rank_NNN/ckpt/`` (``DLAUNCH_CKPT_DIR``): dlaunch's
``{prefix}-{epoch}_{step}.pt`` or MindSpore's ``{prefix}-{epoch}_{step}.ckpt``/``.safetensors``
(every name rule lives in ``ckptnames``).  Saves are atomic (a temporary file renamed into place), so a
file with a checkpoint's name is a whole checkpoint; a *step* is complete only when every rank of the
run has it.  ``--resume`` picks the newest complete step and gives each rank its own file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from launcher import ckptnames
from launcher.contract import CKPT_DIR
from launcher.rundir import rank_dirs


@dataclass
class Step:
    """One checkpoint (series prefix, epoch, step, format) across the ranks of a run."""

    prefix: str
    epoch: int
    step: int
    format: str = ckptnames.DLAUNCH_FORMAT
    kind: str = ckptnames.CHECKPOINT
    files: dict[int, str] = field(default_factory=dict)   # global rank -> path
    sizes: dict[int, int] = field(default_factory=dict)

    @property
    def key(self) -> tuple[int, int]:
        return self.epoch, self.step

    @property
    def label(self) -> str:
        """The file name, without dlaunch's ``.pt`` (``ckpt-3_156``, ``lenet-3_156.ckpt``)."""
        name = ckptnames.file_name(self.kind, self.prefix, self.epoch, self.step, self.format)
        return name.removesuffix("." + ckptnames.DLAUNCH_FORMAT)

    @property
    def mindspore(self) -> bool:
        return self.format in ckptnames.MINDSPORE_FORMATS


def collect(directories: dict[int, str], kind: str = ckptnames.CHECKPOINT) -> list[Step]:
    """The checkpoints (or breakpoints) in each rank's directory (rank -> directory), as steps, oldest first."""
    steps: dict[ckptnames.Key, Step] = {}
    for rank, directory in directories.items():
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for key, name in ckptnames.by_series(names, kind).items():
            path = os.path.join(directory, name)
            try:
                size = os.path.getsize(path)
            except OSError:   # gone since the listing (rotated away)
                continue
            step = steps.setdefault(key, Step(*key, kind=kind))
            step.files[rank] = path
            step.sizes[rank] = size
    return sorted(steps.values(), key=lambda s: (s.epoch, s.step, s.prefix, s.format))


def scan(run_dir: str) -> tuple[list[Step], list[int]]:
    """Every checkpoint step in the run's rank checkpoint directories, oldest first, and the run's ranks."""
    ranks = rank_dirs(run_dir)
    return collect({rank: os.path.join(directory, CKPT_DIR) for rank, directory in ranks.items()}), sorted(ranks)


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
