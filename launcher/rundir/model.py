"""The files of a run directory as one validated model: what status, logs, report, ckpt and prune may rely on.

A run directory is input like any other: a hand edit, a truncated copy, a full disk, or someone hostile can leave
``plan.json`` as a link to ``/dev/zero``, a FIFO, JSON nested 200,000 deep, ``"world_size": 1e40`` or ``"pid": "x"``.
Every JSON file of a run is read here, once: only a regular file, only up to ``MAX_JSON_BYTES``, and then checked
against the TypedDicts below (the format dlaunch writes, layouts 1 and 2). A value of the wrong type or out of its
range is left out (the reader's default applies), a list item that is not what the list holds is dropped, an object
without its required keys is dropped; what was left out is told in one line naming the file. Readers therefore see only
checked values, and one damaged file never stops the others (or other runs) from being read.

The checker is derived from the TypedDicts (``typing.get_type_hints``): the model is declared once. ``Annotated[int,
Bound(lo, hi)]`` is a whole number in that range (never a bool), ``float`` a finite number, ``X | None`` allows null.
"""

from __future__ import annotations

import json
import math
import types
import typing
from typing import Annotated, NamedTuple, TypedDict, Union

from launcher.errors import UsageError

MAX_JSON_BYTES = 32 << 20     # a plan of thousands of ranks with their environments stays far below this
MAX_WORLD = 10**6 - 1         # ranks are numbers of at most six digits (numlists.MAX_NUMBER_DIGITS)
MAX_PID = 1 << 22             # Linux's pid_max ceiling
MAX_SHOWN_PROBLEMS = 3        # per file: the rest is counted


class Bound(NamedTuple):
    """The range of an ``Annotated[int, Bound(low, high)]`` field."""

    low: int
    high: int


class NoNul(NamedTuple):
    """The mark of an ``Annotated[str, NoNul()]`` field: a path, which a NUL would make unusable."""


Path = Annotated[str, NoNul()]
Rank = Annotated[int, Bound(0, MAX_WORLD)]
Count = Annotated[int, Bound(0, MAX_WORLD + 1)]
Device = Annotated[int, Bound(-1, MAX_WORLD)]
Pid = Annotated[int, Bound(1, MAX_PID)]
Code = Annotated[int, Bound(-(1 << 31), (1 << 31) - 1)]   # an exit code as recorded (128+N for signal N)
Port = Annotated[int, Bound(0, 65535)]
Number = Annotated[int, Bound(0, 1 << 31)]                 # attempts, restarts, layout versions, indexes


# ---------------------------------------------------------------- plan[.<host>].json


class RankSpecFile(TypedDict, total=False):
    """A rank (or the scheduler) of a host's plan."""

    rank: Rank | None
    local_rank: Device | None
    device_id: Device | None
    server_id: str
    argv: list[str]
    cwd: Path
    env: dict[str, str]
    rank_dir: Path
    log_file: Path
    env_log: Path
    ckpt_dir: Path | None     # None: the scheduler's, a TorchFT service's (no rank)
    error_file: Path | None
    console: bool       # its output goes to the console too
    role: str
    replica_group: Number | None   # --replica-groups: its TorchFT group


class PeerFile(TypedDict, total=False):
    """Another server of the job, as each host's plan names it."""

    server_id: str
    suffix: str
    ranks: str          # "8-15"


class ResumePointFile(TypedDict, total=False):
    """The checkpoint step a plan resumes from (``--resume``, a requeued Slurm job): one file per rank."""

    run_dir: Path
    label: str          # "resnet-3_156"
    epoch: Number
    step: Number
    files: dict[str, Path]   # global rank -> checkpoint path


