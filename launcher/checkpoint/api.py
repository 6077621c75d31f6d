"""Checkpoints from inside a training script: atomic saves, rotation, breakpoints, resume, sliced saving.

Training scripts reach it through the package (``from launcher import checkpoint``); torch is imported only
inside the functions that need it, so the launcher itself never pays for it.

Every file is written the same way: a ``torch.save`` archive (``file.write_torch``, at about
the disk's speed) into a hidden temporary file in the target directory, ``fsync``, ``os.replace``
onto the final name, ``fsync`` of the directory.  A file with a checkpoint's name
(``{prefix}-{epoch}_{step}.pt``, see ``names``) is therefore always whole, and a process killed
mid-save leaves the previous checkpoint untouched and only a hidden temporary, which
``resume.scan`` ignores and the next save into that directory removes.

``store`` writes every file. ``async_save=True`` does exactly that in a background thread
(``writer``) after capturing the state (``stage``: one memory copy), and returns a ``SaveHandle``
at once.

Nothing is ever overwritten: saving a name that already exists (a restarted run re-saving a step
an earlier attempt had saved on some ranks only) keeps the old file in ``superseded/`` (a second
name, given before the new file replaces it in one rename, so the step stays listed throughout).

Sliced (per-rank) saving writes, beside each rank's file, ``{prefix}-{epoch}_{step}.strategy.json``
(format below); ``dlaunch ckpt merge`` (``observe/ckpt.py``) rebuilds full tensors from slice and strategy files alone::

    {"format": 1, "checkpoint": "mp-2_10.pt", "rank": 1, "world_size": 4,
     "sliced": {"model.fc1.weight": {"dim": 1, "index": 1, "count": 4, "full_shape": [32, 64],
                                     "shape": [32, 16], "dtype": "float32"}},
     "replicated": ["model.fc1.bias", "model.fc2.weight", ...]}

Tensor names are the paths of the tensors in the saved object, keys joined by dots:
``model.fc1.weight`` for ``{"model": net.state_dict()}``, ``optimizer.state.0.momentum_buffer``.
"""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import sys
import threading

from launcher.checkpoint import memory as ckptmemory
from launcher.checkpoint import names as ckptnames
from launcher.checkpoint import store as ckptstore
from launcher.checkpoint import writer as ckptwriter
from launcher.checkpoint.gasp import from_collective, notice, notice_saved, wait_for_notice
from launcher.checkpoint.store import STRATEGY_SUFFIX, SUPERSEDED_DIR  # noqa: F401 (part of this module's API)
from launcher.contract import CKPT_DIR_ENV, RESUME_FROM_ENV, RESUME_STEP_ENV, RUN_DIR_ENV

STRATEGY_FORMAT = 1
BREAKPOINT_DIR = "breakpoint"
INTEGRATED_DIR = "integrated"



# --------------------------------------------------------------------------
# where, who
# --------------------------------------------------------------------------


def ckpt_dir() -> str:
    """This rank's checkpoint directory, created: ``DLAUNCH_CKPT_DIR``, else ``./ckpt_<rank>`` as in the seeds.

    Under dlaunch every rank of every run has its own directory, so ranks and runs never share a path.
    """
    directory = os.environ.get(CKPT_DIR_ENV) or \
        f"./ckpt_{os.environ.get('RANK') or os.environ.get('RANK_ID') or 0}"
    os.makedirs(directory, exist_ok=True)
    return directory


def _rank_and_world() -> tuple[int, int]:
    """The process group's view when one is initialised, else the launcher's env (torchrun, then MindSpore names)."""
    if "torch" in sys.modules:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()

    def first(names, default):
        for name in names:
            if os.environ.get(name):
                return int(os.environ[name])
        return default

    return first(("RANK", "RANK_ID"), 0), first(("WORLD_SIZE", "RANK_SIZE"), 1)


def _checked_name(prefix: str, epoch: int, step: int) -> str:
    name = ckptnames.dlaunch_name(prefix, epoch, step)
    if (not isinstance(epoch, int) or not isinstance(step, int) or os.sep in prefix
            or ckptnames.parse_dlaunch(name) != (prefix, epoch, step)):
        raise ValueError(f"cannot name a checkpoint prefix={prefix!r} epoch={epoch!r} step={step!r}: "
                         "epoch and step must be non-negative integers and the prefix a plain file name "
                         "not starting with '.'")
    return name


