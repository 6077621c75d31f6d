"""What ``dlaunch ckpt list|merge|reshard`` do: look at a run's checkpoints, join slices, re-slice.

``list_run`` reads names and sizes only (no torch).  ``merge`` and ``reshard`` read the per-rank
slice files and the strategy files ``checkpoint.save_sliced`` writes beside them, and nothing else:
a sliced tensor is rebuilt by concatenating its slices in slice-index order along the split dim;
every other tensor and value must be identical on every rank.  Bad input raises ``UsageError``
with a one-line message.
"""

from __future__ import annotations

import copy
import os
from typing import Any

from launcher import checkpoint
from launcher.base import numlists
from launcher.base.console import printable
from launcher.base.userfiles import is_run_dir
from launcher.checkpoint import names as ckptnames
from launcher.checkpoint import resume
from launcher.checkpoint import store as ckptstore
from launcher.contract import CKPT_DIR
from launcher.errors import UsageError
from launcher.rundir.model import read_json
from launcher.rundir.paths import rank_dir_name, rank_dirs

_KIND_ORDER = {"per-rank": 0, "memory": 1, "integrated": 2, "breakpoint": 3}


# --------------------------------------------------------------------------
# list
# --------------------------------------------------------------------------


def _world_size(run_dir: str, ranks: list[int]) -> tuple[int, dict]:
    """The run's world size from its plans, read through rundir's checked model (so a rank with no directory
    at all still counts as missing; a damaged plan is said once and the ranks' directories count instead), and
    each rank's newest memory step while the run's memory area is there (``observe.memory``)."""
    from launcher.observe import tell_problems
    from launcher.observe.memory import memory_steps
    from launcher.rundir.read import load_run

    run = load_run(run_dir)
    tell_problems(run)
    return run.world_size or (max(ranks) + 1 if ranks else 0), memory_steps(run)


def _require_run(run_dir: str) -> None:
    """A run directory, or one laid out as one (``ckpt reshard``'s output: rank_NNN/ckpt/ without a plan)."""
    if not os.path.isdir(run_dir):
        raise UsageError(f"no run directory at {run_dir}")
    if not (is_run_dir(run_dir) or rank_dirs(run_dir)
            or os.path.isdir(os.path.join(run_dir, checkpoint.INTEGRATED_DIR))):
        raise UsageError(f"{run_dir} is not a dlaunch run directory (it has no plan*.json and no rank_NNN/ "
                         "directories)")


def _row(kind: str, step: resume.Step, world: int) -> dict:
    files = step.files
    missing = sorted(set(range(world)) - set(files)) if kind != "integrated" else []
    strategies = [ckptstore.companion(path) for path in files.values()] if not step.mindspore else []
    sliced = bool(strategies) and all(os.path.exists(path) for path in strategies)
    size = sum(step.sizes.values())
    names = sorted({os.path.basename(path) for path in files.values()})
    # ranks that saved nothing of the step but are covered by a replica (save(replicated=True), the gasp)
    covered = missing if missing and kind == "per-rank" and step.replicas else []
    return {"kind": kind, "label": step.label, "prefix": step.prefix, "epoch": step.epoch, "step": step.step,
            "format": step.format, "ranks": sorted(files), "missing": [] if covered else missing,
            "complete": not missing or bool(covered), "replica_of": min(step.replicas) if covered else None,
            "covered": covered, "sliced": sliced, "bytes": size, "files": dict(sorted(files.items())),
            "names": names}


