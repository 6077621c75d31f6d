"""The launcher's keeper of its ranks' memory tier: the area made, persisted in the background and after every
attempt, restored before the next, freed at dlaunch's exit.

``begin(plan)`` before an attempt's ranks start: the first time, areas of the same run whose owner died are
persisted into this run's checkpoint directories and freed, this host's area is made (a line when its root is
smaller than the budget needs) and each rank's ``files/`` filled from its mirror (this run's, else the run
``--resume`` names); every time, a file torn or missing in memory but whole in the mirror is copied back. Then
one thread: every ``PERSIST_LOOK`` seconds the steps each rank asked to persist (``persist`` in its records) are
persisted (``persist.py``), and finished files are mirrored (``mirror.py``) the moment a writer closes one
(``closes.py``) and every ``LOOK`` seconds.

``restore_in_place()`` before a rank starts again in place while the others run (``--restart-policy rank|group``,
MindCluster's reset): the same copy back, except files a live process has open for writing.

``end(plan)`` after every rank of the attempt stopped, before the launch decides to restart (so the resume
point sees it): the thread stopped, every rank's newest complete memory step persisted where it is not on disk
yet (the failed rank's too: nothing is asked of the ranks), the mirror finished. ``close()`` at dlaunch's exit,
whatever the path: the same, then the area freed. Nothing of the user's is lost by freeing: persisted first.
"""

from __future__ import annotations

import os
import threading
import time

from launcher.base.console import say
from launcher.base.waiting import ready_fds
from launcher.checkpoint import tier
from launcher.contract import MEMORY_DIR_ENV, MEMORY_SLOTS_ENV
from launcher.execute.memory import area as areas
from launcher.execute.memory.closes import watch as watch_closes
from launcher.execute.memory.mirror import MIRROR_DIR, Mirror, open_for_writing
from launcher.execute.memory.persist import at_the_end, persist, to_persist
from launcher.rundir.paths import rank_dirs

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from collections.abc import Callable

LOOK = 0.5           # seconds between the thread's looks at the files to mirror
PERSIST_LOOK = 0.05   # seconds between its looks at the steps to persist (two small files per rank)