def _save(state, directory: str, name: str, prefix: str, keep_max: int | None = None,
          strategy_text: str | None = None, async_save: bool = False):
    """A save now (after any in the background, whose failure it raises first), or queued for the background."""
    ckptstore.check_keep_max(keep_max)

    def store(snapshot):
        return ckptstore.store(snapshot.state, directory, name, prefix, keep_max, strategy_text, snapshot.locations)

    if not async_save:
        writer = ckptwriter.active()
        if writer is not None:
            writer.settle()
        return ckptwriter.store_now(state, store)
    os.makedirs(directory, exist_ok=True)
    return ckptwriter.writer().submit(os.path.join(directory, name), state, store)


# --------------------------------------------------------------------------
# public: save, load, breakpoints
# --------------------------------------------------------------------------


def save(state, epoch: int, step: int, prefix: str = "ckpt", keep_max: int | None = None,
         directory: str | None = None, async_save: bool = False, replicated: bool = False,
         memory: bool = False, persist: bool | None = None):
    """Save ``state`` atomically as ``{directory}/{prefix}-{epoch}_{step}.pt`` (default: ``ckpt_dir()``).

    The name is the seeds' (MindSpore ModelCheckpoint) and what ``dlaunch run --resume`` looks for.
    An existing file of that name is kept in ``superseded/``, never overwritten.  ``keep_max=N``
    then keeps only the newest N checkpoints of this prefix here; keep at least 2 if ranks may die
    mid-save, so that a step every rank finished survives.  Returns the path.

    ``async_save=True`` returns a ``SaveHandle`` as soon as ``state`` is copied (training may change
    it at once); the file is written in the background with the same guarantees, listed only when
    whole.  ``handle.wait()`` returns the path or raises what failed; a failure nobody waited for
    is raised by the next save (either kind) or ``wait_for_saves()``.  A new save first waits for
    the one in flight (``configure_async``).  The interpreter's exit waits for saves in flight, and
    SIGTERM lets them finish first.

    ``replicated=True`` says ``state`` is every rank's (data parallel: each rank holds the whole model and
    optimizer): a ``.replica`` mark beside the file, written first, lets a step that some ranks never saved
    (they died; the survivors saved on the notice) count as complete, each of those ranks resuming from a
    replica's file.

    ``memory=True`` (under ``dlaunch run --memory-ckpt``) copies ``state`` into memory dlaunch owns, which
    outlives this process, and returns the slot's path once copied (None when skipped: dlaunch was still
    persisting the slot); dlaunch writes the step to this rank's checkpoint directory in the background when
    ``persist`` (default: every Nth memory save, ``--memory-persist-every``, the first included) and at a
    failure.  A state over the memory budget, a full memory file system, no ``--memory-ckpt`` or a child process
    save to disk instead (as without ``memory``), after one line on stderr.  See ``memory`` and
    docs/checkpoints.md.
    """
    name = _checked_name(prefix, epoch, step)
    if memory:
        ckptstore.check_keep_max(keep_max)   # it goes into the record dlaunch reads

        def on_disk():
            return save(state, epoch, step, prefix, keep_max, directory, async_save, replicated)
        disk_path = os.path.join(directory or ckpt_dir(), name)
        return ckptmemory.save(state, epoch, step, prefix, name, disk_path, on_disk, persist, keep_max, replicated)
    directory = directory or ckpt_dir()
    if replicated:   # before the checkpoint: a file listed is never without its mark
        with open(os.path.join(directory, name + ckptnames.REPLICA_SUFFIX), "w", encoding="utf-8") as fh:
            fh.write("every rank's state\n")
    return _save(state, directory, name, prefix, keep_max, async_save=async_save)


def save_on_notice(state, epoch: int, step: int, prefix: str = "ckpt", wait: float = 0.0, **save_options) -> bool:
    """When a peer failed (``notice()``, ``--survivor-window``): save ``state`` as step ``epoch``/``step`` now,
    wait for it to be on disk, tell dlaunch (``notice_saved``) and return True; else return False, at once or
    after ``wait`` seconds without a notice (in the handler of a collective's error: the peer's failure may be
    told a moment after its sockets closed). The wait applies only while handling an error raised inside torch's
    distributed, DDP or autograd code (``gasp.from_collective``): the rank's own error returns False at once, so
    it is re-raised and heard without delay. ``save_options`` go to ``save`` (``replicated=True`` for a
    data-parallel rank's state)."""
    if wait > 0 and not from_collective(sys.exc_info()[1]):
        wait = 0.0
    if (wait_for_notice(wait) if wait > 0 else notice()) is None:
        return False
    wait_for_saves()   # a background save in flight first: the gasp must not race it
    save(state, epoch, step, prefix=prefix, **save_options)
    notice_saved()
    return True