def list_run(run_dir: str) -> list[dict]:
    """Every checkpoint of a run: per-rank steps (which ranks have them, complete or not, sliced or
    not; dlaunch's and MindSpore's), integrated checkpoints under ``integrated/``, and breakpoints
    (dlaunch's in ``ckpt/breakpoint/``, MindSpore's ``*_breakpoint.ckpt``), and of a live run with --memory-ckpt
    each rank's newest step in memory; each a dict, oldest first per kind. A step is complete when every rank
    has it on disk or in memory (``memory_ranks`` of a per-rank row: the ranks whose only copy is in memory)."""
    from launcher.observe.memory import key, memory_rows

    _require_run(run_dir)
    steps, ranks = resume.scan(run_dir)
    world, memory = _world_size(run_dir, ranks)
    rows = [_row("per-rank", step, world) for step in steps]
    for row in rows:
        held = [rank for rank in row["missing"] if rank in memory and key(memory[rank]) ==
                (row["prefix"], row["epoch"], row["step"]) and row["format"] == ckptnames.DLAUNCH_FORMAT]
        if held:
            row.update(missing=sorted(set(row["missing"]) - set(held)), memory_ranks=held)
            row["complete"] = not row["missing"]
    disk_keys = {(row["prefix"], row["epoch"], row["step"]) for row in rows}
    rows += [row for row in memory_rows(memory, steps, world)
             if (row["prefix"], row["epoch"], row["step"]) not in disk_keys or not row["complete"]]
    integrated = resume.collect({0: os.path.join(run_dir, checkpoint.INTEGRATED_DIR)})
    rows += [_row("integrated", step, world) for step in integrated if not step.mindspore]
    ckpt_dirs = {rank: os.path.join(directory, CKPT_DIR) for rank, directory in rank_dirs(run_dir).items()}
    ours = resume.collect({rank: os.path.join(d, checkpoint.BREAKPOINT_DIR) for rank, d in ckpt_dirs.items()})
    mindspore = resume.collect(ckpt_dirs, ckptnames.BREAKPOINT)
    rows += [_row("breakpoint", step, world) for step in ours if not step.mindspore]
    rows += [_row("breakpoint", step, world) for step in mindspore]
    rows.sort(key=lambda row: (_KIND_ORDER[row["kind"]], row["epoch"], row["step"], row["prefix"]))
    resumable = [row for row in rows if row["kind"] in ("per-rank", "memory") and row["complete"]]
    resumable.sort(key=lambda row: (row["epoch"], row["step"]))
    for row in rows:
        row["newest_complete"] = bool(resumable) and row is resumable[-1]   # what --resume picks
    return rows


def _ranges_or_dash(ranks: list[int]) -> str:
    return numlists.format_ranges(ranks) or "-"


def _size(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if count < 1024 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return ""


def format_list(rows: list[dict]) -> str:
    """The rows of ``list_run`` as an aligned table for people."""
    if not rows:
        return "no checkpoints"
    table = [("KIND", "CHECKPOINT", "RANKS", "SIZE", "STATUS")]
    for row in rows:
        if row["kind"] == "integrated":
            status = "full checkpoint"
        elif row["kind"] == "memory":
            status = f"in memory, the newest of ranks {_ranges_or_dash(row['ranks'])}" + (
                f" (on disk: {_ranges_or_dash(row['on_disk'])})" if row["on_disk"] else "") + (
                "; complete in memory or on disk" if row["complete"] else
                f"; incomplete: ranks {_ranges_or_dash(row['missing'])} missing") + (
                ", newest" if row["newest_complete"] else "")
        elif row["complete"]:
            status = "complete" + (", sliced" if row["sliced"] else "")
            if row["covered"]:
                status += f" (ranks {_ranges_or_dash(row['covered'])} from rank {row['replica_of']}'s replica)"
            if row.get("memory_ranks"):
                status += f" (ranks {_ranges_or_dash(row['memory_ranks'])} in memory)"
            status += (", newest" + ("" if row.get("memory_ranks") else " (--resume picks it)")
                       if row["newest_complete"] else "")
        else:
            status = f"incomplete: ranks {_ranges_or_dash(row['missing'])} missing"
        if row["names"] != [row["label"] + ("" if row["format"] != ckptnames.DLAUNCH_FORMAT else ".pt")]:
            status += f"; saved as {', '.join(row['names'])}"   # MindSpore's {prefix}_N names of the series
        ranks = "-" if row["kind"] == "integrated" else _ranges_or_dash(row["ranks"])
        table.append((row["kind"], printable(row["label"]), ranks, _size(row["bytes"]), printable(status)))
    widths = [max(len(line[i]) for line in table) for i in range(4)]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)) + "  " + line[4]
                     for line in table)


