"""A rank that records every SIGUSR1/SIGUSR2/SIGWINCH it gets and exits 0 once it has seen all three.

Writes ``ready`` in its rank directory when its handlers are installed, and ``got`` with the names it saw.
"""

import os
import signal
import sys
import time

WANTED = {"SIGUSR1", "SIGUSR2", "SIGWINCH"}
rank_dir = os.environ["DLAUNCH_RANK_DIR"]
seen: list[str] = []


def record(signum, frame):
    seen.append(signal.Signals(signum).name)
    with open(os.path.join(rank_dir, "got"), "w") as fh:
        fh.write(",".join(seen))


for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH):
    signal.signal(sig, record)
open(os.path.join(rank_dir, "ready"), "w").close()
deadline = time.monotonic() + 60
while not WANTED <= set(seen):
    if time.monotonic() > deadline:
        sys.exit(3)
    time.sleep(0.02)
print("saw", ",".join(seen), flush=True)