def wait_for_saves() -> None:
    """Wait until every background save of this process is written; raise the first failure not yet raised."""
    writer = ckptwriter.active()
    if writer is not None:
        writer.settle()


def configure_async(max_in_flight: int | None = None, buffer_bytes: int | None = None) -> None:
    """Limits of background saves in this process: how many may be captured and not yet written
    (default 1: a new save waits for the previous), and how many bytes of host buffers (pinned for
    device tensors) are kept for reuse between saves (default: a quarter of the host's memory over
    ``LOCAL_WORLD_SIZE``; a larger state is partly staged in memory allocated for that save only)."""
    ckptwriter.writer().configure(max_in_flight, buffer_bytes)


def load(path: str | None = None, map_location="cpu", weights_only: bool = True, map_memory: bool = False):
    """Load a checkpoint; by default the one ``dlaunch run --resume`` gave this rank (``DLAUNCH_RESUME_FROM``).

    Returns None when there is nothing to resume, so a script can start fresh or resume with one call.
    ``weights_only`` (torch's safe loader) accepts tensors, state dicts and plain Python values.  Without
    ``path``, the step is read from this rank's memory slots when the newest memory save is that checkpoint
    and verifies whole (a copy: nothing returned aliases the slot), else from the disk.  ``map_memory=True``
    maps that slot copy-on-write instead of copying it (milliseconds; the slot is then retired, its memory held
    while the loaded tensors live: ``memory.load``).
    """
    if not path:
        path = os.environ.get(RESUME_FROM_ENV)
        if not path:
            return None
        found, state = ckptmemory.load(path, map_location, weights_only, map_memory)
        if found:
            return state
    import torch

    return torch.load(path, map_location=map_location, weights_only=weights_only)


def memory_step() -> tuple[int, int] | None:
    """(epoch, step) of this rank's newest complete memory save (``save(..., memory=True)``), or None."""
    return ckptmemory.memory_step()


def resume_step() -> tuple[int, int] | None:
    """(epoch, step) of the checkpoint being resumed (``DLAUNCH_RESUME_STEP="3_156"``), or None."""
    value = os.environ.get(RESUME_STEP_ENV)
    if not value:
        return None
    match = re.fullmatch(r"(\d+)_(\d+)", value.strip())
    if not match:
        raise ValueError(f"{RESUME_STEP_ENV}={value!r} is not EPOCH_STEP (for example 3_156)")
    return int(match[1]), int(match[2])


def _failed(kind, exc) -> bool:
    if kind is None or issubclass(kind, GeneratorExit):
        return False
    if issubclass(kind, SystemExit):
        return exc.code not in (0, None)
    return True


class saving_on_exception:
    """Context manager: if the block fails, save ``state_fn()`` as a breakpoint, then let the error propagate.

    The breakpoint goes to ``<ckpt_dir>/breakpoint/{prefix}_breakpoint-{epoch}_{step}.pt``: kept
    apart, so ``--resume`` never picks a possibly inconsistent mid-step state and rotation never
    deletes it.  Update ``.epoch`` and ``.step`` as training advances::

        with checkpoint.saving_on_exception(lambda: {"model": net.state_dict()}) as here:
            for epoch in ...:
                for step in ...:
                    here.epoch, here.step = epoch, step
                    ...

    Failures are exceptions, Ctrl-C and non-zero ``sys.exit``.  Inside the block, ``signals``
    (default SIGTERM, which dlaunch sends before its grace period ends in SIGKILL) whose handler is
    still the default raise ``SystemExit(128 + signum)``, so a stopped job saves a breakpoint too.
    """

    def __init__(self, state_fn, epoch: int = 0, step: int = 0, prefix: str = "ckpt",
                 directory: str | None = None, signals=(signal.SIGTERM,)):
        self.state_fn, self.epoch, self.step, self.prefix = state_fn, epoch, step, prefix
        self.directory, self.signals = directory, tuple(signals)
        self.path: str | None = None   # the breakpoint saved, if any
        self._previous: dict = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in self.signals:
                if ckptwriter.handler_below(signum) is signal.SIG_DFL:   # below a background save's guard
                    ckptwriter.set_handler_below(signum, self._on_signal)
                    self._previous[signum] = signal.SIG_DFL
        return self

    @staticmethod
    def _on_signal(signum, frame):
        raise SystemExit(128 + signum)

    def __exit__(self, kind, exc, tb):
        for signum, handler in self._previous.items():
            if ckptwriter.handler_below(signum) is self._on_signal:
                ckptwriter.set_handler_below(signum, handler)
        self._previous.clear()
        if not _failed(kind, exc):
            return False
        name = _checked_name(f"{self.prefix}_breakpoint", self.epoch, self.step)
        writer = ckptwriter.active()
        if writer is not None:
            writer.drain()   # background saves finish first; their failures are reported as usual, not here
        try:
            directory = os.path.join(self.directory or ckpt_dir(), BREAKPOINT_DIR)
            self.path = ckptstore.store(self.state_fn(), directory, name, f"{self.prefix}_breakpoint")
        except Exception as error:  # the original failure matters more than the breakpoint
            print(f"dlaunch checkpoint: could not save a breakpoint after {kind.__name__}: {error}",
                  file=sys.stderr, flush=True)
            return False
        print(f"dlaunch checkpoint: {kind.__name__} at epoch {self.epoch} step {self.step}; "
              f"breakpoint saved to {self.path}", file=sys.stderr, flush=True)
        return False


