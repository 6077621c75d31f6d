"""``beat()``: tell dlaunch's hang detection this rank is making progress, without printing anything.

Call it from the training loop (once a step is fine: it touches a file at most
once a second).  Outside dlaunch it does nothing.

``beat(step=N)`` also says which step the rank is at: dlaunch then knows the job's progress without
reading its output (its step times, for the straggler scores, and the steps a learned hang timeout
waits for, ``--hang-learn``), and names the rank that fell behind when the job hangs.  ``with
phase("checkpoint"):`` marks a stretch that is slow on purpose (a save, an evaluation): while any rank of a
host is in a phase, the hang watch gives that host the phase's own budget instead of the step budget.

The file is tiny JSON (``{"step": N, "phase": "checkpoint", "time": T}``), replaced atomically, so the
launcher never reads half of it; a phase's start and end are written at once, steps at most once a second.
"""

import json
import os
import time
from contextlib import contextmanager

from launcher.contract import HEARTBEAT_FILE, RANK_DIR_ENV

_last = 0.0
_step = None    # the newest step given to beat()
_phase = None   # the phase the rank is in (phase())


def beat(step=None) -> None:
    """A sign of life, at most once a second; ``step`` (an int) is the step the rank is at."""
    global _last, _step
    if step is not None:
        _step = int(step)
    now = time.monotonic()
    if now - _last < 1.0:
        return
    _last = now
    _write()


@contextmanager
def phase(name: str):
    """``with phase("checkpoint"): save(...)``: the hang watch budgets this stretch as ``name`` (``--hang-learn``
    learns each phase's longest duration); the phase's start and end count as signs of life."""
    global _phase
    _phase = str(name)
    _write()
    try:
        yield
    finally:
        _phase = None
        _write()


def _write() -> None:
    rank_dir = os.environ.get(RANK_DIR_ENV)
    if not rank_dir:
        return
    path = os.path.join(rank_dir, HEARTBEAT_FILE)
    if _step is None and _phase is None:   # a plain beat: its time is all it says
        try:
            os.utime(path)
        except FileNotFoundError:
            open(path, "a").close()
        return
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as fh:
        json.dump({"step": _step, "phase": _phase, "time": time.time()}, fh)
    os.replace(temporary, path)