class PlanFile(TypedDict, total=False):
    """A host's launch plan (``launcher.plan.make.LaunchPlan``, every field)."""

    layout: Number
    run_id: str
    run_dir: Path
    output_dir: Path
    server_id: str
    server_index: Number
    server_count: Count
    world_size: Count
    master_addr: str
    master_port: Port
    rank_table_file: Path
    cwd_mode: str
    grace_period: float
    survivor_window: float
    notice_signal: list[Number]
    signal_grace: float
    max_restarts: Number
    restart_policy: str
    restart_delay: float
    ms_recovery: bool
    warm_restarts: str | None
    reset_config: Path | None
    reset_hold: float
    restarts_without_progress: Number
    max_failures_per_hour: Number | None
    device_release_timeout: float
    health_gate: bool
    health_check: str | None
    unfit_exit_code: Code
    attempt: Number
    host_files_suffix: str
    hang_timeout: float | None
    hang_learn: bool
    fault_tolerance: str
    memory_ckpt: bool
    memory_budget: Annotated[int, Bound(0, 1 << 62)] | None   # bytes per rank
    memory_persist_every: Number
    memory_root: Path
    straggler_report: float
    metrics_port: Port | None
    metrics_addr: str
    step_pattern: str | None
    waiting_notice: float
    ranks: list[RankSpecFile]
    resume: ResumePointFile | None
    peers: list[PeerFile]
    is_master: bool
    scheduler: RankSpecFile | None
    services: list[RankSpecFile]   # TorchFT's group stores and lighthouse (--replica-groups)
    prefix_host: bool
    standby: bool   # --spares: the host stood by (no rank) when it wrote this plan


# ---------------------------------------------------------------- summary[.<host>].json


class RankEntryFile(TypedDict, total=False):
    """How one rank (or the scheduler, ``rank`` null) ended, in a summary; a root cause adds its log's tail."""

    rank: Rank | None
    local_rank: Device | None
    device_id: Device | None
    host: str
    pid: Pid | None
    start: float | None
    end: float | None
    exit_code: Code | None
    signal: str | None
    log: Path
    spawn_error: str
    hung: bool
    stopped_first: bool   # a hang: the rank the others waited for (execute.blame)
    reason: str | None
    stack_file: Path
    role: str
    log_tail: list[str]
    error_file_message: str
    launcher_exit_code: Code | None
    restarts: list[RankRestartFile]


class RankRestartFile(TypedDict, total=False):
    """One earlier run of a rank restarted alone (--restart-policy rank, MindCluster's RestartFaultProcess)."""

    pid: Number | None
    exit_code: Code | None
    end: float | None
    why: str


class AttemptFile(TypedDict, total=False):
    attempt: Number
    exit_code: Code | None
    root_cause: RankEntryFile | None
    ranks: list[RankEntryFile]
    unfit: bool          # the health gate found the host unfit: no rank of it started


class ResumedFromFile(TypedDict, total=False):
    run_dir: Path
    step: str


class JobCauseFile(RankEntryFile, total=False):
    """What ended a multi-host job (``execute.job``): a rank's entry, or a lost host, an error, a signal."""

    kind: str
    why: str
    rank_exit_code: Code | None
    findings: list[str]   # the health gate's (kind "unhealthy"): one line each
    checks: list[str]     # and each of its checks: passed, skipped or failed, and why
    output: Path          # the file that keeps the gate's tools' answers
    reschedule: bool


class ReplacedFile(TypedDict, total=False):
    """A host a spare replaced (``cluster --spares``)."""

    by: str
    why: str


class RosterFile(TypedDict, total=False):
    """With spares: the hosts of the job's last attempt, the spares standing by, the hosts excluded (until,
    seconds since the epoch) and every replacement so far."""

    active: list[str]
    standing_by: list[str]
    excluded: dict[str, float]
    replaced: dict[str, ReplacedFile]


class JobVerdictFile(TypedDict, total=False):
    """The verdict the hosts of one job agreed on; every host's summary carries the same one."""

    status: str
    exit_code: Code | None
    root_cause: JobCauseFile | None
    host_exit_codes: dict[str, Code | None]
    lost_hosts: dict[str, str]
    absent_hosts: list[str]
    roster: RosterFile


class StoppedByFile(TypedDict, total=False):
    """Why a host whose own ranks succeeded still failed: another host's cause (``execute.job``)."""

    why: str
    exit_code: Code | None
    cause: JobCauseFile


