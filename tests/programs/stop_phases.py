"""A rank for tests/e2e/test_stop_phases.py: marks each start, fails once (rank 0 of the first attempt), and
otherwise runs on ignoring SIGTERM (so only dlaunch's SIGKILL ends it) until the attempt is long over.

argv: MARKS_DIR [--quick]  (--quick: a later attempt's ranks exit 0 at once)
"""

import os
import pathlib
import signal
import sys
import time

marks = pathlib.Path(sys.argv[1])
rank, attempt = os.environ["RANK"], os.environ["TORCHELASTIC_RESTART_COUNT"]
(marks / f"start.{rank}.{attempt}").touch()
if attempt != "0":
    sys.exit(0)
if rank == "0":
    time.sleep(0.3)
    sys.exit(3)
signal.signal(signal.SIGTERM, lambda *_: (marks / f"term.{rank}.{attempt}").touch())
from launcher import checkpoint  # noqa: E402 - it watches for notices, so a survivors' window waits for it

end = time.monotonic() + 300
while time.monotonic() < end:
    checkpoint.notice()
    time.sleep(0.05)