# --------------------------------------------------------------------------
# sliced and integrated saving
# --------------------------------------------------------------------------


def tree_path(path: str, key) -> str:
    return f"{path}.{key}" if path else str(key)


def leaves(obj, path: str = ""):
    """(path, leaf) for every leaf of nested dicts, lists and tuples."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from leaves(value, tree_path(path, key))
    elif type(obj) in (list, tuple):
        for index, value in enumerate(obj):
            yield from leaves(value, tree_path(path, index))
    else:
        yield path, obj


def map_leaves(obj, fn, path: str = ""):
    """A copy of ``obj`` with every leaf replaced by ``fn(path, leaf)``; dict types (and their
    ``_metadata``, which ``load_state_dict`` reads) are kept."""
    if isinstance(obj, dict):
        out = copy.copy(obj)
        for key, value in obj.items():
            out[key] = map_leaves(value, fn, tree_path(path, key))
        return out
    if type(obj) in (list, tuple):
        return type(obj)(map_leaves(value, fn, tree_path(path, index)) for index, value in enumerate(obj))
    return fn(path, obj)


def _slicing(strategy: dict, rank: int, world: int) -> dict[str, tuple[int, int, int]]:
    """name -> (dim, index, count).  An int dim means sliced across all ranks in rank order; a
    (dim, index, count) triple allows hybrid layouts (sliced over a group, replicated across groups)."""
    spec = {}
    for name, value in strategy.items():
        if isinstance(value, int) and not isinstance(value, bool):
            spec[name] = (value, rank, world)
        elif isinstance(value, (tuple, list)) and len(value) == 3 and all(isinstance(v, int) for v in value):
            spec[name] = tuple(value)
        else:
            raise ValueError(f"strategy[{name!r}] = {value!r}: expected a split dim or (dim, index, count)")
        dim, index, count = spec[name]
        if count < 1 or not 0 <= index < count:
            raise ValueError(f"strategy[{name!r}]: slice index {index} is not in 0..{count - 1}")
    return spec


def _strategy_doc(state, spec: dict, rank: int, world: int, name: str):
    """The strategy file for one rank's slice file, and the state to save (slices copied out of any
    larger storage, since torch.save writes a view's whole storage)."""
    import torch

    sliced, replicated = {}, []
    for path, leaf in leaves(state):
        if not torch.is_tensor(leaf):
            if path in spec:
                raise ValueError(f"strategy names {path!r}, which is a {type(leaf).__name__}, not a tensor")
            continue
        if path not in spec:
            replicated.append(path)
            continue
        dim, index, count = spec[path]
        if not -leaf.dim() <= dim < leaf.dim():
            raise ValueError(f"strategy splits {path!r} along dim {dim}, but it has {leaf.dim()} dims")
        dim %= leaf.dim()
        full = list(leaf.shape)
        full[dim] *= count
        sliced[path] = {"dim": dim, "index": index, "count": count, "full_shape": full,
                        "shape": list(leaf.shape), "dtype": str(leaf.dtype).removeprefix("torch.")}
    unknown = sorted(set(spec) - set(sliced))
    if unknown:
        raise ValueError(f"strategy names tensors the state does not have: {', '.join(unknown)}")

    def own_storage(path, leaf):
        if path in sliced and leaf.untyped_storage().nbytes() > leaf.numel() * leaf.element_size():
            return leaf.detach().clone()
        return leaf

    doc = {"format": STRATEGY_FORMAT, "checkpoint": name, "rank": rank, "world_size": world,
           "sliced": sliced, "replicated": replicated}
    return doc, map_leaves(state, own_storage)


