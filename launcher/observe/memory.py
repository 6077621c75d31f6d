"""Both checkpoint tiers of a live run: each rank's newest step in memory beside the steps on disk.

A run's plans name each rank's memory slots (``DLAUNCH_MEMORY_SLOTS`` in its environment); while its area
exists (the run is live, or its dlaunch died and nobody freed it yet) each rank's ``newest.json`` says its
newest complete memory step. A step is complete when every rank has it in memory or on disk.
"""

from __future__ import annotations

from launcher.checkpoint import resume
from launcher.contract import MEMORY_SLOTS_ENV

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from launcher.checkpoint import tier


def memory_steps(run) -> dict[int, tier.Record]:
    """Global rank -> its newest complete memory step, for the ranks whose area is there (a ``rundir.read.Run``).
    The tier's reader is imported only for a run that has one: ``status`` of any other run loads nothing more."""
    found: dict[int, tier.Record] = {}
    for plan in run.plans.values():
        for spec in plan.get("ranks") or []:
            slots = (spec.get("env") or {}).get(MEMORY_SLOTS_ENV)
            rank = spec.get("rank")
            if isinstance(slots, str) and isinstance(rank, int):
                from launcher.execute.memory.persist import newest

                record = newest(slots)
                if record is not None:
                    found[rank] = record
    return found


def label(record: tier.Record) -> str:
    return record.name.removesuffix(".pt")


def key(record: tier.Record) -> tuple:
    return record.prefix, record.epoch, record.step


def memory_rows(memory: dict[int, tier.Record], steps: list[resume.Step], world: int) -> list[dict]:
    """``ckpt list``'s rows of kind "memory": each step some rank holds in memory, which ranks hold it there and
    whether every rank has it in memory or on disk."""
    disk = {(step.prefix, step.epoch, step.step): set(step.files) for step in steps
            if step.format == "pt"}
    rows = []
    for step_key in sorted({key(record) for record in memory.values()}, key=lambda k: (k[1], k[2], k[0])):
        ranks = sorted(rank for rank, record in memory.items() if key(record) == step_key)
        missing = sorted(set(range(world)) - set(ranks) - disk.get(step_key, set()))
        record = memory[ranks[0]]
        rows.append({"kind": "memory", "label": label(record), "prefix": record.prefix, "epoch": record.epoch,
                     "step": record.step, "format": "pt", "ranks": ranks, "missing": missing,
                     "complete": not missing, "on_disk": sorted(disk.get(step_key, set())),
                     "bytes": sum(memory[rank].length for rank in ranks), "names": [record.name],
                     "covered": [], "replica_of": None, "sliced": False, "files": {}})
    return rows


def newest_across_tiers(memory: dict[int, tier.Record], steps: list[resume.Step], world: int) -> str | None:
    """The newest step every rank has in memory or on disk (its label), or None."""
    held: dict[tuple, set[int]] = {}
    for step in steps:
        if step.format == "pt":
            held.setdefault((step.prefix, step.epoch, step.step), set()).update(step.files)
    for rank, record in memory.items():
        held.setdefault(key(record), set()).add(rank)
    complete = [k for k, ranks in held.items() if ranks >= set(range(world))]
    if not complete:
        return None
    prefix, epoch, step = max(complete, key=lambda k: (k[1], k[2], k[0]))
    return f"{prefix}-{epoch}_{step}"



def memory_view(run) -> dict | None:
    """``status --json``'s "memory": each rank's newest memory step, the disk's newest complete step and the
    newest complete in memory or on disk; None without a memory area (no --memory-ckpt, or the run is over)."""
    memory = memory_steps(run)
    if not memory:
        return None
    steps, _ = resume.scan(run.run_dir)
    disk, _ = resume.resume_point(run.run_dir, run.world_size or None)
    return {"ranks": {str(rank): label(record) for rank, record in sorted(memory.items())},
            "newest_on_disk": disk.label if disk else None,
            "newest_complete": newest_across_tiers(memory, steps, run.world_size or len(memory))}


def status_line(view: dict | None) -> str | None:
    """``status``'s line: each rank's newest memory step, and the newest step complete across both tiers."""
    if not view:
        return None
    ranks = ", ".join(f"{rank}: {step}" for rank, step in view["ranks"].items())
    return (f"memory tier: newest step per rank {ranks}; newest complete in memory or on disk: "
            f"{view['newest_complete'] or 'none'} (on disk alone: {view['newest_on_disk'] or 'none'})")
