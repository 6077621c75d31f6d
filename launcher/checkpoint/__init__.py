"""The training side of dlaunch: what a rank imports, and the launcher's reading of what ranks saved.

Training scripts use ``from launcher import checkpoint`` (``checkpoint.save``, ``load``,
``saving_on_exception``, ``save_sliced``, ...) and ``from launcher import heartbeat``; both paths are
the public API and stay.  The package's modules, each with one job:

    api        the functions training scripts call (re-exported here; torch imported only inside them)
    gasp       a rank's side of the survivors' window: a peer failed (``notice``), save now, "saved"
    memory     the memory tier's rank side: ``save(..., memory=True)`` into dlaunch's slots, ``load`` from them
    archive    a torch.save archive laid out in place in a buffer (a memory slot)
    tier       the memory tier's layout and commit record, shared with the launcher
    store      the one way a checkpoint file reaches the disk: temporary, fsync, rename, rotation, superseded/
    file       the file format: torch.save's archive, written at the disk's speed
    stage      async saves: one copy of the state into reused host buffers
    writer     async saves: the background thread and its signal and exit guards
    names      every checkpoint file-name rule (dlaunch's and MindSpore's), shared with the launcher
    heartbeat  ``beat()``: a rank's sign of life for the hang watch (``launcher.heartbeat`` re-exports it)
    resume     the launcher's reader of the same files: complete steps, the ``ResumePoint`` a plan carries,
               a requeued Slurm job

``resume`` lives here, not among the launcher's stages, because what a complete step is follows from what
``store`` writes and ``names`` spells: one subject, one room.  ``heartbeat`` lives here because a rank
calls it (and ``file`` calls it during long saves); the launcher's side of it is only the file name, in
``launcher.contract``.  The package imports only the launcher's lowest floor (contract, atomic, errors,
rundir), so a training script stays light.

The API is loaded on first use (PEP 562 ``__getattr__``): the launcher imports ``names`` and ``resume`` at
every start, and importing a submodule runs this file first, so it must not load the writer, its threads
and signal guards for a launch that saves nothing.
"""

from __future__ import annotations

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:   # the names below, for the type checker; at run time ``__getattr__`` loads them
    from launcher.checkpoint.api import (
        BREAKPOINT_DIR,
        INTEGRATED_DIR,
        STRATEGY_FORMAT,
        STRATEGY_SUFFIX,
        SUPERSEDED_DIR,
        broadcast_parameters,
        ckpt_dir,
        configure_async,
        leaves,
        load,
        map_leaves,
        memory_step,
        notice,
        notice_saved,
        resume_step,
        save,
        save_integrated,
        save_on_notice,
        save_slice,
        save_sliced,
        saving_on_exception,
        tree_path,
        wait_for_saves,
    )

__all__ = [
    "BREAKPOINT_DIR", "INTEGRATED_DIR", "STRATEGY_FORMAT", "STRATEGY_SUFFIX", "SUPERSEDED_DIR",
    "broadcast_parameters", "ckpt_dir", "configure_async", "leaves", "load", "map_leaves", "memory_step", "notice",
    "notice_saved", "resume_step", "save", "save_integrated", "save_on_notice", "save_slice", "save_sliced",
    "saving_on_exception", "tree_path", "wait_for_saves",
]


def __getattr__(name: str):
    """``checkpoint.save`` and the rest of ``__all__``, from ``api`` on first use (then cached here)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from launcher.checkpoint import api

    value = getattr(api, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