def save_slice(state, spec, rank: int, world: int, directory: str, name: str, prefix: str,
                 keep_max: int | None = None, async_save: bool = False):
    doc, state = _strategy_doc(state, spec, rank, world, name)
    text = re.sub(r"\[\s*([-\d,\s]*?)\s*\]", lambda m: "[" + re.sub(r"\s+", " ", m[1]) + "]",
                  json.dumps(doc, indent=1))   # shapes on one line
    return _save(state, directory, name, prefix, keep_max, text + "\n", async_save=async_save)


def save_sliced(state_dict, strategy: dict, epoch: int, step: int, prefix: str = "ckpt",
                keep_max: int | None = None, directory: str | None = None, async_save: bool = False):
    """Each rank saves its own slices (the seeds' ``integrated_save=False``), with a strategy file beside.

    ``strategy`` maps tensor name -> split dim for tensors sliced across ranks, in rank order
    (absent: replicated, identical on every rank); a ``(dim, index, count)`` triple instead says
    this rank holds slice ``index`` of ``count`` (hybrid layouts: sliced within a group of ranks,
    replicated across groups).  The slice file is a normal checkpoint (same
    name, same atomic save), so ``--resume`` hands every rank its own slices back; ``dlaunch ckpt
    merge`` joins the slices into one full checkpoint, ``dlaunch ckpt reshard`` re-slices them for
    another number of ranks.  Slices must be of equal size, as shard strategies require.
    ``async_save=True``: as for ``save``.
    """
    rank, world = _rank_and_world()
    return save_slice(state_dict, _slicing(strategy, rank, world), rank, world, directory or ckpt_dir(),
                        _checked_name(prefix, epoch, step), prefix, keep_max, async_save)


def _gather_sliced(state, spec: dict, world: int):
    """Every rank's copy of ``state`` with the sliced tensors joined (a collective: every rank calls it)."""
    import torch
    import torch.distributed as dist

    names = sorted(spec)
    mine = torch.tensor([spec[name][1] for name in names], dtype=torch.long)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)    # every rank's slice index of every sliced tensor
    indices = [dict(zip(names, ranks_indices.tolist())) for ranks_indices in gathered]

    def join(path, leaf):
        if path not in spec:
            return leaf
        dim, _, count = spec[path]
        parts = [torch.empty_like(leaf) for _ in range(world)]
        dist.all_gather(parts, leaf.contiguous())
        by_index = {}
        for rank, part in enumerate(parts):
            by_index.setdefault(indices[rank][path], part)
        return torch.cat([by_index[i] for i in range(count)], dim=dim % leaf.dim())

    return map_leaves(state, join)


def save_integrated(state, epoch: int, step: int, prefix: str = "ckpt", strategy: dict | None = None,
                    keep_max: int | None = None, async_save: bool = False):
    """Save one full checkpoint for the whole job (the seeds' ``integrated_save=True``), from global rank 0.

    It goes to ``$DLAUNCH_RUN_DIR/integrated/{prefix}-{epoch}_{step}.pt`` (``./integrated`` outside
    dlaunch), apart from the per-rank files ``--resume`` uses.  Without ``strategy``, ``state`` must
    already be full; only rank 0 writes, the others return None at once.  With ``strategy`` (as for
    ``save_sliced``) the sliced tensors are first all-gathered, so every rank must call it.  There is
    no barrier at the end: call ``dist.barrier()`` if other ranks must wait for the file.
    ``async_save=True``: as for ``save`` (the gather stays synchronous; rank 0 writes in the background).
    """
    rank, world = _rank_and_world()
    if strategy and world > 1:
        import torch.distributed as dist

        if not dist.is_initialized():
            raise RuntimeError(f"save_integrated with a strategy on {world} ranks needs an initialised "
                               "process group to gather the slices")
        state = _gather_sliced(state, _slicing(strategy, rank, world), world)
    if rank != 0:
        return None
    directory = os.path.join(os.environ.get(RUN_DIR_ENV) or ".", INTEGRATED_DIR)
    return _save(state, directory, _checked_name(prefix, epoch, step), prefix, keep_max, async_save=async_save)


def broadcast_parameters(model, src: int = 0, skip=()) -> None:
    """Copy rank ``src``'s parameters and buffers to every rank (the seeds' ``parameter_broadcast``).

    Ranks that initialise or load differently then start from identical replicas.  ``skip`` names
    parameters that differ by design (slices in model parallelism).  A no-op without an initialised
    process group or with one rank, so single-process runs need no special case.
    """
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    skip = set(skip)
    with torch.no_grad():
        for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
            if name not in skip:
                dist.broadcast(tensor.data, src)
