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
a rank that never gets a notice. The first time a process asks, it writes ``notice.listening`` beside the
notice: the window ``--fault-tolerant`` turns on waits only for ranks that listen.
"""

from __future__ import annotations

import os

from launcher.base.border import Refused, read_json
from launcher.contract import NOTICE_FILE_ENV, NOTICE_LISTENING_FILE, NOTICE_SAVED_FILE

NOTICE_LIMIT = 1 << 16   # bytes of a notice read (dlaunch writes a few hundred)
_listening: list[str] = []   # the notice file this process said it listens for (once per process)


def notice() -> dict | None:
    """The notice of this attempt, if a peer failed: ``{"failed_rank", "host", "reason", "exit_code", "kind",
    "at", "window_ends", "attempt"}``; None when there is none (or no window was asked for)."""
    path = os.environ.get(NOTICE_FILE_ENV)
    if not path:
        return None
    if path not in _listening:
        _listening.append(path)
        _say(path, NOTICE_LISTENING_FILE, "listening\n")
    if not os.path.exists(path):
        return None
    try:
        found = read_json(path, "the notice", NOTICE_LIMIT)
    except Refused:
        return None   # written atomically by dlaunch: what else is there is no notice
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if isinstance(found, dict) and (attempt is None or str(found.get("attempt")) == attempt):
        return found
    return None


def notice_saved() -> None:
    """Tell dlaunch this rank has saved what it must: the window ends once every survivor has (or exited)."""
    path = os.environ.get(NOTICE_FILE_ENV)
    if path:
        with open(os.path.join(os.path.dirname(path), NOTICE_SAVED_FILE), "w", encoding="utf-8") as fh:
            fh.write("saved\n")


def _say(notice_path: str, name: str, text: str) -> None:
    """A small file beside the notice, for dlaunch; a rank directory it cannot write costs the rank nothing."""
    try:
        with open(os.path.join(os.path.dirname(notice_path), name), "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError:
        pass

