"""The survivors' window: after a rank fails, the ranks still alive are told why and may save before the stop.

Ascend's MindIO TTP ("dying gasp" checkpoint), MindSpore's recovery and TorchFT need the surviving ranks
alive long enough to dump the state from a healthy replica; a launcher that stops every survivor within
milliseconds loses everything since the last checkpoint. With ``--survivor-window S``, when an attempt
stops because a rank failed or hung (here or on another host), each surviving rank of this host gets:

- ``notice.json`` in its rank directory (``DLAUNCH_NOTICE_FILE``), written atomically: the attempt, the
  failed rank and host, the reason, its exit code, when, and the window's end;
- ``--notice-signal`` (e.g. SIGUSR1) to its process group, if one was chosen;

and then S seconds, ending early once every survivor has exited or written ``notice.saved`` beside it
(``launcher.checkpoint.notice_saved()``). The window ``--fault-tolerant`` turns on (``listeners_only``) waits
only for ranks that asked for a notice at least once (``notice.listening``, written by
``launcher.checkpoint.notice()``): a script that never asks is stopped at once, as without a window. Then the
usual stop: SIGTERM, the grace period, SIGKILL, with global rank 0 signalled last (it hosts MindIO's and
MindSpore's controller, which the others' saves need).
"""

from __future__ import annotations

import json
import os
import time

from launcher.base.atomic import write_atomically
from launcher.base.border import is_regular, remove_file
from launcher.contract import NOTICE_FILE, NOTICE_LISTENING_FILE, NOTICE_SAVED_FILE

CHECK_SECONDS = 0.05   # how often the window looks for survivors that saved


class SurvivorWindow:
    """One attempt's window: the notices written, and whether every survivor (a ``RankProcess``) is done.
    The workers send ``--notice-signal`` once the notices are written."""

    def __init__(self, survivors: list, cause: dict, seconds: float, attempt: int, listeners_only: bool = False):
        self.survivors = survivors
        self.listeners_only = listeners_only   # a survivor that never asked for a notice is done at once
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
        """The window's time is up, or every survivor has exited or saved."""
        if time.monotonic() >= self.until:
            return True
        return all(not p.alive or is_regular(os.path.join(p.spec.rank_dir, NOTICE_SAVED_FILE))
                   or (self.listeners_only and not self.listening(p)) for p in self.survivors)

    @staticmethod
    def listening(process) -> bool:
        """Whether this survivor asked for a notice in this attempt (it saves on one)."""
        return is_regular(os.path.join(process.spec.rank_dir, NOTICE_LISTENING_FILE))

    def wait(self) -> float:
        """Seconds until the window should be looked at again."""
        return max(0.0, min(CHECK_SECONDS, self.until - time.monotonic()))


def clear_notices(rank_dirs: list[str]) -> list[str]:
    """A new attempt starts with no notice: the last attempt's are removed before its ranks start. Returns a
    line for each that could not be (a directory a rank made in its place is left as it is, and not taken
    for a save)."""
    return [line for rank_dir in rank_dirs for name in (NOTICE_FILE, NOTICE_SAVED_FILE, NOTICE_LISTENING_FILE)
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