class SummaryFile(TypedDict, total=False):
    """How a host's launch ended (``execute.results.summarize``)."""

    run_id: str
    run_dir: Path
    host: str
    server_index: Number
    world_size: Count
    status: str
    exit_code: Code | None
    started: float
    ended: float
    ranks_started: float | None
    resumed_from: ResumedFromFile | None
    newest_complete_checkpoint: str | None
    root_cause: RankEntryFile | None
    launcher_error: str
    interrupted_by: str | None
    ranks: list[RankEntryFile]
    scheduler: RankEntryFile
    attempts: list[AttemptFile]
    warnings: list[str]
    job: JobVerdictFile
    stopped_by: StoppedByFile
    no_restart: str        # why restarts stopped before they ran out (exit 93, execute/budget.py)
    standby: bool          # --spares: this host stood by in the last attempt


class HeadHostFile(TypedDict, total=False):
    """One host of a ``cluster --ssh`` job, as the head saw it."""

    host: str
    target: str
    ranks: list[Rank]
    status: str
    exit_code: Code | None
    started_at: float | None
    ended_at: float | None
    told: str | None       # the signal the head sent it, if any
    reason: str | None     # why it was lost
    summary: Path | None   # its own summary file


class HeadSummaryFile(TypedDict, total=False):
    """summary.head.json: the head's verdict over every host of a ``cluster --ssh`` job
    (``execute.ssh.outcome.head_summary``)."""

    run_id: str
    run_dir: Path
    world_size: Count
    status: str
    exit_code: Code | None
    started: float
    ended: float
    interrupted_by: str | None
    root_cause: RankEntryFile | None
    hosts_started_within_s: float | None
    hccl_connect_timeout_default_s: float
    hosts: list[HeadHostFile]
    roster: RosterFile   # --spares: the hosts of the last attempt, as the job link last said


# ---------------------------------------------------------------- pids[.<host>].json


class PublishedPidFile(TypedDict, total=False):
    pid: Pid
    start: float
    attempt: Number
    restarts: Number   # times this rank was started again alone in this attempt


class PidsFile(TypedDict, total=False):
    """The live pids a host's launcher publishes once its processes started (``execute.attempts``)."""

    launcher_pid: Pid
    ranks: dict[str, PublishedPidFile]
    scheduler: PublishedPidFile


# ---------------------------------------------------------------- reading and checking

_BAD = object()   # what a value that fails its check becomes: left out by its container


class _Findings:
    def __init__(self) -> None:
        self.shown: list[str] = []
        self.count = 0

    def add(self, where: str, why: str) -> None:
        self.count += 1
        if len(self.shown) < MAX_SHOWN_PROBLEMS:
            where = where if len(where) <= 60 else where[:57] + "..."   # keys are input too
            self.shown.append(f"{where or 'the top level'}: {why}")

    def line(self, name: str) -> str | None:
        if not self.count:
            return None
        more = f" (and {self.count - len(self.shown)} more)" if self.count > len(self.shown) else ""
        return f"{name}: ignored {'; '.join(self.shown)}{more}"


def _shown(value) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, (dict, list)) else type(value).__name__
    return text if len(text) <= 24 else text[:21] + "..."


Check = typing.Callable[[object, str, "_Findings"], object]
_CHECKERS: dict = {}


def _checker(tp) -> Check:
    """The check of ``tp``, built once per type: what ``typing`` says of a type is read here, not once per
    value (a 1,024-rank plan holds some 100,000 values; reading the hints per value made ``status`` slow)."""
    if tp not in _CHECKERS:
        _CHECKERS[tp] = _build(tp)
    return _CHECKERS[tp]


