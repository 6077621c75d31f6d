"""When a failed job may restart: restarts left are not enough on a job that crashes the same way every time.

On a large job a fault every few hours is normal, so ``--max-restarts`` is set high; then a rank that
crashes at the same step every time burns the whole allocation restarting. Two rules stop such a loop, on
one host (``execute/attempts.py``) and for a job of several hosts (its coordinator) alike:

- **progress**: the newest step every rank completed (the step a restart resumes from) must grow. After
  ``without_progress`` failed attempts in a row that ended where they began (NVIDIA's ft_launcher: 3),
  the job stops. A job that saves no checkpoint dlaunch can read cannot show progress: only
  ``--max-restarts`` bounds it.
- **failure rate**: more than ``per_hour`` failures within an hour (Dataproc's max-failures-per-hour).

Either way the job exits ``ExitCode.NO_PROGRESS`` (93, as ft_launcher: "decided, do not requeue"), which a
Slurm requeue or a Kubernetes ``podFailurePolicy`` can tell from an exit that a later allocation may cure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

HOUR = 3600.0


@dataclass
class RestartBudget:
    without_progress: int = 3          # failed attempts in a row with no new complete step (0: no limit)
    per_hour: int | None = None        # failures within an hour (None: no limit)
    step: str | None = None            # the newest complete step when the current attempt began
    stalled: int = 0
    failures: list[float] = field(default_factory=list)

    def refuses(self, step: str | None, now: float) -> str | None:
        """An attempt failed and would be restarted; ``step`` is the newest complete step now. Why it must not
        be (a sentence), or None; either way the failure is counted."""
        self.failures = [at for at in self.failures if now - at < HOUR] + [now]
        if self.per_hour is not None and len(self.failures) > self.per_hour:
            return (f"{len(self.failures)} failures within an hour (--max-failures-per-hour {self.per_hour}): "
                    f"a crash loop")
        if step is not None or self.step is not None:   # a job that saves checkpoints: progress is measured
            self.stalled = self.stalled + 1 if step == self.step else 0
            self.step = step
            if self.without_progress and self.stalled >= self.without_progress:
                return (f"{self.stalled} attempt(s) in a row failed without a new complete checkpoint (still "
                        f"{step}; --restarts-without-progress {self.without_progress}): restarting again would "
                        f"fail the same way")
        return None