# --------------------------------------------------------------------------
# reading a sliced step
# --------------------------------------------------------------------------


def _dlaunch_step(step: resume.Step) -> resume.Step:
    if step.mindspore:
        raise UsageError(f"{step.label} is a MindSpore checkpoint: merge and reshard join dlaunch's sliced .pt "
                         "checkpoints (checkpoint.save_sliced); MindSpore's own mindspore.transform_checkpoints "
                         "re-slices its checkpoints")
    return step


def _pick_step(run_dir: str, label: str | None) -> tuple[resume.Step, int]:
    """The step to merge: ``label`` ("ckpt-3_156", "3_156", with or without .pt), else the newest complete one."""
    _require_run(run_dir)
    steps, ranks = resume.scan(run_dir)
    world = _world_size(run_dir, ranks)[0]
    if label is None:
        step, _ = resume.resume_point(run_dir, world)
        if step is None:
            raise UsageError(f"{run_dir} has no checkpoint step that every one of its {world} rank(s) saved")
        return _dlaunch_step(step), world
    label = label.removesuffix(".pt")
    found = [s for s in steps if label in (s.label, f"{s.epoch}_{s.step}")]
    if not found:
        known = ", ".join(s.label for s in steps[-8:]) or "none"
        raise UsageError(f"no checkpoint {label!r} in {run_dir} (newest: {known})")
    if len(found) > 1:
        raise UsageError(f"{label!r} is ambiguous in {run_dir}: {', '.join(s.label for s in found)}")
    step = found[0]
    missing = sorted(set(range(world)) - set(step.files))
    if missing:
        raise UsageError(f"{step.label} is incomplete: ranks {_ranges_or_dash(missing)} of {world} have no file of it")
    return _dlaunch_step(step), world


def _read_step(step: resume.Step, world: int) -> tuple[dict, dict]:
    """rank -> strategy doc and rank -> loaded state (memory-mapped) for every rank of the step."""
    import torch

    missing = [r for r in range(world) if not os.path.exists(ckptstore.companion(step.files[r]))]
    if missing:
        raise UsageError(f"{step.label}: ranks {_ranges_or_dash(missing)} have no strategy file "
                         f"({os.path.basename(ckptstore.companion(step.files[missing[0]]))}); merge needs "
                         "checkpoints saved with checkpoint.save_sliced")
    docs, states = {}, {}
    for rank in range(world):
        path = step.files[rank]
        doc, problem = read_json(ckptstore.companion(path), ckptstore.companion(path))   # bounded, no FIFO wait
        if problem or not isinstance(doc, dict):
            raise UsageError(problem or f"cannot read {ckptstore.companion(path)}: not a JSON object")
        if doc.get("format") != checkpoint.STRATEGY_FORMAT or not isinstance(doc.get("sliced"), dict):
            raise UsageError(f"cannot read {ckptstore.companion(path)}: unknown strategy format "
                             f"{doc.get('format')!r}")
        if doc.get("rank") != rank or doc.get("world_size") != world:
            raise UsageError(f"{ckptstore.companion(path)} says rank {doc.get('rank')} of "
                             f"{doc.get('world_size')}, but it is rank {rank}'s file in a run of {world}")
        try:
            states[rank] = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
        except Exception as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise UsageError(f"cannot load {path}: {first}") from None
        docs[rank] = doc
    return docs, states


