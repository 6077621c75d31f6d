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
        self.buddy = None   # several hosts: (this host's BuddyKeeper, its BuddySender), from the first attempt on

    def run(self, plan):
        self.keeper.begin(plan)
        if self.job is not None and self.buddy is None and self.keeper.area is not None:
            self.buddy = start_buddy(self.job, self.keeper, plan)
        try:
            return super().run(plan)
        finally:
            self.keeper.end(plan)

    def _respawn(self, attempt, process) -> None:
        """A rank started again in place (the others run on): the files its kill left torn restored first."""
        self.keeper.restore_in_place()
        super()._respawn(attempt, process)

    def close(self) -> None:
        try:
            self.keeper.end()
            if self.buddy is not None:   # the end's newest steps sent, then the copies kept for others let go
                for part in reversed(self.buddy):
                    part.close()
            self.keeper.close()
        finally:
            super().close()


def start_buddy(link, keeper: MemoryKeeper, plan):
    """The buddy copy of a job of several hosts (``job/buddy.py``): this host keeps the copies the host before it
    sends (on its own address, the port after the job's), and sends its own persisted steps to the host after
    it; None, said, when this host cannot listen there."""
    from launcher.base.console import say
    from launcher.execute.job import buddy

    own = link.hosts[link.index]
    port = buddy.port_of(link.port)
    assert keeper.area is not None   # begun: the area exists
    try:
        kept = buddy.BuddyKeeper(own, port, link.secret, keeper.area, plan.policy.memory_budget or (1 << 62))
    except OSError as exc:
        say(f"no buddy copy: cannot listen on {own}:{port} for the copies of another host ({exc.strerror or exc}); "
            f"a lost host's ranks resume from what a spare finds on disk")
        return None

    def target():
        active = [link.hosts[i] for i in (link.active if link.active is not None else range(len(link.hosts)))]
        other = buddy.buddy_of(active, own)
        return None if other is None else (other, port)

    sender = buddy.BuddySender(target, link.secret, own, say)
    keeper.on_persisted = sender.offer
    return kept, sender
