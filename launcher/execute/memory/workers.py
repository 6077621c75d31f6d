"""``LocalWorkers`` with the memory tier's keeper around every attempt (``--memory-ckpt``)."""

from __future__ import annotations

import functools

from launcher.execute.local.workers import LocalWorkers

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from launcher.execute.memory.keeper import MemoryKeeper


def workers_of(opts):
    """What runs this launch's attempts: ``LocalWorkers``, kept by a ``MemoryKeeper`` with --memory-ckpt."""
    if not opts.policy.memory_ckpt:
        return LocalWorkers
    from launcher.execute.memory.keeper import MemoryKeeper  # only then: nothing more on the launch path without it

    return functools.partial(MemoryWorkers, keeper=MemoryKeeper(opts.policy.memory_root, opts.policy.memory_budget,
                                                                 opts.resume_from))


class MemoryWorkers(LocalWorkers):
    """Each attempt between the keeper's ``begin`` and ``end`` (every rank stopped, before the launch decides to
    restart); the area persisted and freed when the launch closes its workers, whatever ended it."""

    def __init__(self, *args, keeper: MemoryKeeper, **kwargs):
        super().__init__(*args, **kwargs)
        self.keeper = keeper

    def run(self, plan):
        self.keeper.begin(plan)
        try:
            return super().run(plan)
        finally:
            self.keeper.end(plan)

    def close(self) -> None:
        try:
            self.keeper.close()
        finally:
            super().close()