class MemoryKeeper:
    def __init__(self, root: str, budget: int | None, resume_from: str | None = None, log=say):
        self.root, self.budget, self.resume_from, self.log = root, budget, resume_from, log
        self.area: str | None = None
        self.run_dir: str | None = None
        self.ranks: dict[int, tuple[str, str]] = {}   # rank -> (its slots, its checkpoint directory)
        self.mirrors: dict[int, Mirror] = {}
        self.persisted: list = []   # every step persisted from memory (persist.Persisted), oldest first
        self.on_persisted: Callable[[int, str], None] | None = None   # (rank, path) for each: the buddy's sender
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()   # one look at a time: the thread's, or a restore before an in-place restart
        self._wake_r, self._wake_w = -1, -1
        self._told: set[str] = set()

    # ------------------------------------------------------------------ the attempt's seams

    def begin(self, plan) -> None:
        ranks = [spec for spec in plan.ranks if MEMORY_SLOTS_ENV in spec.env]
        if not ranks:
            return
        first = self.area is None
        area = self.area = self.area or os.path.dirname(os.path.dirname(ranks[0].env[MEMORY_SLOTS_ENV].rstrip("/")))
        if first:
            self.run_dir = plan.run_dir
            for orphan in areas.orphans(self.root, plan.run_id):
                rescue(orphan, self.log)
            areas.create(area, [spec.rank for spec in ranks], plan.run_dir)
            self._check_room(plan, len(ranks))
        else:
            areas.add_ranks(area, [spec.rank for spec in ranks])
        for spec in ranks:
            if spec.rank not in self.ranks:
                self.ranks[spec.rank] = (spec.env[MEMORY_SLOTS_ENV], spec.ckpt_dir)
                if spec.env.get(MEMORY_DIR_ENV) == tier.files_dir(area, spec.rank):   # the host's directory's rank
                    self.mirrors[spec.rank] = Mirror(tier.files_dir(area, spec.rank),
                                                     os.path.join(spec.ckpt_dir, MIRROR_DIR))
        self._restore(first, plan)
        self._start_thread()

    def end(self, _plan=None) -> bool:
        """Every rank's newest complete memory step and finished files on disk; False when some could not be
        written (said: a full disk), so the area is not freed."""
        self._stop_thread()
        if self.area is None:
            return True
        whole = True
        for rank, (slots, ckpt_dir) in sorted(self.ranks.items()):
            try:
                for record in at_the_end(slots):   # what it asked for, its newest step and the one before
                    done = persist(rank, slots, ckpt_dir, record)
                    if done is not None:
                        self._persisted(rank, done)
                        self.log(f"rank {rank}: persisted its memory step {done.record.epoch}_{done.record.step} "
                                 f"to {done.path}")
            except OSError as exc:
                whole = False
                self.log(f"rank {rank}: cannot persist its memory step to {ckpt_dir}: {exc.strerror or exc}")
        for rank, mirror in sorted(self.mirrors.items()):
            mirror.sync(set(), settled=True)
            if mirror.failed:
                whole = False
                self.log(f"rank {rank}: cannot copy {', '.join(mirror.failed[:3])} to {mirror.target}")
        return whole

    def restore_in_place(self) -> None:
        """Before a rank starts again in place while the others run (``--restart-policy rank|group``,
        MindCluster's reset): files torn or missing in memory copied back from the mirror, as before an attempt,
        except those a live process has open for writing (a running rank's save in flight is its own)."""
        if self.area is None:
            return
        with self._lock:
            busy = open_for_writing(self.area)
            for rank, mirror in sorted(self.mirrors.items()):
                if os.path.isdir(mirror.target) and (restored := mirror.restore(busy=busy)):
                    self.log(f"rank {rank}: restored {', '.join(restored[:3])} into its memory directory from "
                             f"{mirror.target} before the restart in place")

    def close(self) -> None:
        """At dlaunch's exit: persisted, then freed; kept (and said) when something in it could not be written."""
        whole = False
        try:
            whole = self.end()
        finally:
            if self.area is not None and whole:
                areas.free(self.area)
            elif self.area is not None:
                self.log(f"the memory area {self.area} is kept: not all of it could be written to disk; "
                         f"dlaunch prune --memory-root {self.root} writes it and frees it once there is room")
            self.area = None

    # ------------------------------------------------------------------ the parts

    def _persisted(self, rank: int, done) -> None:
        self.persisted.append(done)
        if self.on_persisted is not None:
            self.on_persisted(rank, done.path)

    def _check_room(self, plan, count: int) -> None:
        if not self.budget:
            return
        from launcher.host.memory import free_space

        free = free_space(self.root)
        need = self.budget * count
        if free is not None and free < need:
            self.log(f"--memory-root {self.root} has {free / 2**20:.0f} MiB free, less than the budget needs "
                     f"({count} rank(s) x {self.budget / 2**20:.0f} MiB, --memory-budget): memory saves that do not "
                     f"fit fail, and the ranks' saves fall back to their checkpoint directories on disk "
                     f"({plan.run_dir}/rank_NNN/ckpt)")

    def _restore(self, first: bool, plan) -> None:
        """Files torn or missing in memory copied back from the mirror; the first time, from the run
        ``--resume`` names where this run's mirror is empty."""
        earlier = rank_dirs(self.resume_from) if first and self.resume_from else {}
        for rank, mirror in sorted(self.mirrors.items()):
            source = mirror.target
            if first and not os.path.isdir(source) and rank in earlier:
                source = os.path.join(earlier[rank], "ckpt", MIRROR_DIR)
            if not os.path.isdir(source):
                continue
            restored = mirror.restore(source)
            if restored:
                shown = ", ".join(restored[:3]) + (f" and {len(restored) - 3} more" if len(restored) > 3 else "")
                self.log(f"rank {rank}: restored {shown} into its memory directory from {source}")

    def _start_thread(self) -> None:
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC)
        # watched before the ranks start (begin returns): no save they finish goes untold
        closes = watch_closes([mirror.source for mirror in self.mirrors.values() if os.path.isdir(mirror.source)])
        self._thread = threading.Thread(target=self._loop, args=(closes,), name="dlaunch-memory", daemon=True)
        self._thread.start()

    def _stop_thread(self) -> None:
        if self._thread is None:
            return
        os.write(self._wake_w, b"x")
        self._thread.join()
        self._thread = None
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _loop(self, closes) -> None:
        fds = [self._wake_r] + ([closes.fd] if closes is not None else [])
        next_mirror = time.monotonic() + LOOK
        try:
            while self._wake_r not in (ready := ready_fds(fds, time.monotonic() + PERSIST_LOOK)):
                now = time.monotonic()
                closed = closes is not None and closes.fd in ready and closes.drain()
                mirror = closed or now >= next_mirror   # a file just closed after writing: mirrored at once
                if mirror:
                    next_mirror = now + LOOK
                try:
                    self.look(mirror=mirror)
                except Exception as exc:   # a full disk, a defect: said once, tried again next look, the launch goes on
                    line = f"dlaunch memory tier: {type(exc).__name__}: {exc}"
                    if line not in self._told:
                        self._told.add(line)
                        self.log(line)
        finally:
            if closes is not None:
                closes.close()

    def look(self, mirror: bool = True) -> None:
        """One look: the steps the ranks asked for persisted (each PERSIST_LOOK: a rank skips memory saves that
        would overwrite such a step until it is on disk), and with ``mirror`` finished files mirrored (each LOOK:
        finding the files a rank still writes reads every process's descriptors)."""
        with self._lock:
            busy = open_for_writing(self.area) if self.area and mirror else set()
            for rank, (slots, ckpt_dir) in sorted(self.ranks.items()):
                for record in to_persist(slots):
                    done = persist(rank, slots, ckpt_dir, record)
                    if done is not None:
                        self._persisted(rank, done)
                if mirror and rank in self.mirrors:
                    self.mirrors[rank].sync(busy)


