"""Restarting a job of several hosts from one step: the newest checkpoint every rank of every host has.

A host sees only its own ranks' checkpoints (run directories need not be shared), so each host reports
the steps complete on all of its ranks with its attempt's result, the coordinator keeps the steps every
host reported (``common_step``), and each host resumes its own ranks from their files of that step.
"""

from __future__ import annotations

import os

from launcher.plan import LaunchPlan, ResumePoint
from launcher.resume import Step, collect
from launcher.rundir import CKPT_DIR


def _own_steps(plan: LaunchPlan) -> list[Step]:
    own = {spec.rank: os.path.join(spec.rank_dir, CKPT_DIR) for spec in plan.ranks if spec.rank is not None}
    return [step for step in collect(own) if set(own) <= set(step.files)]


def complete_steps(plan: LaunchPlan) -> list[str]:
    """Labels of the steps every rank of this host has, oldest first."""
    return [step.label for step in _own_steps(plan)]


def common_step(reported: list[list[str]]) -> str | None:
    """The newest step in every host's list (the lists are oldest first), or None."""
    if not reported:
        return None
    others = [set(steps) for steps in reported[1:]]
    return next((label for label in reversed(reported[0]) if all(label in steps for steps in others)), None)


def host_resume_point(plan: LaunchPlan, label: str) -> ResumePoint | None:
    """This host's ranks' files of the step the job resumes from."""
    step = next((s for s in reversed(_own_steps(plan)) if s.label == label), None)
    if step is None:
        return None
    return ResumePoint(run_dir=plan.run_dir, label=step.label, epoch=step.epoch, step=step.step,
                       files=dict(step.files))
