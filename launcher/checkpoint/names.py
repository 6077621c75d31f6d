"""Every checkpoint file name dlaunch recognises, in one place: its own and MindSpore's.

dlaunch's (``launcher.checkpoint``, the seeds' convention)::

    {prefix}-{epoch}_{step}.pt                   a checkpoint
    .{name}~{host}~{pid}~{random}.tmp            a save in progress (hidden), renamed onto {name} when whole

MindSpore's ``ModelCheckpoint`` (2.x: ``mindspore/train/callback/_checkpoint.py``,
``train/serialization.py:_exec_save``, ``train/model.py:_save_final_ckpt``)::

    {prefix}-{epoch}_{step}.ckpt                 a checkpoint; .safetensors with CheckpointConfig(format=...)
    {prefix}-{epoch}_{step}.tmp                  a save in progress, renamed onto the .ckpt/.safetensors
    {prefix}-graph.meta                          the network's graph, once per callback: not a checkpoint
    {prefix}-{epoch}_{step}_breakpoint.ckpt      saved when training raised (exception_save): never resumed
    {prefix}_{N}-...                             the same, from a callback made where files of {prefix}
                                                 already were (``_chg_ckpt_file_name_if_same_exist``)

A *series* is what one prefix means: ``lenet_2-3_10.ckpt`` continues the series ``lenet`` (instance 2,
newer than ``lenet_1`` and ``lenet``) when the directory holds other MindSpore files of ``lenet`` or
``lenet_K``, since MindSpore invents the suffix only then; a lone ``resnet_50`` stays its own series.
Nothing here touches the file system.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from launcher.base.border import ascii_int

CHECKPOINT = "checkpoint"
BREAKPOINT = "breakpoint"
GRAPH = "graph"
TEMPORARY = "temporary"

DLAUNCH_FORMAT = "pt"
MINDSPORE_FORMATS = ("ckpt", "safetensors")
TEMP_SUFFIX = ".tmp"
REPLICA_SUFFIX = ".replica"   # beside a checkpoint saved with replicated=True: it holds every rank's state

_NUMBERED = re.compile(r"^(?P<prefix>.+)-(?P<epoch>\d+)_(?P<step>\d+)"
                       r"(?P<end>\.pt|\.ckpt|\.safetensors|_breakpoint\.ckpt|\.tmp)$")
_GRAPH = re.compile(r"^(?P<prefix>.+)-graph\.meta$")
_INVENTED = re.compile(r"^(?P<base>.+)_(?P<n>[1-9]\d*)$")
_ENDS = {".pt": (CHECKPOINT, "pt"), ".ckpt": (CHECKPOINT, "ckpt"), ".safetensors": (CHECKPOINT, "safetensors"),
         "_breakpoint.ckpt": (BREAKPOINT, "ckpt"), ".tmp": (TEMPORARY, None)}


@dataclass(frozen=True)
class Name:
    """What a file name says: its kind, prefix (as written), epoch and step, and format (pt, ckpt, safetensors)."""

    kind: str
    prefix: str
    epoch: int | None = None
    step: int | None = None
    format: str | None = None

    @property
    def mindspore(self) -> bool:
        """Written by MindSpore (a checkpoint, breakpoint or graph; its temporaries say nothing of their format)."""
        return self.format in MINDSPORE_FORMATS or self.kind == GRAPH


def parse(name: str) -> Name | None:
    """What ``name`` is, or None for anything that is no checkpoint file of dlaunch or MindSpore."""
    if name.startswith("."):
        temp = parse_dlaunch_temporary(name)
        return Name(TEMPORARY, temp[0]) if temp else None
    match = _NUMBERED.match(name)
    if match:
        kind, fmt = _ENDS[match["end"]]
        return Name(kind, match["prefix"], int(match["epoch"]), int(match["step"]), fmt)
    match = _GRAPH.match(name)
    return Name(GRAPH, match["prefix"], format=None) if match else None


def file_name(kind: str, prefix: str, epoch: int, step: int, fmt: str) -> str:
    """The file name of a checkpoint or breakpoint: the inverse of ``parse``."""
    if kind == BREAKPOINT:
        return f"{prefix}-{epoch}_{step}_breakpoint.{fmt}"
    return f"{prefix}-{epoch}_{step}.{fmt}"


def dlaunch_name(prefix: str, epoch: int, step: int) -> str:
    """The name ``launcher.checkpoint`` saves ``prefix``/``epoch``/``step`` under."""
    return file_name(CHECKPOINT, prefix, epoch, step, DLAUNCH_FORMAT)


def parse_dlaunch(name: str) -> tuple[str, int, int] | None:
    """(prefix, epoch, step) of a dlaunch checkpoint name (``.pt``), or None for anything else."""
    parsed = parse(name)
    if parsed is None or parsed.kind != CHECKPOINT or parsed.format != DLAUNCH_FORMAT:
        return None
    if parsed.epoch is None or parsed.step is None:
        return None
    return parsed.prefix, parsed.epoch, parsed.step


def dlaunch_temporary_prefix(name: str, host: str, pid: int) -> str:
    """What a temporary for ``name`` starts with (``atomic.temp_beside`` adds random letters and TEMP_SUFFIX)."""
    return f".{name}~{host}~{pid}~"


def parse_dlaunch_temporary(name: str) -> tuple[str, str, int] | None:
    """(checkpoint name, host, pid) of a dlaunch temporary, or None."""
    if not (name.startswith(".") and name.endswith(TEMP_SUFFIX)):
        return None
    parts = name[1:].rsplit("~", 3)
    pid = ascii_int(parts[2], max_digits=10) if len(parts) == 4 else None   # "²".isdigit(), yet no int
    return None if pid is None else (parts[0], parts[1], pid)


def series(names: Iterable[Name]) -> dict[str, tuple[str, int]]:
    """For the names of one directory: each MindSpore prefix written -> (its series, its instance).

    The instance is 0 for the series' own prefix and N for ``{series}_{N}``, so the larger, the newer.
    """
    written = {name.prefix for name in names if name.mindspore}
    bases: dict[str, set[str]] = {}
    for prefix in written:
        match = _INVENTED.match(prefix)
        bases.setdefault(match["base"] if match else prefix, set()).add(prefix)
    found = {}
    for prefix in written:
        match = _INVENTED.match(prefix)
        if match and len(bases.get(match["base"], ())) > 1:
            found[prefix] = (match["base"], int(match["n"]))
        else:
            found[prefix] = (prefix, 0)
    return found


Key = tuple[str, int, int, str]   # (series prefix, epoch, step, format)


def by_series(names: Iterable[str], kind: str = CHECKPOINT) -> dict[Key, str]:
    """The checkpoints (or breakpoints) among one directory's file names, keyed by (series, epoch, step,
    format); where one step was saved under several prefixes of a series, the newest instance's file."""
    parsed = [(name, found) for name in names if (found := parse(name)) is not None]
    instances = series(found for _, found in parsed)
    chosen: dict[Key, tuple[int, str]] = {}
    for name, found in parsed:
        if found.kind != kind or found.epoch is None or found.step is None or found.format is None:
            continue   # a checkpoint's or breakpoint's name always has all three: never true for ``kind``
        base, instance = instances.get(found.prefix, (found.prefix, 0))
        key = (base, found.epoch, found.step, found.format)
        if key not in chosen or instance > chosen[key][0]:
            chosen[key] = (instance, name)
    return {key: name for key, (_, name) in chosen.items()}