def rescue(area: str, log=say) -> list[str] | None:
    """An area whose owner died, persisted into its own run's checkpoint directories (the run directory it names),
    then freed; returns what was persisted, or None when something could not be written (the area is kept, and
    said). Steps and files are copied only where whole. An area whose run directory is gone is freed."""
    from launcher.contract import CKPT_DIR

    own = areas.run_dir_of(area)
    saved: list[str] = []
    ranks = rank_dirs(own) if own and os.path.isdir(own) else {}
    try:
        for rank in areas.ranks_of(area):
            if rank not in ranks:
                continue
            ckpt_dir = os.path.join(ranks[rank], CKPT_DIR)
            slots = tier.slots_dir(area, rank)
            for record in at_the_end(slots):   # what it asked for, its newest step and the one before
                done = persist(rank, slots, ckpt_dir, record)
                if done is not None:
                    saved.append(done.path)
            mirror = Mirror(tier.files_dir(area, rank), os.path.join(ckpt_dir, MIRROR_DIR))
            saved += [os.path.join(mirror.target, rel) for rel in mirror.sync(set(), settled=True)]
            if mirror.failed:
                raise OSError(f"cannot copy {', '.join(mirror.failed[:3])} to {mirror.target}")
    except OSError as exc:
        log(f"kept the memory area {area} left by a dlaunch that is gone: {exc.strerror or exc}")
        return None
    areas.free(area)
    log(f"freed the memory area {area} left by a dlaunch that is gone" +
        (f", after persisting {len(saved)} file(s) into {own}" if saved else
         " (nothing in it was newer than its run's files on disk)" if ranks else
         f" (its run directory {own} is not here: nothing persisted)"))
    return saved

def rescue_before(opts, log=say) -> None:
    """Before a launch reads its resume point or makes its run directory: the areas a SIGKILLed dlaunch of this
    run (its run id, its job's name) or of the run ``--resume`` names left, persisted into their run and freed."""
    if not opts.policy.memory_ckpt:
        return
    ids = {opts.run_id, opts.job_name, os.path.basename(opts.resume_from.rstrip("/")) if opts.resume_from else None}
    for run_id in sorted(filter(None, ids)):
        for orphan in areas.orphans(opts.policy.memory_root, run_id):
            rescue(orphan, log)
