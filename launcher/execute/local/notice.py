"""The survivors' window: after a rank fails, the ranks still alive are told why and may save before the stop.

Ascend's MindIO TTP ("dying gasp" checkpoint), MindSpore's recovery and TorchFT need the surviving ranks
alive long enough to dump the state from a healthy replica; a launcher that stops every survivor within
milliseconds loses everything since the last checkpoint. With ``--survivor-window S``, when an attempt
stops because a rank failed or hung (here or on another host), each surviving rank of this host gets:

- ``notice.json`` in its rank directory (``DLAUNCH_NOTICE_FILE``), written atomically: the attempt, the
  failed rank and host, the reason, its exit code, when, and the window's end;
- ``--notice-signal`` (e.g. SIGUSR1) to its process group, if one was chosen;

and then S seconds, ending early once every survivor has exited or written ``notice.saved`` beside it
(``launcher.checkpoint.notice_saved()``). Only a rank that watches for notices (its first
``checkpoint.notice()`` wrote ``notice.watched``), or that ``--notice-signal`` tells, is waited for: a
script that never asks costs a failure no time. A rank that raised (``raised.py``) is stopped at once, so
its peers' collectives fail now and their handlers can save (docs/checkpoints.md). Then the usual stop:
SIGTERM, the grace period, SIGKILL, with global rank 0 signalled last (it hosts MindIO's and MindSpore's
controller, which the others' saves need).
"""

from __future__ import annotations

import json
import os
import time

from launcher.base.atomic import write_atomically
from launcher.base.border import is_regular, remove_file
from launcher.contract import NOTICE_FILE, NOTICE_SAVED_FILE, NOTICE_WATCHED_FILE

CHECK_SECONDS = 0.05   # how often the window looks for survivors that saved


class SurvivorWindow:
    """One attempt's window: the notices written, and whether every survivor (a ``RankProcess``) is done.
    The workers send ``--notice-signal`` once the notices are written."""

    def __init__(self, survivors: list, cause: dict, seconds: float, attempt: int, signalled: bool = False):
        """``signalled``: the survivors also get ``--notice-signal``, so each may save; else the window waits
        only for the ranks that watch for notices (``notice.watched``: their first ``checkpoint.notice()``)."""
        self.survivors = survivors
        self.signalled = signalled
        self.until = time.monotonic() + seconds
        notice = {"attempt": attempt, **cause, "at": time.time(), "window_ends": time.time() + seconds}
        text = json.dumps(notice, default=str) + "\n"
        self.unwritten: list[str] = []
        for process in survivors:
            path = os.path.join(process.spec.rank_dir, NOTICE_FILE)
            try:
                write_atomically(path, lambda fh: fh.write(text))
            except OSError as exc:
                self.unwritten.append(f"{path}: {exc.strerror}")

    def over(self) -> bool:
        """The window's time is up, or every survivor that may save has exited or saved."""
        if time.monotonic() >= self.until:
            return True
        return not any(self.waits_for(p) for p in self.survivors)

    def waits_for(self, process) -> bool:
        """Whether the window waits for this survivor: alive, and it may save and has not said it did."""
        return process.alive and self._may_save(process.spec.rank_dir)

    def _may_save(self, rank_dir: str) -> bool:
        """Not saved yet, and watching for notices (or told by a signal): a script that never asks costs nothing."""
        return not is_regular(os.path.join(rank_dir, NOTICE_SAVED_FILE)) and (
            self.signalled or is_regular(os.path.join(rank_dir, NOTICE_WATCHED_FILE)))

    def wait(self) -> float:
        """Seconds until the window should be looked at again."""
        return max(0.0, min(CHECK_SECONDS, self.until - time.monotonic()))


def clear_notices(rank_dirs: list[str]) -> list[str]:
    """A new attempt starts with no notice: the last attempt's are removed before its ranks start. Returns a
    line for each that could not be (a directory a rank made in its place is left as it is, and not taken
    for a save)."""
    return [line for rank_dir in rank_dirs for name in (NOTICE_FILE, NOTICE_SAVED_FILE, NOTICE_WATCHED_FILE)
            if (line := remove_file(os.path.join(rank_dir, name), "the notice file")) is not None]


def notice_cause(root_cause=None, stopped_by: dict | None = None, host: str = "") -> dict:
    """What a survivor is told of the failure: the rank, its host, how it ended (here, or on another host)."""
    if stopped_by is not None:
        cause = stopped_by.get("cause") or {}
        return {"failed_rank": cause.get("rank"), "host": cause.get("host"), "reason": stopped_by.get("why"),
                "exit_code": cause.get("rank_exit_code", cause.get("exit_code")), "kind": cause.get("kind")}
    from launcher.execute.results import how_it_ended

    entry = root_cause.to_dict()
    return {"failed_rank": root_cause.rank, "host": host or root_cause.server_id,
            "reason": f"rank {root_cause.rank} {how_it_ended(entry)}", "exit_code": root_cause.exit_code,
            "kind": "hung" if root_cause.hang else "failed"}