def _same(a, b) -> bool:
    import torch

    if torch.is_tensor(a) or torch.is_tensor(b):
        if not (torch.is_tensor(a) and torch.is_tensor(b)) or a.dtype != b.dtype or a.shape != b.shape:
            return False
        if torch.equal(a, b):
            return True
        return a.is_floating_point() and torch.equal(a.isnan(), b.isnan()) and \
            torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))
    try:
        return bool(a == b) or (a != a and b != b)   # NaN == NaN here
    except Exception:
        return False


class _Merger:
    """Walks every rank's state in step, joining sliced tensors and checking replicated values."""

    def __init__(self, docs: dict, states: dict):
        self.docs, self.states = docs, states
        self.ranks = sorted(states)
        self.sliced: dict[str, dict] = {}     # name -> strategy entry (dim, count, full_shape)
        self.replicated = 0

    def run(self):
        merged = self._node("", [self.states[r] for r in self.ranks])
        unseen = sorted(set(self.docs[self.ranks[0]]["sliced"]) - set(self.sliced))
        if unseen:
            raise UsageError(f"the strategy files name tensors the checkpoints do not have: {', '.join(unseen)}")
        return merged

    def _differs(self, what: str, path: str, values: list, test) -> None:
        bad = [r for r, value in zip(self.ranks[1:], values[1:]) if not test(values[0], value)]
        if bad:
            raise UsageError(f"{what} {path or '(top level)'!r} differs across ranks: rank(s) "
                             f"{', '.join(map(str, bad))} do not match rank {self.ranks[0]}")

    def _node(self, path: str, values: list):
        import torch

        first = values[0]
        if isinstance(first, dict):
            self._differs("structure at", path, values, lambda a, b: isinstance(b, dict) and a.keys() == b.keys())
            out = copy.copy(first)
            for key in first:
                out[key] = self._node(checkpoint.tree_path(path, key), [v[key] for v in values])
            return out
        if type(first) in (list, tuple):
            self._differs("structure at", path, values, lambda a, b: type(a) is type(b) and len(a) == len(b))
            return type(first)(self._node(checkpoint.tree_path(path, i), [v[i] for v in values])
                               for i in range(len(first)))
        if torch.is_tensor(first) and path in self.docs[self.ranks[0]]["sliced"]:
            return self._join_slices(path, values)
        self._differs("replicated tensor" if torch.is_tensor(first) else "replicated value", path, values, _same)
        if torch.is_tensor(first):
            self.replicated += 1
        return first

    def _join_slices(self, path: str, values: list):
        import torch

        entries = {}
        for rank, value in zip(self.ranks, values):
            entry = self.docs[rank]["sliced"].get(path)
            if entry is None:
                raise UsageError(f"tensor {path!r} is sliced on rank {self.ranks[0]} but not on rank {rank}")
            if list(value.shape) != entry["shape"]:
                raise UsageError(f"rank {rank}'s slice of {path!r} has shape {list(value.shape)}, its strategy "
                                 f"file says {entry['shape']}")
            entries[rank] = entry
        reference = entries[self.ranks[0]]
        layout = ("dim", "count", "full_shape")
        for rank, entry in entries.items():
            if any(entry[key] != reference[key] for key in layout):
                raise UsageError(f"tensor {path!r} is sliced differently on ranks {self.ranks[0]} and {rank}: "
                                 + ", ".join(f"{k} {reference[k]} vs {entry[k]}" for k in layout))
        by_index: dict[int, tuple[int, Any]] = {}
        for rank, value in zip(self.ranks, values):
            index = entries[rank]["index"]
            if index in by_index:   # the same slice on several ranks (hybrid layouts): replicas must agree
                owner, kept = by_index[index]
                if not _same(kept, value):
                    raise UsageError(f"slice {index} of {path!r} differs between ranks {owner} and {rank}")
            else:
                by_index[index] = (rank, value)
        absent = sorted(set(range(reference["count"])) - set(by_index))
        if absent:
            raise UsageError(f"tensor {path!r}: no rank holds slice(s) {_ranges_or_dash(absent)} of "
                             f"{reference['count']}")
        full = torch.cat([by_index[i][1] for i in range(reference["count"])], dim=reference["dim"])
        if list(full.shape) != reference["full_shape"]:
            raise UsageError(f"tensor {path!r}: slices join to shape {list(full.shape)}, the strategy says "
                             f"{reference['full_shape']}")
        self.sliced[path] = reference
        return full


