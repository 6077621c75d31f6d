"""``beat()``: tell dlaunch's hang detection this rank is making progress, without printing anything.

Call it from the training loop (once a step is fine: it touches a file at most
once a second).  Outside dlaunch it does nothing.
"""

import os
import time

from launcher.contract import HEARTBEAT_FILE, RANK_DIR_ENV

_last = 0.0


def beat() -> None:
    global _last
    now = time.monotonic()
    rank_dir = os.environ.get(RANK_DIR_ENV)
    if not rank_dir or now - _last < 1.0:
        return
    _last = now
    path = os.path.join(rank_dir, HEARTBEAT_FILE)
    try:
        os.utime(path)
    except FileNotFoundError:
        open(path, "a").close()
