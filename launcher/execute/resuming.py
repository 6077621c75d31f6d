"""The first attempt's resume point: ``--resume`` (or a Slurm requeue), said once.

The newest step every rank completed in the earlier run; with ``--memory-ckpt``, a run whose ranks kept only
their own files (a script that ``torch.save``s into ``DLAUNCH_MEMORY_DIR``) resumes too: dlaunch mirrored those
files into ``rank_NNN/ckpt/memory/``, and the keeper fills each rank's memory directory from them before it
starts (``execute/memory/keeper.py``), where the script finds them as it left them.
"""

from __future__ import annotations

import os

from launcher.base.console import say
from launcher.checkpoint.resume import ResumePoint, find_resume_point
from launcher.errors import UsageError

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from launcher.plan.make import Options


def first_resume_point(opts: Options, world_size: int) -> ResumePoint | None:
    """``--resume`` (or a Slurm requeue): the newest step every rank completed in the earlier run, said once;
    None with a memory mirror and no such step (the ranks' files are their resume point)."""
    if opts.resume_from is None:
        if opts.resume_note:
            say(opts.resume_note)
        return None
    resume = find_resume_point(opts.resume_from, world_size, log=say)
    if resume is None and opts.policy.memory_ckpt and mirrored(opts.resume_from):
        say(f"{opts.resume_note + ': ' if opts.resume_note else ''}resuming from the files the ranks kept in "
            f"memory, mirrored in {opts.resume_from}/rank_NNN/ckpt/memory (no step every rank saved on disk)")
        return None
    if resume is None:
        raise UsageError(f"nothing to resume: {opts.resume_from} has no checkpoint that every rank completed")
    say(f"{opts.resume_note + ': ' if opts.resume_note else ''}resuming from {resume.label} of {resume.run_dir}")
    return resume


def mirrored(run_dir: str) -> bool:
    """Whether some rank of ``run_dir`` has files in its memory mirror."""
    from launcher.contract import CKPT_DIR
    from launcher.execute.memory.mirror import MIRROR_DIR, listing
    from launcher.rundir.paths import rank_dirs

    return any(listing(os.path.join(directory, CKPT_DIR, MIRROR_DIR), skip_temporaries=True)
               for directory in rank_dirs(run_dir).values())