def _merged(run_dir: str, step: str | None):
    chosen, world = _pick_step(run_dir, step)
    docs, states = _read_step(chosen, world)
    merger = _Merger(docs, states)
    return chosen, world, merger.run(), merger


# --------------------------------------------------------------------------
# merge, reshard
# --------------------------------------------------------------------------


def merge(run_dir: str, output: str, step: str | None = None, force: bool = False) -> dict:
    """Join every rank's slices of one step into one full checkpoint at ``output`` (by the rules of every
    ``-o``: ``userfiles.write_output``).

    Default step: the newest one every rank saved.  Replicated tensors must be identical on every
    rank.  Returns {step, ranks, tensors, sliced, replicated, bytes, output}.
    """
    from launcher.base.userfiles import write_output

    chosen, world, state, merger = _merged(run_dir, step)
    write = ckptstore.torch_writer(state)
    where = write_output(output, write, force=force, binary=True, by_path=True)
    size = os.path.getsize(output) if os.path.isfile(output) else None
    return {"step": chosen.label, "ranks": world, "tensors": len(merger.sliced) + merger.replicated,
            "sliced": len(merger.sliced), "replicated": merger.replicated, "bytes": size, "output": where}


def reshard(run_dir: str, ranks: int, output_dir: str, step: str | None = None) -> dict:
    """Re-slice a step saved by N ranks for ``ranks`` ranks, as a run directory of its own.

    Writes ``output_dir/rank_NNN/ckpt/{label}.pt`` plus strategy files, exactly as ``save_sliced``
    would have on ``ranks`` ranks, so the result can be merged, listed, or resumed with
    ``dlaunch run --resume output_dir --ranks M``.  Every sliced dim must divide by ``ranks``.
    """
    if not isinstance(ranks, int) or ranks < 1:
        raise UsageError(f"--ranks must be a positive integer, not {ranks!r}")
    chosen, world, state, merger = _merged(run_dir, step)
    for path, entry in merger.sliced.items():
        size = entry["full_shape"][entry["dim"]]
        if size % ranks:
            raise UsageError(f"cannot reshard {path!r} for {ranks} ranks: its split dim {entry['dim']} has size "
                             f"{size}, not divisible by {ranks}")
    name = chosen.label + ".pt"
    targets = [os.path.join(output_dir, rank_dir_name(r, ranks), CKPT_DIR) for r in range(ranks)]
    taken = [os.path.join(t, n) for t in targets for n in (name, chosen.label + checkpoint.STRATEGY_SUFFIX)
             if os.path.lexists(os.path.join(t, n))]
    if taken:
        raise UsageError(f"{taken[0]} already exists; reshard never overwrites, choose another output directory")
    spec = {path: entry["dim"] for path, entry in merger.sliced.items()}
    written, total = [], 0
    for rank, target in enumerate(targets):
        width = {path: merger.sliced[path]["full_shape"][dim] // ranks for path, dim in spec.items()}

        def cut(path, leaf, rank=rank, width=width):
            return leaf.narrow(spec[path], rank * width[path], width[path]) if path in spec else leaf

        part = checkpoint.map_leaves(state, cut)
        slicing = {path: (dim, rank, ranks) for path, dim in spec.items()}
        written.append(checkpoint.save_slice(part, slicing, rank, ranks, target, name, chosen.prefix))
        total += os.path.getsize(written[-1])
    return {"step": chosen.label, "from_ranks": world, "ranks": ranks, "sliced": len(spec),
            "files": written, "bytes": total, "output_dir": output_dir}
