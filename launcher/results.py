"""How ranks ended: the result model of an attempt, THE exit-code rule, and the one wording every message uses.

A rank that exits 3 "exited with code 3"; one killed by SIGKILL "died of SIGKILL (exit 137)", naming both
the signal and the code the shell and dlaunch report for it; one that could not start says why; one judged
hung says so.  Closing lines, the head's report over SSH, ``status`` and restart messages all use
``how_it_ended``, so the same event never reads two ways.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

HANG_EXIT_CODE = 124  # as coreutils timeout: the job was stopped because it stopped making progress


def how_it_ended(entry: dict) -> str:
    """``entry``: a rank's summary record (or a root cause): exit_code, signal, spawn_error, hung."""
    if entry.get("spawn_error"):
        how = entry["spawn_error"]
    elif entry.get("signal"):
        how = f"died of {entry['signal']} (exit {entry.get('exit_code')})"
    else:
        how = f"exited with code {entry.get('exit_code')}"
    return f"hung and was stopped ({how})" if entry.get("hung") else how


@dataclass
class RankResult:
    """How one process of an attempt went: a rank, or (``role`` "scheduler") MindSpore's scheduler."""

    rank: int | None
    local_rank: int | None
    device_id: int | None
    server_id: str
    log_file: str
    error_file: str | None
    pid: int | None = None
    start: float | None = None
    end: float | None = None
    returncode: int | None = None   # as Popen: negative for "killed by signal"
    spawn_error: str | None = None
    hang: str | None = None          # why dlaunch judged this rank hung, if it did
    stack_file: str | None = None
    role: str = "rank"

    @property
    def exit_code(self) -> int | None:
        """The shell's convention: 128+N for a rank killed by signal N."""
        if self.returncode is None:
            return None
        return 128 - self.returncode if self.returncode < 0 else self.returncode

    @property
    def signal_name(self) -> str | None:
        if self.returncode is None or self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"

    def to_dict(self) -> dict:
        return {"rank": self.rank, "local_rank": self.local_rank, "device_id": self.device_id,
                "host": self.server_id, "pid": self.pid, "start": self.start, "end": self.end,
                "exit_code": self.exit_code, "signal": self.signal_name, "log": self.log_file,
                **({"spawn_error": self.spawn_error} if self.spawn_error else {}),
                **({"hung": True, "reason": self.hang} if self.hang else {}),
                **({"stack_file": self.stack_file} if self.stack_file else {}),
                **({"role": self.role} if self.role != "rank" else {})}


@dataclass
class AttemptResult:
    """One attempt of a host's plan: every rank's result, the root cause, and THE exit-code rule."""

    attempt: int
    ranks: list[RankResult]
    scheduler: RankResult | None = None
    root_cause: RankResult | None = None
    interrupted_by: int | None = None     # the signal dlaunch received, if that ended the attempt
    launcher_error: str | None = None     # dlaunch itself could not go on (a full disk): it stopped the ranks
    stopped_at: float | None = None
    extra: dict = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        if self.root_cause is not None:
            return HANG_EXIT_CODE if self.root_cause.hang else (self.root_cause.exit_code or 1)
        if self.launcher_error is not None:
            return 1
        if self.interrupted_by is not None:
            return 128 + self.interrupted_by
        return 0
