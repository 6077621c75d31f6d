"""Finding checkpoints in a run directory, without torch: names, completeness, the resume point.

Each rank saves into its own ``rank_NNN/ckpt/`` (``DLAUNCH_CKPT_DIR``): dlaunch's
``{prefix}-{epoch}_{step}.pt`` or MindSpore's ``{prefix}-{epoch}_{step}.ckpt``/``.safetensors``
(every name rule lives in ``names``).  Saves are atomic (a temporary file renamed into place), so a
file with a checkpoint's name is a whole checkpoint; a *step* is complete only when every rank of the
run has it.  ``--resume`` picks the newest complete step and gives each rank its own file; so does a job
Slurm requeued (``slurm_requeue``).  ``ResumePoint`` is what the launch plan carries of that choice.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from launcher.checkpoint import names as ckptnames
from launcher.contract import CKPT_DIR
from launcher.rundir.paths import derived_run_id, rank_dirs


@dataclass(frozen=True)
class ResumePoint:
    """Where ranks resume from: one checkpoint file per global rank, all of one step (the plan carries it)."""

    run_dir: str
    label: str        # e.g. "resnet-3_156"
    epoch: int
    step: int
    files: dict       # global rank -> checkpoint path


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
    replicas: set[int] = field(default_factory=set)   # ranks whose file holds every rank's state (save(replicated))

    def covering(self, expected: set[int]) -> dict[int, str] | None:
        """A file for every rank in ``expected``: its own, else a replica's (the lowest rank's that saved one:
        data-parallel ranks hold the same state, so the survivors' gasp covers a rank that died without
        saving); None when some rank has neither."""
        missing = expected - set(self.files)
        if not missing:
            return {rank: self.files[rank] for rank in expected}
        if not self.replicas:
            return None
        replica = self.files[min(self.replicas)]
        return {rank: self.files.get(rank, replica) for rank in expected}

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
        listed = set(names)
        for key, name in ckptnames.by_series(names, kind).items():
            path = os.path.join(directory, name)
            try:
                size = os.path.getsize(path)
            except OSError:   # gone since the listing (rotated away)
                continue
            step = steps.setdefault(key, Step(*key, kind=kind))
            step.files[rank] = path
            step.sizes[rank] = size
            if name + ckptnames.REPLICA_SUFFIX in listed:
                step.replicas.add(rank)
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
        covered = step.covering(expected) if expected else None
        if covered is not None:
            return (replace(step, files=covered) if covered != step.files else step), skipped
        missing = sorted(expected - set(step.files))
        shown = ", ".join(map(str, missing[:8])) + (" ..." if len(missing) > 8 else "")
        skipped.append(f"skipping {step.label}: incomplete, ranks {shown} have no checkpoint of it")
    return None, skipped


def find_resume_point(run_dir: str, world_size: int, log=None) -> ResumePoint | None:
    """The ResumePoint for a new run of ``world_size`` ranks from ``run_dir``, or None if it has no complete step.

    ``log`` receives one message per newer step skipped as incomplete.
    """
    from launcher.errors import UsageError

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


REQUEUE_SUFFIX = ".requeue"   # run id of a job Slurm requeued K times: <run id>.requeueK


def slurm_requeue(run_id: str | None, output_dir: str, world_size: int,
                  environ) -> tuple[str | None, str | None, str] | None:
    """For a job Slurm requeued (``SLURM_RESTART_COUNT`` K > 0): (its run id, the run directory to resume from
    or None, the line that says so); None for any other launch.

    A requeued job keeps its job id, so it would start into the run directory of its first attempt, whose
    logs and summaries must stay (every run gets its own directory).  Attempt K runs as ``<run id>.requeueK``
    and resumes, as ``--resume`` would, from the newest of the earlier attempts' directories that has a step
    every rank completed; with none, it starts afresh.
    """
    count = environ.get("SLURM_RESTART_COUNT", "")
    if not environ.get("SLURM_JOB_ID") or not (count.isascii() and count.isdigit() and 0 < int(count[:9])):
        return None
    restarts = int(count[:9])
    why = f"Slurm requeued this job (SLURM_RESTART_COUNT={restarts})"
    if run_id is None:
        return None, None, f"{why}, but without --run-id its first attempt's run directory is unknown: starting afresh"
    name = derived_run_id(run_id, f"{REQUEUE_SUFFIX}{restarts}")   # a run id of 128 characters too
    earlier = [os.path.join(output_dir, derived_run_id(run_id, f"{REQUEUE_SUFFIX}{k}") if k else run_id)
               for k in range(restarts - 1, max(restarts - 100, 0) - 1, -1)]   # the newest first
    for run_dir in earlier:   # each attempt resumed from the one before: the first with a complete step
        if resume_point(run_dir, world_size)[0] is not None:
            return name, run_dir, why
    before = " or the attempts before it" if restarts > 1 else ""
    return name, None, f"{why}: starting afresh, no checkpoint step that every rank completed in {earlier[0]}{before}"
