"""Rank 1 fails first under torchelastic's @record, but its exit is seen last; rank 0 fails after it.

Rank 1 raises ValueError inside a @record entry point (which writes its TORCHELASTIC_ERROR_FILE), then its
interpreter shutdown lingers (an atexit handler; SIGTERM ignored, as a rank busy in C code would) and it exits 1;
with RECORD_FIRST_STOPPED=1 it does not ignore SIGTERM, so the launcher's stop ends it (issue 38, item 25).
Rank 0 waits until rank 1's error file is written, then exits 3: the launcher sees rank 0's exit first.
"""

import atexit
import os
import pathlib
import signal
import sys
import time

MARKER = pathlib.Path(os.environ["DLAUNCH_RUN_DIR"]) / "rank1_recorded"


def linger():
    MARKER.touch()
    time.sleep(1.5)


if os.environ["RANK"] == "0":
    deadline = time.time() + 60
    while not MARKER.exists() and time.time() < deadline:
        time.sleep(0.02)
    sys.exit(3)

from torch.distributed.elastic.multiprocessing.errors import record  # noqa: E402


@record
def main():
    if os.environ.get("RECORD_FIRST_STOPPED") != "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    atexit.register(linger)
    raise ValueError("rank 1 broke first")


main()