def _build(tp) -> Check:
    """``value`` if it is a ``tp`` (containers cleaned of what is not), else _BAD (told to ``found``)."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        base, *extras = typing.get_args(tp)
        inner = _checker(base)
        bound = next((e for e in extras if isinstance(e, Bound)), None)
        no_nul = any(isinstance(e, NoNul) for e in extras)

        def annotated(value, where, found):
            checked = inner(value, where, found)
            if checked is not _BAD and bound and not bound.low <= checked <= bound.high:
                found.add(where, f"{_shown(value)} is outside {bound.low}..{bound.high}")
                return _BAD
            if checked is not _BAD and no_nul and "\x00" in checked:
                found.add(where, "a path with a NUL byte")
                return _BAD
            return checked
        return annotated
    if origin in (Union, types.UnionType):
        arms = [arm for arm in typing.get_args(tp) if arm is not type(None)]
        nullable, first = len(arms) < len(typing.get_args(tp)), _checker(arms[0])

        def union(value, where, found):
            return None if value is None and nullable else first(value, where, found)
        return union
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        item_check = _checker(item_tp)

        def listed(value, where, found):
            if not isinstance(value, list):
                found.add(where, f"{_shown(value)} is not a list")
                return _BAD
            items = (item_check(item, f"{where}[{i}]", found) for i, item in enumerate(value))
            return [item for item in items if item is not _BAD]
        return listed
    if origin is dict:
        value_check = _checker(typing.get_args(tp)[1])

        def mapped(value, where, found):
            if not isinstance(value, dict):
                found.add(where, f"{_shown(value)} is not an object")
                return _BAD
            pairs = ((key, value_check(item, f"{where}.{key}", found)) for key, item in value.items())
            return {key: item for key, item in pairs if item is not _BAD}
        return mapped
    if typing.is_typeddict(tp):
        fields: list[tuple[str, Check]] = []   # filled on first use: a model may name itself through others

        def typed(value, where, found):
            if not isinstance(value, dict):
                found.add(where, f"{_shown(value)} is not an object")
                return _BAD
            if not fields:
                fields.extend((key, _checker(key_tp))
                              for key, key_tp in typing.get_type_hints(tp, include_extras=True).items())
            out = {}
            for key, check in fields:
                if key in value:
                    checked = check(value[key], f"{where}.{key}" if where else key, found)
                    if checked is not _BAD:
                        out[key] = checked
            return out
        return typed
    return lambda value, where, found: _check_scalar(value, tp, where, found)


def _check_scalar(value, tp, where: str, found: _Findings):
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        value = float(value) if ok else value
    elif tp is str:
        ok = isinstance(value, str)
    else:   # pragma: no cover - a type the model above does not use
        raise TypeError(f"rundir_model cannot check {tp!r}")
    if not ok:
        kind = {bool: "true or false", int: "a whole number", float: "a finite number", str: "text"}[tp]
        found.add(where, f"{_shown(value)} is not {kind}")
        return _BAD
    return value


def checked(data, model, name: str) -> tuple[dict | None, str | None]:
    """(``data`` as ``model`` holds it, or None when it is not even an object; a line naming ``name`` if
    anything was left out)."""
    found = _Findings()
    value = _checker(model)(data, "", found)   # a TypedDict's check returns a dict or _BAD
    return (None if value is _BAD else typing.cast(dict, value)), found.line(name)


def read_json(path: str, name: str) -> tuple[object, str | None]:
    """The JSON value of a run-directory file, or (None, one line saying why not); never unbounded, never
    waiting on a FIFO, never a RecursionError. A file that is simply absent is (None, None)."""
    import os

    from launcher.base.userfiles import read_text

    if not os.path.lexists(path):
        return None, None
    try:
        text = read_text(path, "run file", MAX_JSON_BYTES)
    except UsageError as exc:
        if not os.path.lexists(path):
            return None, None    # replaced or removed between the look and the read
        return None, f"{name}: {str(exc).removeprefix(f'cannot read run file {path}: ')}"
    try:
        return parse_run_file(text), None
    except ValueError as exc:   # the border's Refused
        return None, f"{name}: {str(exc).removeprefix('run file: ')}"


def parse_run_file(text: str):
    """A run-directory file's JSON (summary, plan, pids), through the border's bounds; Refused otherwise."""
    from launcher.base.border import parse_json

    return parse_json(text, "run file", constants=True)   # Python's json writes NaN and Infinity; read them back


def load(path: str, model, name: str) -> tuple[dict | None, str | None]:
    """A run-directory file read (``read_json``) and checked against ``model``."""
    import os

    data, problem = read_json(path, name)
    if problem:
        return None, problem
    if not isinstance(data, dict):   # None: absent, unless the file says null
        return None, f"{name}: not a JSON object" if data is not None or os.path.lexists(path) else None
    return checked(data, model, name)
