"""A rank's side of the survivors' window (``dlaunch run --survivor-window``): was a peer lost, and "I saved".

When a rank fails, dlaunch writes ``notice.json`` into every surviving rank's directory (the path is in
``DLAUNCH_NOTICE_FILE``) and, with ``--notice-signal``, sends that signal too; then it waits, up to the
window, until each survivor has exited or said it saved. A training loop asks ``notice()`` each step (a
file's existence: no system call beyond ``stat``), or handles the signal, and then saves:

    for step in ...:
        train_step()
        if checkpoint.save_on_notice(model.state_dict(), epoch, step):
            break   # saved the step this rank reached; dlaunch stops it when every survivor is done

``checkpoint.save_on_notice`` (in ``api``, beside ``save``) saves synchronously (the gasp must be on disk
before the window ends) and says so with ``notice_saved()``. No torch import here: asking costs nothing on
a rank that never gets a notice.
"""

from __future__ import annotations

import os

from launcher.base.border import Refused, read_json
from launcher.contract import NOTICE_FILE_ENV, NOTICE_SAVED_FILE, NOTICE_WATCHED_FILE

NOTICE_LIMIT = 1 << 16   # bytes of a notice read (dlaunch writes a few hundred)
_watched: str | None = None   # the notice path this process said it watches (once, on its first notice())


def notice() -> dict | None:
    """The notice of this attempt, if a peer failed: ``{"failed_rank", "host", "reason", "exit_code", "kind",
    "at", "window_ends", "attempt"}``; None when there is none (or no window was asked for).

    The first call also tells dlaunch that this rank watches for notices (``notice.watched``): the window
    waits only for such ranks, so a script that never asks costs a failure no time."""
    path = os.environ.get(NOTICE_FILE_ENV)
    if path and path != _watched:
        _say_watched(path)
    if not path or not os.path.exists(path):
        return None
    try:
        found = read_json(path, "the notice", NOTICE_LIMIT)
    except Refused:
        return None   # written atomically by dlaunch: what else is there is no notice
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if isinstance(found, dict) and (attempt is None or str(found.get("attempt")) == attempt):
        return found
    return None


def _say_watched(path: str) -> None:
    global _watched
    try:
        os.close(os.open(os.path.join(os.path.dirname(path), NOTICE_WATCHED_FILE), os.O_WRONLY | os.O_CREAT, 0o644))
    except OSError:
        return   # a rank directory gone or full: the window then does not wait for this rank, as before a notice
    _watched = path


def wait_for_notice(seconds: float) -> dict | None:
    """``notice()``, asked every 10 ms for up to ``seconds``: after a collective failed, the notice of the peer
    that caused it may come a moment later than the error (a peer killed from outside is noticed at its exit)."""
    import time

    deadline = time.monotonic() + seconds
    while True:
        found = notice()
        if found is not None or time.monotonic() >= deadline:
            return found
        time.sleep(0.01)


def notice_saved() -> None:
    """Tell dlaunch this rank has saved what it must: the window ends once every survivor has (or exited)."""
    path = os.environ.get(NOTICE_FILE_ENV)
    if path:
        with open(os.path.join(os.path.dirname(path), NOTICE_SAVED_FILE), "w", encoding="utf-8") as fh:
            fh.write("saved\n")


# Where a failed collective's error is raised from: torch's distributed package (gloo, NCCL, HCCL through c10d),
# DDP and autograd (a backward's all-reduce) and torch_npu's; an error raised in the script's own code is not one.
_COLLECTIVE_PARTS = ("/torch/distributed/", "/torch/nn/parallel/", "/torch/autograd/", "/torch_npu/")


def from_collective(error: BaseException | None) -> bool:
    """Whether ``error`` was raised inside torch's distributed, DDP or autograd code (its innermost frame there):
    a collective that broke because a peer failed, whose notice may still be on its way. An error the rank's own
    code raised is its own failure: nobody will send it a notice, so waiting for one only delays dlaunch's
    hearing of it (the raise hook speaks when the exception leaves the script)."""
    tb = getattr(error, "__traceback__", None)
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    where = tb.tb_frame.f_code.co_filename.replace(os.sep, "/")
    return any(part in where for part in _COLLECTIVE_PARTS)
